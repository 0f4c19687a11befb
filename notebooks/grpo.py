# %% [markdown]
# # 占位

# %%
print(1 + 1)
