r"""异策略更新的精确实验台（第 12 章）：查表策略上，用采样器 $\mu$ 的样本估计策略梯度，偏差与方差都对回答求和精确算出。

一个提示词 $x$ 的 $V$ 个回答，$\pi = \mathrm{softmax}(\theta_x)$，奖励 $r(y)\in\{0,1\}$。从 $\mu$ 采一个回答 $y$，
单样本的更新是

$$g(y) = w(y)\,\big(r(y) - b\big)\,\nabla_{\theta_x}\log\pi(y),\qquad \nabla_{\theta_x}\log\pi(y) = e_y - \pi,$$

基线 $b = \mathbb E_\mu[r]$（组很大时组内平均奖励的极限）。$w$ 由 `correction` 决定（$\rho = \pi/\mu$）：
`"none"` 为 1，`"is"` 为 $\rho$，`"tis"` 为 $\min(\rho, C)$，`"mis"` 为 $\rho\,\mathbf 1[\rho\le C]$。
$\mu(y) = 0$ 的回答采不到，对期望没有贡献。
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections import deque
from typing import NamedTuple

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_shape, check_tensor

# --8<-- [end:imports]

CORRECTIONS = ("none", "is", "tis", "mis")


# --8<-- [start:per_answer_weights]
def per_answer_weights(logps: Tensor, sampler_logps: Tensor, correction: str, clip_max: float = 3.0) -> Tensor:
    r"""每个回答的权重 $w(y)$，形状 `(P, V)`；$\mu(y) = 0$ 的回答记 0（采不到）。

    Args:
        logps: $\log\pi$，形状 `(P, V)`。
        sampler_logps: $\log\mu$，形状 `(P, V)`，可以含 $-\infty$（top-k / top-p）。
        correction: `"none"`、`"is"`、`"tis"` 或 `"mis"`。
        clip_max: $C$（`tis` 的上界、`mis` 的掩码阈值）。

    Returns:
        形状 `(P, V)` 的权重。

    Raises:
        ValueError: 形状不符或 `correction` 未知。
    """
    check_tensor("logps", logps)
    check_shape("sampler_logps", sampler_logps, logps.shape, like="logps")
    check_choice("correction", correction, CORRECTIONS)
    supported = sampler_logps > -torch.inf
    rho = torch.where(supported, (logps - sampler_logps).exp(), 0.0)
    if correction == "none":
        w = torch.ones_like(rho)
    elif correction == "is":
        w = rho
    elif correction == "tis":
        w = rho.clamp(max=clip_max)
    else:
        w = torch.where(rho <= clip_max, rho, 0.0)
    return torch.where(supported, w, 0.0)


# --8<-- [end:per_answer_weights]


# --8<-- [start:expected_update]
def expected_update(
    logits: Tensor, sampler_logps: Tensor, rewards: Tensor, correction: str = "none", clip_max: float = 3.0
) -> Tensor:
    r"""单样本更新的精确期望 $\mathbb E_{y\sim\mu}[g(y)] = \sum_y \mu(y)\,w(y)\,(r(y)-b)\,(e_y - \pi)$，每个提示词一行。

    $\mu = \pi$、`correction="none"` 时它就是期望奖励的梯度 $\nabla_{\theta_x}\mathbb E_\pi[r]$（见 `on_policy_gradient`）；
    `"is"` 对任何 $\mu$（支撑集覆盖 $\pi$ 时）都等于它。

    Args:
        logits: 训练器的 logits $\theta$，形状 `(P, V)`。
        sampler_logps: $\log\mu$，形状 `(P, V)`。
        rewards: $r(x, y)$，形状 `(P, V)`。
        correction: 见 `per_answer_weights`。
        clip_max: $C$。

    Returns:
        形状 `(P, V)`：对 $\theta$ 的期望更新方向（上升方向，即 −损失的梯度）。
    """
    check_shape("rewards", rewards, logits.shape, like="logits")
    logps = torch.log_softmax(logits, dim=-1)
    mu = sampler_logps.exp()
    w = per_answer_weights(logps, sampler_logps, correction, clip_max)
    b = (mu * rewards).sum(-1, keepdim=True)
    coef = mu * w * (rewards - b)  # (P, V)：回答 y 的系数
    return coef - coef.sum(-1, keepdim=True) * logps.exp()  # Σ_y coef_y (e_y − π)


def on_policy_gradient(logits: Tensor, rewards: Tensor) -> Tensor:
    r"""真梯度 $\nabla_{\theta_x}\mathbb E_{y\sim\pi}[r(x, y)]$（autograd），形状 `(P, V)`。

    Args:
        logits: 形状 `(P, V)`。
        rewards: 形状 `(P, V)`。

    Returns:
        形状 `(P, V)` 的梯度。
    """
    check_shape("rewards", rewards, logits.shape, like="logits")
    theta = logits.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((theta.softmax(-1) * rewards).sum(), theta)
    return grad


# --8<-- [end:expected_update]


# --8<-- [start:update_variance]
def update_variance(
    logits: Tensor, sampler_logps: Tensor, rewards: Tensor, correction: str = "none", clip_max: float = 3.0
) -> float:
    r"""单样本更新的总方差 $\sum_x \big(\mathbb E_\mu\|g(y)\|^2 - \|\mathbb E_\mu g(y)\|^2\big)$（每个提示词一个样本），精确求和。

    $\|e_y - \pi\|^2 = 1 - 2\pi(y) + \|\pi\|^2$。$N$ 个样本的平均的均方误差是 $\|\text{偏差}\|^2 + \text{方差}/N$。

    Args:
        logits: 形状 `(P, V)`。
        sampler_logps: $\log\mu$，形状 `(P, V)`。
        rewards: 形状 `(P, V)`。
        correction: 见 `per_answer_weights`。
        clip_max: $C$。

    Returns:
        总方差（浮点数）。
    """
    logps = torch.log_softmax(logits, dim=-1)
    pi, mu = logps.exp(), sampler_logps.exp()
    w = per_answer_weights(logps, sampler_logps, correction, clip_max)
    b = (mu * rewards).sum(-1, keepdim=True)
    sq_norm = 1 - 2 * pi + pi.square().sum(-1, keepdim=True)  # ‖e_y − π‖²
    second = (mu * (w * (rewards - b)).square() * sq_norm).sum()
    mean = expected_update(logits, sampler_logps, rewards, correction, clip_max)
    return (second - mean.square().sum()).item()


# --8<-- [end:update_variance]


class Bias(NamedTuple):
    """期望更新 $\\bar g$ 相对真梯度 $\\nabla J$ 的偏差。

    `relative` $=\\|\\bar g-\\nabla J\\|/\\|\\nabla J\\|$，`cosine` 为两者夹角余弦，`length` $=\\|\\bar g\\|/\\|\\nabla J\\|$。
    """

    relative: float
    cosine: float
    length: float


def bias(update: Tensor, true_gradient: Tensor) -> Bias:
    """相对偏差、余弦与长度之比（两个张量展平后比较）。

    Args:
        update: 期望更新，任意形状。
        true_gradient: 真梯度，形状同 `update`。

    Returns:
        `Bias(relative, cosine, length)`。
    """
    check_shape("true_gradient", true_gradient, update.shape, like="update")
    u, g = update.flatten(), true_gradient.flatten()
    rel = (u - g).norm() / g.norm()
    cos = torch.nn.functional.cosine_similarity(u, g, dim=0)
    return Bias(rel.item(), cos.item(), (u.norm() / g.norm()).item())


# --8<-- [start:stale_training]
def stale_training(
    logits: Tensor,
    rewards: Tensor,
    steps: int,
    staleness: int,
    correction: str = "none",
    clip_max: float = 3.0,
    learning_rate: float = 5.0,
) -> tuple[list[float], list[Tensor]]:
    r"""用精确的期望更新训练查表策略，样本来自 `staleness` 步之前的策略 $\mu = \pi_{\theta_{t-k}}$（没有采样噪声）。

    $\theta_{t+1} = \theta_t + \eta\,\mathbb E_{y\sim\pi_{\theta_{t-k}}}[g(y)]$；前 $k$ 步的“旧策略”是初始策略（快照队列用
    $\theta_0$ 填满，同异步训练刚开始时）。

    Args:
        logits: 初始 logits，形状 `(P, V)`。
        rewards: 形状 `(P, V)`。
        steps: 更新步数。
        staleness: $k \ge 0$。
        correction: 见 `per_answer_weights`。
        clip_max: $C$。
        learning_rate: 梯度上升的步长 $\eta$（普通梯度上升，没有 Adam）。

    Returns:
        `(expected_rewards, snapshots)`：长 `steps + 1` 的期望奖励（各提示词平均，第 0 项是初始策略）与每步的 logits。
    """
    if not isinstance(staleness, int) or staleness < 0:
        raise ValueError(f"staleness 应是非负整数，实际是 {staleness!r}")
    theta = logits.detach().clone()
    queue = deque([theta.clone()] * (staleness + 1), maxlen=staleness + 1)  # queue[0] 是 k 步之前的快照
    curve, snapshots = [(theta.softmax(-1) * rewards).sum(-1).mean().item()], [theta.clone()]
    for _ in range(steps):
        sampler_logps = torch.log_softmax(queue[0], dim=-1)
        theta = theta + learning_rate * expected_update(theta, sampler_logps, rewards, correction, clip_max)
        queue.append(theta.clone())
        curve.append((theta.softmax(-1) * rewards).sum(-1).mean().item())
        snapshots.append(theta.clone())
    return curve, snapshots


# --8<-- [end:stale_training]
