# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/comparison.ipynb)

# %% [markdown]
# # 第 8 章 notebook：同台对比与奖励过优化
#
# 同一个老虎机任务、同一组随机种子、同一份采样预算，训练 REINFORCE、RLOO、PPO、GRPO（及 Dr. GRPO、DAPO 的设置）、DPO 与 IPO；
# 然后优化一个有系统偏差的奖励模型，看代理奖励与真实奖励怎样分道扬镳。这里用快速模式的预算，CPU 上半分钟以内跑完；
# 页面上的完整模式结果（5 个种子）由 `scripts/run_experiments.py` 生成。

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
# ## 同台对比（快速模式）
#
# `run_comparison` 返回整齐的长表：每行一个（算法，种子，步）。`samples` 是用掉的回答数：在线算法是累计采样并打分的回答，
# 离线算法（DPO、IPO）是为构造偏好对而从参考模型采样的回答（含被丢掉的平局）。
# 在 x86-64 上，下面的训练结果与网页逐位相同；在别的 CPU 家族（例如 ARM 笔记本）或别的 torch 构建（例如 Colab）上，
# 末几位可能不同，因为训练会把最后一位的舍入差别一步步放大。

# %%
from rlhf_toy.studies.comparison import OFFLINE, Budget, run_comparison, run_offline_sweep, summarize

budget = Budget()
rows = run_comparison(seeds=[0, 1], budget=budget)
sweep = run_offline_sweep(OFFLINE, seeds=[0, 1], sizes=[80, 160, 320, 640], budget=budget)
for s in summarize(rows, target=0.8):
    print(f"{s['algorithm']:>9}  回答数 {s['samples']:5d}  真实奖励 {s['success_mean']:.3f}  KL {s['kl_mean']:.2f}")

# %% [markdown]
# 真实奖励与 KL 随用掉的回答数的变化（两个种子的平均）。离线算法的每个点是一个数据集大小上的一次完整训练。

# %%
import matplotlib.pyplot as plt


def mean_curve(rs, key):
    steps = sorted({r["samples"] for r in rs})
    return steps, [sum(r[key] for r in rs if r["samples"] == s) / sum(r["samples"] == s for r in rs) for s in steps]


fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for name in dict.fromkeys(r["algorithm"] for r in rows):
    source = sweep if name in OFFLINE else rows
    rs = [r for r in source if r["algorithm"] == name]
    for ax, key in zip(axes, ("success_prob", "kl_to_ref")):
        x, y = mean_curve(rs, key)
        ax.plot(x, y, "o--" if name in OFFLINE else "-", ms=3, label=name)
axes[0].set(xlabel="samples (completions used)", ylabel="true reward P(correct)")
axes[1].set(xlabel="samples (completions used)", ylabel="KL(pi || pi_ref), nat")
axes[0].legend(fontsize=7, ncol=2)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 奖励过优化
#
# 奖励模型来自一个略偏爱“诱饵”错误回答的标注员；参考模型是一个“SFT 之后”的策略（种子 0 上正确概率 0.404，见正文）。
# 先看 KL 正则化目标的精确最优解 $\pi^*_\beta \propto \pi_{ref}\exp(\hat r/\beta)$：$\beta$ 越小，KL 越大，代理奖励越高，
# 真实奖励却先升后降。再用 PPO 真的去优化它，一次不加 KL，一次 `kl_coef=1`。
# 注意右图里 PPO 的轨迹在真实奖励上高过虚线：虚线是“代理奖励减 β·KL”的最优解，不是“真实奖励对 KL”的前沿（见正文）。

# %%
from rlhf_toy.studies.overoptimisation import early_stop, make_setup, optimum_curve, peak, run_overoptimisation

optimum = optimum_curve(make_setup(0), [10, 5, 3, 2, 1.5, 1, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02])
runs = {beta: run_overoptimisation("ppo", beta=beta, seed=0, steps=25) for beta in (0.0, 1.0)}
no_kl = runs[0.0]
print(f"kl_coef=0：真实奖励峰值 {peak(no_kl)['success_prob']:.3f}，第 25 步 {no_kl[-1]['success_prob']:.3f}")
print(f"早停（KL 超过 0.4 nat 就停）：真实奖励 {early_stop(no_kl, 0.4)['success_prob']:.3f}")
print(f"kl_coef=1：第 25 步真实奖励 {runs[1.0][-1]['success_prob']:.3f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharex=True)
for ax, key, label in zip(axes, ("proxy_reward", "success_prob"), ("proxy reward (RM score)", "true reward P(correct)")):
    ax.plot([p["kl_to_ref"] for p in optimum], [p[key] for p in optimum], "k--", label="exact optimum")
    for beta, history in runs.items():
        ax.plot([h["kl_to_ref"] for h in history], [h[key] for h in history], ".-", label=f"PPO kl_coef={beta}")
    ax.set(xlabel="KL(pi || pi_ref), nat", ylabel=label)
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 坏配置
#
# 每种常见故障一个可复现的配置。注意 `swapped_pairs`：DPO 自己的 `rewards/margins` 照样变大（下面打印出来），只有真实奖励（图）揭穿它。

# %%
from rlhf_toy.studies.health import BROKEN, initial_success, run_broken

histories = {name: run_broken(name, seed=0) for name in BROKEN}
swapped = histories["swapped_pairs"]
print(
    f"swapped_pairs：rewards/margins 从 {swapped[0]['rewards/margins']:.2f} 到 {swapped[-1]['rewards/margins']:.2f}，"
    f"真实奖励从起点 {initial_success(0):.3f} 到 {swapped[-1]['success_prob']:.3f}"
)

fig, ax = plt.subplots(figsize=(6, 3.5))
for name, history in histories.items():
    ax.plot([h["step"] for h in history], [h["success_prob"] for h in history], label=name)
ax.set(xlabel="step", ylabel="true reward P(correct)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 动手写：精确最优解
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_reverse_kl_optimum` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较返回的 log π*，第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_reverse_kl_optimum


def my_reverse_kl_optimum(ref_logps, rewards, beta):
    raise NotImplementedError  # 换成你的实现：返回 log π*，形状 (P, V)


# %%
result = check_reverse_kl_optimum(my_reverse_kl_optimum)
