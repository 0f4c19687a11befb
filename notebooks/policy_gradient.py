# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/policy_gradient.ipynb)

# %% [markdown]
# # 第 2 章 策略梯度：REINFORCE、基线与 RLOO
#
# 在查表“语言模型”（20 个提示词、每个 8 个候选回答、恰有一个正确）上量一量策略梯度估计的方差，
# 比较无基线的 REINFORCE 与 RLOO 的学习曲线，再跑带 KL 惩罚的 RLOO。所有函数都来自 `rlhf_toy` 包，正文见第 2 章。
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
# ## 梯度估计的方差
#
# 在初始策略处，每种基线各抽 200 批（每批 20 个提示词 × $G = 4$ 个回答），与精确梯度比较。
# `offset` 是给每个奖励加的常数：真实梯度不变，无基线时方差暴涨。

# %%
import matplotlib.pyplot as plt
import torch

from rlhf_toy import BanditTask, RLOOConfig, TablePolicy, train_rloo
from rlhf_toy.studies.gradient_variance import policy_gradient_stats
from rlhf_toy.train.reinforce import ReinforceConfig, train_reinforce

torch.set_num_threads(1)  # 张量都很小：多线程只增加开销（机器繁忙时尤其明显）
torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=8)
init = TablePolicy.random(20, 8)
offsets, baselines = (0.0, 1.0, 5.0), ("none", "mean", "rloo")
stats = {
    (c, b): policy_gradient_stats(init, task, b, num_generations=4, n_batches=200, reward_offset=c)
    for c in offsets
    for b in baselines
}
for (c, b), s in stats.items():
    print(f"offset {c:3.1f}  {b:>4}：scale {s['scale']:.3f}，variance/|g|^2 {s['variance'] / s['grad_norm'] ** 2:8.3f}")
assert stats[(5.0, "none")]["variance"] > 20 * stats[(5.0, "rloo")]["variance"]
assert abs(stats[(0.0, "mean")]["scale"] - 0.75) < 0.1

fig, ax = plt.subplots(figsize=(6, 3.5))
width = 0.25
for j, b in enumerate(baselines):
    ax.bar(
        [i + j * width for i in range(len(offsets))],
        [stats[(c, b)]["variance"] / stats[(c, b)]["grad_norm"] ** 2 for c in offsets],
        width,
        label=b,
    )
ax.set_xticks([i + width for i in range(len(offsets))], [f"offset {c}" for c in offsets])
ax.set_yscale("log")
ax.set_ylabel("variance / |g|^2 (log)")
ax.set_title("Policy-gradient variance by baseline")
ax.legend(title="baseline")
plt.show()

# %% [markdown]
# ## 学习曲线：奖励整体加 5
#
# 同一个初始策略，训练 100 步。RLOO 的优势与常数无关，无基线的 REINFORCE 被方差拖慢。
#
# 注意 offset 0 的两条实线：这时无基线反而比 RLOO 学得快。第 2 章的对照（20 个种子）说明这不是偶然，原因也不是方差：
# 不带噪声的精确基线 $\mathbb E[r\mid x]$ 几乎和无基线一样快，用普通 SGD 时无基线、RLOO 与两种精确基线一样快。
# 差距只在 Adam 下、基线带采样噪声时出现；见第 2 章“奖励带偏移时，无基线学得慢”一节。

# %%
curves = {}
for offset in (0.0, 5.0):
    for baseline in ("none", "rloo"):
        torch.manual_seed(1)
        policy = TablePolicy(init.logits)
        config = ReinforceConfig(baseline=baseline, steps=100, reward_offset=offset)
        history = train_reinforce(policy, task, config, evaluate=task.evaluate)
        curves[(offset, baseline)] = [h["success_prob"] for h in history]
for key, curve in curves.items():
    print(f"offset {key[0]}  {key[1]:>4}：第 100 步正确概率 {curve[-1]:.3f}")
assert curves[(5.0, "rloo")] == curves[(0.0, "rloo")]  # 留一法优势与常数无关，轨迹逐位相同
assert curves[(5.0, "rloo")][-1] > curves[(5.0, "none")][-1] + 0.3

fig, ax = plt.subplots(figsize=(6, 3.5))
for (offset, baseline), curve in curves.items():
    ax.plot(range(1, 101), curve, label=f"{baseline}, offset {offset}", linestyle="--" if offset else "-")
ax.set_xlabel("step")
ax.set_ylabel("success_prob (true)")
ax.set_title("REINFORCE vs RLOO")
ax.legend()
plt.show()

# %% [markdown]
# ## RLOO 带 KL 惩罚
#
# $\beta = 0.05$（TRL `RLOOConfig` 的默认），KL 惩罚按序列求和后从奖励里扣掉。

# %%
torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=8)
policy = TablePolicy.random(20, 8)
history = train_rloo(policy, task, RLOOConfig(steps=100), evaluate=task.evaluate)
print(f"第 100 步：正确概率 {history[-1]['success_prob']:.3f}，kl {history[-1]['kl']:.3f}")
assert history[-1]["success_prob"] > 0.9

fig, ax1 = plt.subplots(figsize=(6, 3.5))
steps = [h["step"] for h in history]
ax1.plot(steps, [h["success_prob"] for h in history], label="success_prob")
ax1.plot(steps, [h["reward"] for h in history], label="batch reward", alpha=0.6)
ax1.set_xlabel("step")
ax1.set_ylabel("probability / reward")
ax2 = ax1.twinx()
ax2.plot(steps, [h["kl"] for h in history], color="tab:red", label="kl (k1, summed)")
ax2.set_ylabel("KL (nat)")
fig.legend(loc="lower right")
ax1.set_title("RLOO, beta = 0.05")
plt.show()

# %% [markdown]
# ## 动手写：留一法优势
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_rloo_advantages` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_rloo_advantages


def my_rloo_advantages(rewards, num_generations):
    raise NotImplementedError  # 换成你的实现：返回形状 (B,)


# %%
result = check_rloo_advantages(my_rloo_advantages)
