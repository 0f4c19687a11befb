# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/reward_model.ipynb)

# %% [markdown]
# # 第 3 章 奖励模型：Bradley–Terry
#
# 用带标签噪声的偏好对训练一个查表奖励模型，在留出偏好对上看它的准确率，
# 再看标签噪声与训练步数（过度自信）的影响。所有函数都来自 `rlhf_toy` 包，正文见第 3 章。
# 在 CPU 上几秒钟跑完。

# %%
# 在 Colab 里安装 rlhf_toy；本地已经安装时什么也不做。
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("rlhf_toy") is None:
    source = os.environ.get("RLHF_TOY_SOURCE", "git+https://github.com/rlhf-toy/rlhf-toy")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)
    importlib.invalidate_caches()

# 导入 rlhf_toy 时，它在任何张量计算之前固定 CPU 指令集与线程数（见 rlhf_toy.numerics），所以这一格要最先运行。
# 在 x86-64 上，训练过程打印的数字与网页逐位相同；在 ARM 笔记本或换了 torch 版本（例如 Colab 自带的）时可能不同。
import rlhf_toy  # noqa: E402, F401

# %% [markdown]
# ## 训练第 4 章要用的奖励模型
#
# 标签噪声 0.2、每个提示词 2 个训练偏好对、居中系数 0.01、100 步；留出集是每个提示词 4 个标签全对的偏好对。

# %%
import matplotlib.pyplot as plt
import torch

from rlhf_toy import BanditTask, RewardConfig, TableRewardModel, train_reward_model
from rlhf_toy.demos.rlhf import build_reward_model

torch.set_num_threads(1)  # 张量都很小：多线程只增加开销（机器繁忙时尤其明显）
torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=8)
reward_model, history, eval_pairs = build_reward_model(task, label_noise=0.2)
top1 = (reward_model.table.argmax(dim=1) == task.correct).float().mean().item()
print(
    f"训练准确率 {history[-1]['accuracy']:.3f}，留出准确率 {history[-1]['eval_accuracy']:.3f}，正确回答排第一 {top1:.3f}"
)
assert history[-1]["accuracy"] > history[-1]["eval_accuracy"]

fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
steps = [h["step"] for h in history]
axes[0].plot(steps, [h["loss"] for h in history])
axes[0].set_xlabel("step")
axes[0].set_ylabel("Bradley-Terry loss")
axes[1].plot(steps, [h["accuracy"] for h in history], label="train accuracy")
axes[1].plot(steps, [h["eval_accuracy"] for h in history], label="held-out accuracy")
axes[1].set_xlabel("step")
axes[1].set_ylim(0, 1.05)
axes[1].legend()
plt.show()

# %% [markdown]
# ## 奖励表长什么样
#
# 每行一个提示词，每列一个回答；黑框是正确回答。没在任何偏好对里出现过的回答，分数停在 0；
# 但分数为 0 的不都是没见过的：一对标反会把正确回答夹在两个错误回答中间，它的两个梯度相消，分数也停在 0（见第 3 章正文）。

# %%
table = reward_model.table.detach()
fig, ax = plt.subplots(figsize=(5, 6))
im = ax.imshow(table, cmap="coolwarm", vmin=-table.abs().max(), vmax=table.abs().max())
for x, y in enumerate(task.correct.tolist()):
    ax.add_patch(plt.Rectangle((y - 0.5, x - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.5))
ax.set_xlabel("answer")
ax.set_ylabel("prompt")
ax.set_title("Learned reward table (box = correct answer)")
fig.colorbar(im, ax=ax, shrink=0.7)
plt.show()
print(f"分数恰为 0 的回答比例（多数是没见过的，也包括被一对标反的偏好夹在中间的正确回答）{(table == 0).float().mean().item():.3f}")

# %% [markdown]
# ## 标签噪声与留出准确率
#
# 留出集换成正文噪声表用的那一份（紧接着 `BanditTask.make` 抽出），所以 0.0–0.4 这几档的数字与正文的表相同；
# 上面 `build_reward_model` 的留出集是在它的训练对之后抽的，是另一份。

# %%
torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=8)  # 与上面是同一个任务
eval_pairs = task.noisy_preference_pairs(4, 0.0)  # 与正文噪声表相同的留出集
noises = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
train_acc, eval_acc = [], []
for noise in noises:
    torch.manual_seed(1)
    pairs = task.noisy_preference_pairs(2, noise)
    rm = TableRewardModel(20, 8)
    h = train_reward_model(rm, pairs, RewardConfig(steps=100, center_rewards_coefficient=0.01), eval_pairs)
    train_acc.append(h[-1]["accuracy"])
    eval_acc.append(h[-1]["eval_accuracy"])
    print(f"label_noise {noise:.1f}：训练准确率 {train_acc[-1]:.3f}，留出准确率 {eval_acc[-1]:.3f}")
assert eval_acc[0] > eval_acc[-1]

fig, ax = plt.subplots(figsize=(5, 3.5))
ax.plot(noises, train_acc, marker="o", label="train accuracy")
ax.plot(noises, eval_acc, marker="o", label="held-out accuracy")
ax.set_xlabel("label noise rate")
ax.set_ylabel("preference accuracy")
ax.set_ylim(0, 1.05)
ax.legend()
plt.show()

# %% [markdown]
# ## 过度自信：间隔越训越大
#
# 同样的数据（噪声 0.2）训练 1000 步，比较有无居中项。留出准确率早就不变了，间隔（margin）却还在涨。

# %%
torch.manual_seed(1)
pairs = task.noisy_preference_pairs(2, 0.2)
runs = {}
for c in (None, 0.01):
    rm = TableRewardModel(20, 8)
    runs[c] = train_reward_model(rm, pairs, RewardConfig(steps=1000, center_rewards_coefficient=c), eval_pairs)
    print(
        f"center_rewards_coefficient={c}：第 1000 步 margin {runs[c][-1]['margin']:.2f}，max_reward {runs[c][-1]['max_reward']:.2f}"
    )
assert runs[None][-1]["margin"] > runs[None][99]["margin"]
assert runs[0.01][-1]["max_reward"] < runs[None][-1]["max_reward"]

fig, ax = plt.subplots(figsize=(6, 3.5))
for c, h in runs.items():
    ax.plot([x["step"] for x in h], [x["margin"] for x in h], label=f"margin, c={c}")
    ax.plot([x["step"] for x in h], [x["max_reward"] for x in h], linestyle="--", label=f"max reward, c={c}")
ax.set_xlabel("step")
ax.set_ylabel("reward units")
ax.set_title("Over-confidence of a Bradley-Terry reward model")
ax.legend()
plt.show()

# %% [markdown]
# ## 动手写：Bradley–Terry 损失
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_bradley_terry_loss` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_bradley_terry_loss


def my_bradley_terry_loss(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    raise NotImplementedError  # 换成你的实现：返回 (loss, {"accuracy": ..., "margin": ...})


# %%
result = check_bradley_terry_loss(my_bradley_terry_loss)
