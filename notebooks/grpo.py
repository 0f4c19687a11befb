# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/grpo.ipynb)

# %% [markdown]
# # 第 6 章 GRPO：组内相对优势
#
# 在查表“语言模型”（20 个问题、每题 8 个候选回答、恰有一个正确）上跑 GRPO：
# 每个提示词采样 $G = 8$ 个回答，用组内相对优势 $\hat A_i = (r_i - \mu)/(\sigma + \varepsilon)$ 更新策略，
# 损失里带 $\beta k_3$ 的 KL 惩罚和截断。所有函数都来自 `rlhf_toy` 包，正文见第 6 章。
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
# ## 训练：每批样本更新一次与两次
#
# 同一个随机种子、同样的任务和初始策略，只改每批样本上的更新次数 $n_{\text{iter}}$（`num_iterations`）。
# `success_prob` 是策略给正确回答的平均概率（精确计算），`kl` 是采样 token 上 $k_3$ 的平均，
# `clip_ratio` 是截断起作用的 token 比例。

# %%
import matplotlib.pyplot as plt
import torch

from rlhf_toy import BanditTask, GRPOConfig, TablePolicy, group_advantages, train_grpo
from rlhf_toy.losses.grpo import clipped_surrogate

histories = {}
for num_iterations in (1, 2):
    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    policy = TablePolicy.random(20, 8)
    ref = policy.frozen_copy()  # 参考模型：训练开始时的策略

    def evaluate(p, task=task, ref=ref):
        probs, ref_probs = p.probs().detach(), ref.probs()
        exact_kl = (probs * (probs / ref_probs).log()).sum(-1).mean().item()  # 按定义精确计算 KL(π_θ‖π_ref)
        return {**task.evaluate(p), "exact_kl": exact_kl}

    config = GRPOConfig(steps=40, num_iterations=num_iterations)
    histories[num_iterations] = train_grpo(policy, task, config, ref_policy=ref, evaluate=evaluate)

for n_iter, history in histories.items():
    last = history[-1]
    print(
        f"num_iterations={n_iter}: success_prob {last['success_prob']:.3f}, kl {last['kl']:.3f}, "
        f"exact KL {last['exact_kl']:.3f}, "
        f"max clip_ratio {max(h['clip_ratio'] for h in history):.3f}"
    )

# %%
fig, axes = plt.subplots(1, 3, figsize=(9.5, 3.2))
for n_iter, history in histories.items():
    steps = [h["step"] for h in history]
    axes[0].plot(steps, [h["success_prob"] for h in history], label=f"num_iterations={n_iter}")
    line = axes[1].plot(steps, [h["kl"] for h in history], label=f"logged kl, num_iterations={n_iter}")[0]
    axes[1].plot(
        steps, [h["exact_kl"] for h in history], "--", color=line.get_color(), label=f"exact KL, num_iterations={n_iter}"
    )
    axes[2].plot(steps, [h["clip_ratio"] for h in history], label=f"num_iterations={n_iter}")
axes[0].set(xlabel="step", ylabel="success probability", title="P(correct answer)")
axes[1].set(xlabel="step", ylabel="nats", title="KL(pi_theta || pi_ref): k3 estimate vs exact")
axes[2].set(xlabel="step", ylabel="fraction of tokens", title="clip_ratio")
for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right" if ax is not axes[2] else "upper right")
fig.tight_layout()
plt.show()

# %% [markdown]
# `num_iterations=1` 时每批只更新一次，比率 $w$ 的值恒为 1，截断永远不起作用，`clip_ratio` 一直是 0。
# `num_iterations=2` 时第二次更新的比率已经偏离 1，前几步有大量 token 落进截断区；
# 后期几乎每组都全对、优势为 0，`clip_ratio` 回到 0。
# 参考模型是训练开始时近似均匀的策略，策略把概率集中到正确回答上，**精确的** KL 就随之增长。
# 日志里的 `kl` 却不跟着它走：前十几步忽高忽低，有几步冲过精确值，之后一直低于它。
# 虚线是按定义精确计算的 $\mathrm{KL}(\pi_\theta\Vert\pi_{\text{ref}})$。日志里的 `kl` 是 $k_3$ 在采样 token 上的平均：
# 它在期望上无偏，靠的是 $\mathbb E[e^d] = 1$，而这个期望的大头来自概率**极小**的错误回答（$\pi_{\text{ref}}/\pi_\theta$ 很大），
# 它们几乎采不到（书页上把精确的 KL 按回答拆开打印了出来）。批里偶尔出现的错误回答多半来自还没学好的提示词，概率不算小，
# $k_3$ 比极小概率回答的小得多（书页上按概率加权算了两类错误回答的平均 $k_3$）。所以典型的一批偏低、而且忽高忽低，要靠极少数采到“极小概率回答”的批次大幅高估才平均回来；估计量本身无偏。
# （`num_iterations=2` 时记录的是第 2 次内循环，样本来自 $\pi_{\text{old}}$，这也不是 $\mathrm{KL}(\pi_\theta\Vert\pi_{\text{ref}})$ 的无偏估计。）

# %% [markdown]
# ## 截断代理目标随比率的变化
#
# $J^{\text{clip}}(w) = \min\big(w\hat A,\ \mathrm{clip}(w, 1-\epsilon, 1+\epsilon)\hat A\big)$，$\epsilon = 0.2$。
# 用 `clipped_surrogate`（它返回的是损失 $-J$）算出曲线，并用 autograd 求 $\partial J/\partial w$：
# 曲线变平的地方梯度为 0，就是截断起作用的区域。

# %%
ratios = torch.linspace(0.4, 1.8, 561, requires_grad=True)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharex=True)
for ax, A, color in zip(axes, (1.0, -1.0), ("tab:blue", "tab:red"), strict=True):
    loss, is_clipped = clipped_surrogate(ratios.log()[None], torch.zeros(1, len(ratios)), torch.tensor([[A]]))
    objective = -loss[0]
    (grad,) = torch.autograd.grad(objective.sum(), ratios)
    w = ratios.detach()
    ax.plot(w, objective.detach(), color=color, label="J_clip (objective)")
    ax.plot(w, w * A, color="gray", linestyle="--", label="w * A (unclipped)")
    ax.fill_between(
        w,
        objective.detach().min(),
        objective.detach().max(),
        where=is_clipped[0].numpy(),
        color=color,
        alpha=0.12,
        label="clipped: zero gradient",
    )
    for x in (0.8, 1.2):
        ax.axvline(x, color="black", linewidth=0.6, linestyle=":")
    ax.set(xlabel="ratio w = pi_theta / pi_old", ylabel="objective", title=f"A = {A:+.0f}")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    zero = w[grad == 0]
    print(f"A = {A:+.0f}: dJ/dw = 0 for w in [{zero.min():.2f}, {zero.max():.2f}]")
fig.tight_layout()
plt.show()

# %% [markdown]
# $\hat A > 0$：比率超过 $1 + \epsilon$ 后目标不再增长，梯度为 0；比率小于 $1 - \epsilon$ 时（好回答的概率反而降了）
# 目标仍随 $w$ 线性增长，梯度把它拉回来。$\hat A < 0$ 正好反过来：比率低于 $1 - \epsilon$ 后梯度为 0。
#
# ## 组内相对优势：一组里答对几个
#
# 0/1 奖励、$G = 8$ 时，一组里答对 $k$ 个，答对者与答错者的优势只取决于 $k$。
# $k = 0$ 或 $k = 8$ 时全组优势为 0，这一组对梯度没有贡献。

# %%
G = 8
ks = list(range(G + 1))
correct_adv, wrong_adv = [], []
for k in ks:
    rewards = torch.tensor([1.0] * k + [0.0] * (G - k))
    adv = group_advantages(rewards, num_generations=G)
    correct_adv.append(adv[0].item() if k > 0 else float("nan"))
    wrong_adv.append(adv[-1].item() if k < G else float("nan"))

fig, ax = plt.subplots(figsize=(6, 3.6))
ax.plot(ks, correct_adv, "o-", label="correct answers (r = 1)")
ax.plot(ks, wrong_adv, "s-", label="wrong answers (r = 0)")
ax.axhline(0, color="black", linewidth=0.6)
ax.set(
    xlabel="k = number of correct answers in the group (G = 8)",
    ylabel="advantage",
    title="group-relative advantage, scale_rewards='group'",
)
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 动手写：组内相对优势
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_group_advantages` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_group_advantages


def my_group_advantages(rewards, num_generations, scale_rewards="group", eps=1e-4):
    raise NotImplementedError  # 换成你的实现：返回形状 (B,)


# %%
result = check_group_advantages(my_group_advantages)
