# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/ratio_shaping.ipynb)

# %% [markdown]
# # 第 6 章（续二）比率的其他处理：CISPO、SAPO 与 GRPO 家族
#
# GRPO 家族的其他损失：CISPO、SAPO、LUSPO、VESPO、GMPO，以及 verl 的 GPG、DRO、DPPO、Clip-Cov 与 KL-Cov。
# 它们的梯度都是“系数 ψ(w) 乘 $\hat A\nabla\log\pi_\theta$”，区别只在 ψ 怎样随比率 $w$ 变化。
# 这里用 autograd 对 `rlhf_toy` 的函数求导，画出每个损失的 ψ(w)，再打印一批固定比率上的系数。正文见第 6 章（续二）。
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
# ## 梯度系数 ψ(w)
#
# 一批 $n$ 条单 token 的回答，第 $j$ 条的比率是 $w_j$（$\log\pi_{\text{old}} = 0$），优势都是 $A$。
# 损失对 $\log\pi_\theta$ 的梯度是 $-\psi(w)A/n$；同策略的 GRPO 在 $w = 1$ 处 $\psi = 1$。

# %%
import math

import matplotlib.pyplot as plt
import torch

from rlhf_toy.losses import (
    clipped_is_weight_loss,
    gamma_weight_loss,
    geometric_mean_ratio_loss,
    grpo_loss,
    soft_gate_loss,
)
from rlhf_toy.losses.clipped_is_weight_verl import cispo_loss_verl
from rlhf_toy.losses.divergence_mask import dppo_loss
from rlhf_toy.losses.group_pg import gpg_loss
from rlhf_toy.losses.log_ratio_penalty import dro_loss


def psi(fn, w, advantage):
    """ψ(w)：对每条单 token 回答的 log π_θ 求导，除以 −A/n。"""
    logps = w.log().reshape(-1, 1).clone().requires_grad_(True)
    advantages = torch.full((len(w),), advantage, dtype=w.dtype)
    (grad,) = torch.autograd.grad(fn(logps, torch.zeros_like(logps), advantages, torch.ones_like(logps)), logps)
    return -grad[:, 0] * len(w) / advantage


LOSSES = {
    "GRPO (clip 0.8-1.2)": lambda lp, old, a, m: grpo_loss(lp, old, None, a, m, beta=0.0)[0],
    "CISPO, TRL (eps_max = 5)": lambda lp, old, a, m: clipped_is_weight_loss(lp, old, None, a, m, epsilon_high=5.0)[0],
    "CISPO, verl ([0.8, 1.2])": lambda lp, old, a, m: cispo_loss_verl(lp, old, a, m)[0],
    "SAPO (tau = 1.0 / 1.05)": lambda lp, old, a, m: soft_gate_loss(lp, old, None, a, m)[0],
    "VESPO": lambda lp, old, a, m: gamma_weight_loss(lp, old, None, a, m)[0],
    "GMPO, TRL (e^0.4)": lambda lp, old, a, m: geometric_mean_ratio_loss(lp, old, None, a, m)[0],
    "DPPO-TV (p_old = 0.3)": lambda lp, old, a, m: dppo_loss(
        lp + math.log(0.3), old + math.log(0.3), a, m, clip_ratio_c=3.0
    )[0],
    "DRO (beta = 1)": lambda lp, old, a, m: dro_loss(lp, old, a, m, beta=1.0)[0],
    "GPG": lambda lp, old, a, m: gpg_loss(lp, a, m)[0],
}

w = torch.logspace(math.log10(0.2), math.log10(8.0), 400, dtype=torch.float64)
fig, axes = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
for ax, advantage in zip(axes, (1.0, -1.0), strict=True):
    for name, fn in LOSSES.items():
        x = w[w <= 1 / 0.3] if name.startswith("DPPO") else w  # p = 0.3 w ≤ 1
        ax.plot(x, psi(fn, x, advantage), label=name)
    ax.axvline(1.0, color="grey", lw=0.6)
    ax.set(ylabel="psi(w)", ylim=(-1.3, 5.6), title=f"A = {advantage:+g}")
    ax.grid(alpha=0.3)
axes[1].set(xscale="log", xlabel="ratio w = pi_theta / pi_old (log scale)")
axes[0].legend(fontsize=7, ncol=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# 看 $A = +1$ 的面板：GRPO 过了 1.2 就是 0，TRL 的 CISPO 一直涨到 5 才封顶，verl 的 CISPO 两侧都封顶；
# SAPO 在 $w = 2$ 附近反而大于 1，要到 $w$ 超过 3 才压下去。$A = -1$ 的面板上，GRPO 不截断 $w > 1$ 的一侧。
#
# ## 一批固定的比率
#
# 7 个 token，比率与优势固定，打印每个损失给每个 token 的 ψ（比率与正文的表相同；正文多一行 TRL 的 CISPO 取 ε=0.2）。

# %%
w = torch.tensor([0.5, 0.9, 1.25, 3.0, 0.5, 1.25, 3.0], dtype=torch.float64)
A = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0], dtype=torch.float64)
print("w                         " + " ".join(f"{x:6.2f}" for x in w.tolist()))
print("A                         " + " ".join(f"{a:+6.0f}" for a in A.tolist()))
for name, fn in LOSSES.items():
    logps = w.log().reshape(-1, 1).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(fn(logps, torch.zeros_like(logps), A, torch.ones_like(logps)), logps)
    row = -grad[:, 0] * len(w) / A
    print(f"{name:<26}" + " ".join(f"{p + 0.0:6.3f}" for p in row.tolist()))

# %% [markdown]
# ## 动手写：CISPO 的损失
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。TRL 的约定：`epsilon_high` 是比率的绝对上限，
# 权重 $\min(w, \epsilon_{\max})$ 不传梯度，按掩码内全部 token 平均。`check_cispo_loss` 比较值和梯度，
# 第一处不一致时说出是哪个输入、期望什么、得到了什么，以及常见的原因。

# %%
from rlhf_toy.exercises import check_cispo_loss


def my_cispo_loss(logps, old_logps, advantages, mask, epsilon_high=5.0):
    raise NotImplementedError  # 换成你的实现：返回标量损失


# %%
result = check_cispo_loss(my_cispo_loss)

# %% [markdown]
# ## 动手写：SAPO 的门
#
# 门是 $f_\tau(w) = \frac{4}{\tau}\operatorname{sigmoid}(\tau(w-1))$，$\hat A > 0$ 用 `sapo_temperature_pos`，否则用 `sapo_temperature_neg`。

# %%
from rlhf_toy.exercises import check_sapo_gate


def my_sapo_gate(ratio, advantages, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05):
    raise NotImplementedError  # 换成你的实现：返回与 ratio 同形状的门值


# %%
result = check_sapo_gate(my_sapo_gate)
