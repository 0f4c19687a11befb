# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/grpo_variants.ipynb)

# %% [markdown]
# # 第 6 章（续）GRPO 的变体：DAPO、Dr. GRPO 与 GSPO
#
# 把 GRPO 的几个开关并排画出来：四种 `loss_type` 给长短回答的每个 token 多大的梯度，
# clip-higher 把截断代理目标的哪一段放开了，GSPO 的序列级比率与逐 token 比率的梯度有什么不同，
# 老虎机上动态采样每步丢掉多少组，以及 DAPO 的软超长惩罚。所有函数都来自 `rlhf_toy` 包，正文见第 6 章（续）。
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
# ## 四种汇总：每个 token 的梯度随回答长度的变化
#
# 一组两条回答：一条正确、长度固定为 8；一条错误、长度 $n$ 从 1 变到 32（补齐到 $T = 32$，`dr_grpo` 的 $L = 32$）。
# 同策略、$\beta = 0$，用 autograd 求损失对错误回答每个 token 的 $\log\pi_\theta$ 的梯度（正数表示这个 token 被压低），
# 以及整条错误回答的梯度之和。

# %%
import matplotlib.pyplot as plt
import torch

from rlhf_toy import (
    BanditTask,
    GRPOConfig,
    TablePolicy,
    group_advantages,
    grpo_loss,
    sequence_log_ratio,
    soft_overlong_punishment,
    train_grpo,
)
from rlhf_toy.losses.grpo import clipped_surrogate

advantages = group_advantages(torch.tensor([1.0, 0.0]), num_generations=2)
lengths = list(range(1, 33))
per_token, per_answer = {}, {}
for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
    per_token[loss_type], per_answer[loss_type] = [], []
    for n in lengths:
        mask = torch.zeros(2, 32)
        mask[0, :8] = 1.0
        mask[1, :n] = 1.0
        logps = torch.zeros(2, 32, requires_grad=True)
        loss, _ = grpo_loss(logps, None, None, advantages, mask, beta=0.0, loss_type=loss_type)
        (grad,) = torch.autograd.grad(loss, logps)
        per_token[loss_type].append(grad[1, 0].item())
        per_answer[loss_type].append(grad[1].sum().item())

fig, axes = plt.subplots(1, 2, figsize=(9, 3.3))
for loss_type, style in zip(per_token, ("o-", "s-", "^-", "x--"), strict=True):
    axes[0].plot(lengths, per_token[loss_type], style, markersize=3, label=loss_type)
    axes[1].plot(lengths, per_answer[loss_type], style, markersize=3, label=loss_type)
axes[0].set(
    xlabel="length n of the wrong answer",
    ylabel="dL / d log pi (one token)",
    title="per-token push on the wrong answer",
)
axes[1].set(xlabel="length n of the wrong answer", ylabel="sum over its tokens", title="total push on the wrong answer")
for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
print(f"n = 1 vs n = 32, grpo per-token gradient: {per_token['grpo'][0]:.4f} vs {per_token['grpo'][-1]:.4f}")

# %% [markdown]
# `grpo` 下错误回答越长，每个 token 受的惩罚越小（与 $1/n$ 成正比），整条回答的总惩罚却不变：这就是长度偏差。
# `bnpo` 与 `dapo`（单进程时两者相同）每个 token 的惩罚随 $n$ 下降，因为分母 $8 + n$ 在变大，但同一批里长短回答每个 token 的权重始终相同；
# `dr_grpo` 的分母是常数 $BL$，每个 token 的惩罚与 $n$ 无关，整条回答的总惩罚与 $n$ 成正比。
#
# ## clip-higher：截断代理目标的哪一段被放开
#
# $J^{\text{clip}}(w) = \min\big(w\hat A,\ \mathrm{clip}(w, 1-\epsilon_{\text{low}}, 1+\epsilon_{\text{high}})\hat A\big)$，
# $\epsilon_{\text{low}} = 0.2$，比较 $\epsilon_{\text{high}} = 0.2$ 与 $0.28$。用第 6 章的 `clipped_surrogate` 逐点算出 $J = -\ell$。

# %%
ratios = torch.linspace(0.5, 1.6, 441)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.3), sharex=True)
for ax, A in zip(axes, (1.0, -1.0), strict=True):
    for eps_high, style in ((None, "-"), (0.28, "--")):
        # 441 个比率排成一行（B = 1、T = 441），clipped_surrogate 返回逐 token 的损失 -J
        loss, _ = clipped_surrogate(ratios.log()[None], torch.zeros(1, 441), torch.tensor([[A]]), 0.2, eps_high)
        ax.plot(ratios, -loss[0], style, label=f"epsilon_high = {0.2 if eps_high is None else eps_high}")
    ax.axvline(1.2, color="black", linewidth=0.6, linestyle=":")
    ax.axvline(1.28, color="black", linewidth=0.6, linestyle=":")
    ax.axvline(0.8, color="black", linewidth=0.6, linestyle=":")
    ax.set(xlabel="ratio w = pi_theta / pi_old", ylabel="objective J", title=f"A = {A:+.0f}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# $\hat A > 0$ 时，clip-higher 把目标变平（梯度为 0）的起点从 $1.2$ 推到 $1.28$；$\hat A < 0$ 的两条曲线重合，下界没动。
#
# ## GSPO 与逐 token 比率的梯度
#
# 两条回答，优势都是 $+1$，$\log\pi_{\text{old}} = 0$：第 1 条 5 个 token，最后一个比率离群（2.0）；
# 第 2 条 3 个 token，比率都是 1.3。画出两种层级下每个真实 token 的梯度（乘以 $B\lvert y_i\rvert$，即 $-\hat A w$ 或 $-\hat A s$）。

# %%
ratios = torch.tensor([[1.0, 1.0, 1.0, 1.0, 2.0], [1.3, 1.3, 1.3, 1.0, 1.0]])
mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
labels = [f"y1 t{t + 1}" for t in range(5)] + [f"y2 t{t + 1}" for t in range(3)]
bars = {}
for level in ("token", "sequence"):
    logps = ratios.log().clone().requires_grad_(True)
    loss, _ = grpo_loss(logps, torch.zeros(2, 5), None, torch.ones(2), mask, beta=0.0, importance_sampling_level=level)
    (grad,) = torch.autograd.grad(loss, logps)
    scaled = grad * 2 * mask.sum(-1, keepdim=True)
    bars[level] = scaled[mask.bool()].tolist()
s = sequence_log_ratio(ratios.log(), torch.zeros(2, 5), mask).exp().squeeze(-1)
print(f"sequence ratios s_i: {s[0]:.3f}, {s[1]:.3f}")

x = torch.arange(len(labels))
fig, ax = plt.subplots(figsize=(9, 3.4))
ax.bar(x - 0.2, bars["token"], width=0.4, label="token-level ratio w_{i,t}")
ax.bar(x + 0.2, bars["sequence"], width=0.4, label="sequence-level ratio s_i (GSPO)")
ax.set_xticks(x, labels)
ax.axhline(0, color="black", linewidth=0.6)
ax.set(ylabel="gradient x B |y_i|", title="which tokens are updated (A = +1, epsilon = 0.2)")
ax.grid(alpha=0.3, axis="y")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# 逐 token 比率下，离群的 token 和第 2 条回答的三个 token 各自被截断；
# 序列级比率下，第 1 条回答共用 $s_1 = 2^{1/5} \approx 1.149$，五个 token 一起更新，第 2 条回答 $s_2 = 1.3$ 整条截断。
#
# ## 动态采样：老虎机上每步丢掉多少组
#
# 同一个种子，分别不开和打开 `dynamic_sampling`。`frac_reward_zero_std` 是组内奖励全相同、被丢掉的组的比例，
# `effective_batch_size` 是进入损失的回答数（满批 $20\times 8 = 160$）。

# %%
histories = {}
for dynamic in (False, True):
    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    policy = TablePolicy.random(20, 8)
    histories[dynamic] = train_grpo(
        policy, task, GRPOConfig(steps=30, dynamic_sampling=dynamic), evaluate=task.evaluate
    )

steps = [h["step"] for h in histories[True]]
fig, axes = plt.subplots(1, 3, figsize=(9.5, 3.2))
axes[0].plot(steps, [h["frac_reward_zero_std"] for h in histories[True]], "o-", markersize=3)
axes[0].set(xlabel="step", ylabel="fraction of groups", title="dropped groups (all rewards equal)")
axes[1].plot(steps, [h["effective_batch_size"] for h in histories[True]], "o-", markersize=3)
axes[1].axhline(160, color="gray", linestyle="--", label="full batch")
axes[1].set(xlabel="step", ylabel="completions in the loss", title="effective batch size")
axes[1].legend(fontsize=8)
for dynamic, history in histories.items():
    axes[2].plot(steps, [h["success_prob"] for h in history], label=f"dynamic_sampling={dynamic}")
axes[2].set(xlabel="step", ylabel="success probability", title="P(correct answer)")
axes[2].legend(fontsize=8)
for ax in axes:
    ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()
for dynamic, history in histories.items():
    print(f"dynamic_sampling={dynamic}: final success_prob {history[-1]['success_prob']:.3f}")

# %% [markdown]
# 起初约三分之一的组全错，学会之后绝大多数组全对：两头都没有信号。不补齐的话，有效批大小随正确率上升而塌缩；
# 两条学习曲线几乎重合：这里用的是 Adam。正文用 SGD 做了对照：$\beta > 0$、学习率大时，
# 动态采样让 SGD 丢掉一部分提示词的正确回答。丢光所有组的那一步不更新，所以比较时要数实际的更新次数：
# 按同样的更新次数比，每批更新两次（本书默认的 `num_iterations=2`）并不比每批更新一次丢得快。
# $\beta = 0$（DAPO 的设置），或丢组之后仍除以满批时，都没有丢掉提示词。
# DAPO 重新采样补齐，代价是更多的采样。
#
# ## 软超长惩罚
#
# DAPO 式 (13)：$\lvert y\rvert \le L_{\max} - L_{\text{cache}}$ 不扣分，之后线性扣到 $-1$，超过 $L_{\max}$ 一律 $-1$。

# %%
lengths = torch.arange(0, 31)
fig, ax = plt.subplots(figsize=(6, 3.4))
for cache, style in ((5, "o-"), (10, "s-"), (0, "^-")):
    penalty = soft_overlong_punishment(lengths, max_completion_len=20, soft_punish_cache=cache)
    ax.plot(lengths, penalty, style, markersize=3, label=f"L_max = 20, L_cache = {cache}")
ax.set(xlabel="completion length |y|", ylabel="R_length", title="DAPO soft overlong punishment")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 动手写：四种汇总
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_aggregate_loss` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_aggregate_loss


def my_aggregate_loss(per_token_loss, mask, loss_type="grpo", max_completion_length=None):
    raise NotImplementedError  # 换成你的实现：返回标量损失


# %%
result = check_aggregate_loss(my_aggregate_loss)
