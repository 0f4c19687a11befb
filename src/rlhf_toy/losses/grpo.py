r"""GRPO 的损失：重要性采样比率、截断（clip）、k3 KL 惩罚与按 `loss_type` 汇总。

对应 DeepSeekMath（Shao et al., 2024, arXiv 2402.03300）式 (3)(4)，以及 TRL
`GRPOTrainer._compute_loss`。约定：**损失 = −目标**，所以优化器做梯度下降即在最大化目标。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_finite, check_mask, check_ndim, check_nonnegative, check_shape
from rlhf_toy.kl import kl_estimate
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean

# --8<-- [end:imports]


# --8<-- [start:clipped_surrogate]
def clipped_surrogate(
    logps: Tensor, old_logps: Tensor, advantages: Tensor, epsilon: float = 0.2, epsilon_high: float | None = None
) -> tuple[Tensor, Tensor]:
    r"""逐 token 的截断代理损失 $-\min\big(w A,\ \mathrm{clip}(w, 1-\epsilon, 1+\epsilon_{high}) A\big)$。

    $w = \exp(\log\pi_\theta - \log\pi_{old})$ 是重要性采样比率（importance sampling ratio）。
    负号使它成为要最小化的损失；$A<0$ 时 `min` 同样正确地取更悲观的一项。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，带梯度。
        old_logps: 采样时旧策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势，形状 `(B, 1)` 或 `(B, T)`（已展开到 token）。
        epsilon: 下截断 $\epsilon_{low}$（TRL `epsilon`，默认 0.2）。
        epsilon_high: 上截断 $\epsilon_{high}$（DAPO 的 clip-higher，TRL `epsilon_high`）；`None` 表示等于 `epsilon`。

    Returns:
        `(per_token_loss, is_clipped)`，两者形状均为 `(B, T)`；`is_clipped` 为布尔张量，
        标出截断起作用（梯度为 0）的位置，即 TRL 的 `clip_ratio/region`。
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = (logps - old_logps).exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - epsilon, 1 + eps_high) * advantages
    per_token_loss = -torch.min(unclipped, clipped)
    is_clipped = ((ratio < 1 - epsilon) & (advantages < 0)) | ((ratio > 1 + eps_high) & (advantages > 0))
    return per_token_loss, is_clipped


# --8<-- [end:clipped_surrogate]


def _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, epsilon, epsilon_high) -> None:
    check_ndim("logps", logps, 2, "(B, T)")
    check_finite("logps", logps)
    for name, x in (("old_logps", old_logps), ("ref_logps", ref_logps)):
        if x is not None:
            check_shape(name, x, logps.shape, like="logps")
            check_finite(name, x)
    check_mask("mask", mask, logps.shape, like="logps")
    if advantages.dim() == 1:
        check_shape("advantages", advantages, logps.shape[:1], like="logps 的第 0 维")
    else:
        check_shape("advantages", advantages, logps.shape, like="logps")
    check_finite("advantages", advantages)
    check_nonnegative("beta", beta)
    check_nonnegative("epsilon", epsilon)
    if epsilon_high is not None:
        check_nonnegative("epsilon_high", epsilon_high)
    if beta > 0 and ref_logps is None:
        raise ValueError("beta > 0 时需要 ref_logps（参考模型的对数概率），形状 (B, T)")


# --8<-- [start:grpo_loss]
def grpo_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    ref_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.04,
    loss_type: str = "grpo",
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""GRPO 损失：逐 token 截断代理损失加 $\beta\,k_3$，再按 `loss_type` 汇总。

    $$\ell_{i,t} = -\min\big(w_{i,t}\hat A_i,\ \mathrm{clip}(w_{i,t},1-\epsilon,1+\epsilon_{high})\hat A_i\big)
    + \beta\, k_3\big(\pi_\theta, \pi_{ref}\big)_{i,t}$$

    默认值（`beta=0.04`、`loss_type="grpo"`）对应 DeepSeekMath 原文与 TRL v0.14–v0.18；
    TRL 现在的默认是 `beta=0.0`、`loss_type="dapo"`。

    Args:
        logps: 当前策略的逐 token 对数概率 $\log\pi_\theta(o_{i,t})$，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时的 $\log\pi_{old}$，形状 `(B, T)`；`None` 时取 `logps.detach()`
            （每批只更新一次时 TRL 的做法：比率数值恒为 1，截断永不触发）。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`；`beta == 0` 时可为 `None`。
        advantages: 优势 $\hat A$，形状 `(B,)`（每条回答一个，广播到它的所有 token）或 `(B, T)`。
        mask: 损失掩码，形状 `(B, T)`，0/1 浮点。
        epsilon: 截断下界 $\epsilon$（TRL `epsilon`）。
        epsilon_high: 截断上界；`None` 表示与 `epsilon` 相同。
        beta: KL 系数 $\beta \ge 0$。
        loss_type: 汇总方式，见 [`aggregate_loss`][rlhf_toy.losses.aggregate.aggregate_loss]。
        max_completion_length: `dr_grpo` 的常数分母 $L$。

    Returns:
        `(loss, metrics)`：标量损失，以及按 TRL 日志命名的指标
        `kl`（掩码内 $k_3$ 的 token 平均）与 `clip_ratio`（截断起作用的 token 比例）。

    Raises:
        ValueError: 任一张量形状不符、含非有限值，`mask` 不是 0/1，`beta`/`epsilon` 为负，
            `beta > 0` 却没有 `ref_logps`，或 `loss_type` 未知。
    """
    _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, epsilon, epsilon_high)
    if old_logps is None:
        old_logps = logps.detach()
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    per_token_loss, is_clipped = clipped_surrogate(logps, old_logps, adv, epsilon, epsilon_high)
    metrics = {"clip_ratio": masked_mean(is_clipped.float(), mask).item()}
    if beta > 0:
        kl = kl_estimate(logps, ref_logps, "k3")
        per_token_loss = per_token_loss + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), mask).item()
    loss = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length)
    return loss, metrics


# --8<-- [end:grpo_loss]
