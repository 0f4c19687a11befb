r"""GRPO 的损失：重要性采样比率、截断（clip）、k3 KL 惩罚与按 `loss_type` 汇总。

对应 DeepSeekMath（Shao et al., 2024, arXiv 2402.03300）式 (3)(4)，以及 TRL
`GRPOTrainer._compute_loss`。约定：**损失 = −目标**，所以优化器做梯度下降即在最大化目标。

`importance_sampling_level="sequence"` 把逐 token 的比率换成 GSPO（Zheng et al., 2025, arXiv 2507.18071）
的长度归一化序列比率，见 `sequence_log_ratio`。
"""

# --8<-- [start:imports]
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from rlhf_toy._checks import (
    check_choice,
    check_detached,
    check_finite,
    check_finite_inside,
    check_mask,
    check_ndim,
    check_nonnegative,
    check_shape,
    shape_str,
)
from rlhf_toy.estimators.kl import kl_estimate
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
        epsilon: 截断的下侧幅度 $\epsilon_{low}$（下界 $1-\epsilon_{low}$，TRL `epsilon`，默认 0.2）。
        epsilon_high: 上侧幅度 $\epsilon_{high}$（上界 $1+\epsilon_{high}$，DAPO 的 clip-higher，TRL `epsilon_high`）；`None` 表示等于 `epsilon`。

    Returns:
        `(per_token_loss, is_clipped)`，两者形状均为 `(B, T)`；`is_clipped` 为布尔张量，
        标出截断起作用（梯度为 0）的位置，即 TRL `clip_ratio/region_mean` 统计的位置。
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = (logps - old_logps).exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - epsilon, 1 + eps_high) * advantages
    per_token_loss = -torch.min(unclipped, clipped)
    is_clipped = ((ratio < 1 - epsilon) & (advantages < 0)) | ((ratio > 1 + eps_high) & (advantages > 0))
    return per_token_loss, is_clipped


# --8<-- [end:clipped_surrogate]

IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
TOKEN_SUMMED_LOSS_TYPES = ("bnpo", "dr_grpo", "dapo")  # 按 token 求和再除以常数或 token 数的汇总


# --8<-- [start:sequence_log_ratio]
def sequence_log_ratio(logps: Tensor, old_logps: Tensor, mask: Tensor) -> Tensor:
    r"""GSPO 的长度归一化序列比率的对数 $\log s_i = \frac{1}{\max(\lvert o_i\rvert, 1)}\sum_t m_{i,t}\,(\log\pi_\theta - \log\pi_{old})$。

    $s_i = \big(\pi_\theta(o_i\mid q)/\pi_{old}(o_i\mid q)\big)^{1/\lvert o_i\rvert}$ 是整条回答的比率开 $\lvert o_i\rvert$ 次方，
    即逐 token 比率的几何平均（GSPO，arXiv 2507.18071，式 (7)）。与 TRL `GRPOTrainer._compute_loss` 在
    `importance_sampling_level="sequence"` 时的 `log_importance_weights` 逐式相同：梯度流过每个 token 的
    $\log\pi_\theta$（不做 stop-gradient），$\partial\log s_i/\partial\log\pi_\theta(o_{i,t}) = m_{i,t}/\max(\lvert o_i\rvert, 1)$。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时旧策略的对数概率，形状 `(B, T)`，不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`；$\lvert o_i\rvert = \sum_t m_{i,t}$。

    Returns:
        形状 `(B, 1)` 的 $\log s_i$，dtype 同 `logps`。同策略（`logps == old_logps`）时恰为 0，即 $s_i = 1$；
        整行掩码为 0 时也是 0。

    Raises:
        ValueError: `logps` 不是二维，`old_logps` 或 `mask` 形状不符，`mask` 不是 0/1。

    Examples:
        >>> logps = torch.tensor([[-1.0, -2.0, 0.0]])
        >>> sequence_log_ratio(logps, torch.tensor([[-1.5, -2.5, 5.0]]), torch.tensor([[1.0, 1.0, 0.0]]))
        tensor([[0.5000]])
    """
    check_ndim("logps", logps, 2, "(B, T)")
    check_shape("old_logps", old_logps, logps.shape, like="logps")
    check_detached("old_logps", old_logps, "序列比率对参数的梯度恰好抵消为 0")
    check_mask("mask", mask, logps.shape, like="logps")
    check_finite_inside("logps", logps, mask)
    check_finite_inside("old_logps", old_logps, mask)
    log_ratio = torch.where(mask.bool(), logps - old_logps, 0.0)  # 选取，不相乘：填充处的 NaN 进不来
    return (log_ratio.sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)


# --8<-- [end:sequence_log_ratio]


def _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, epsilon, epsilon_high) -> None:
    check_ndim("logps", logps, 2, "(B, T)")
    check_finite("logps", logps)
    for name, x, why in (
        ("old_logps", old_logps, "比率 exp(logps − old_logps) 对参数的梯度恰好抵消为 0"),
        ("ref_logps", ref_logps, "KL 惩罚的梯度会流进参考模型（参考就是策略本身时恰为 0）"),
    ):
        if x is not None:
            check_shape(name, x, logps.shape, like="logps")
            check_finite(name, x)
            check_detached(name, x, why)
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
    importance_sampling_level: str = "token",
    log_clip_sides: bool = False,
) -> tuple[Tensor, dict[str, float]]:
    r"""GRPO 损失：逐 token 截断代理损失加 $\beta\,k_3$，再按 `loss_type` 汇总。

    $$\ell_{i,t} = -\min\big(w_{i,t}\hat A_i,\ \mathrm{clip}(w_{i,t},1-\epsilon,1+\epsilon_{high})\hat A_i\big)
    + \beta\, k_3\big(\pi_\theta, \pi_{ref}\big)_{i,t}$$

    默认值 `beta=0.04` 与 `loss_type="grpo"`（按序列平均）取自 DeepSeekMath 原文；
    TRL 默认值的版本历史见第 6 章“四种汇总方式”表的脚注。
    TRL 1.16.0 的默认是 `beta=0.0`、`loss_type="dapo"`，并且 `use_bias_correction_kl=True`（把 $k_3$ 乘上比率 $w$，
    见 `rlhf_toy.estimators.kl.importance_corrected_k3`）；本函数的 KL 项是原文的 $k_3$，不乘 $w$。
    代码与注释沿用论文记号：提示词 $q$、回答 $o_i$（章节正文记作 $x$、$y_i$）。

    Args:
        logps: 当前策略的逐 token 对数概率 $\log\pi_\theta(o_{i,t})$，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时的 $\log\pi_{old}$，形状 `(B, T)`；`None` 时取 `logps.detach()`
            （每批只更新一次时 TRL 的做法：比率数值恒为 1，截断永不触发）。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`；`beta == 0` 时可为 `None`。
        advantages: 优势 $\hat A$，形状 `(B,)`（每条回答一个，广播到它的所有 token）或 `(B, T)`。
        mask: 损失掩码，形状 `(B, T)`，0/1 浮点。
        epsilon: 截断的下侧幅度 $\epsilon$（下界 $1-\epsilon$，TRL `epsilon`）。
        epsilon_high: 上侧幅度（上界 $1+\epsilon_{high}$）；`None` 表示与 `epsilon` 相同。
        beta: KL 系数 $\beta \ge 0$。
        loss_type: 汇总方式，见 [`aggregate_loss`][rlhf_toy.losses.aggregate.aggregate_loss]。
        max_completion_length: `dr_grpo` 的常数分母 $L$。
        importance_sampling_level: `"token"`（默认，逐 token 比率 $w_{i,t}$）或 `"sequence"`（GSPO：
            每条回答一个比率 $s_i$，见 `sequence_log_ratio`；截断也作用在 $s_i$ 上），同 TRL 的同名参数。
            `"sequence"` 要求 `advantages` 形状为 `(B,)`；与 `bnpo`、`dr_grpo`、`dapo` 同用时发出
            `UserWarning`（TRL 在构造 `GRPOTrainer` 时用 `logger.warning` 提示）：这三种汇总按 token 求和，把每条回答的序列损失乘上了它的长度。
        log_clip_sides: `True` 时另记 TRL 的 `clip_ratio/low_mean`（$w < 1-\epsilon$ 且 $\hat A < 0$）与
            `clip_ratio/high_mean`（$w > 1+\epsilon_{high}$ 且 $\hat A > 0$）；`clip_ratio` 是两者的并。

    Returns:
        `(loss, metrics)`：标量损失，以及按 TRL 日志命名的指标
        `kl`（掩码内 $k_3$ 的 token 平均）与 `clip_ratio`（截断起作用的 token 比例；
        `"sequence"` 时是截断起作用的回答比例，同 TRL 对 `(B, 1)` 张量取的普通平均）。

    Raises:
        ValueError: 任一张量形状不符、含非有限值，`mask` 不是 0/1，`beta`/`epsilon` 为负，
            `beta > 0` 却没有 `ref_logps`，`loss_type` 或 `importance_sampling_level` 未知，
            或 `"sequence"` 时 `advantages` 是逐 token 的 `(B, T)`。
    """
    _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, epsilon, epsilon_high)
    check_choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    if old_logps is None:
        old_logps = logps.detach()
    advantages = advantages.detach()  # 优势是常数（同 ppo_policy_loss、reinforce_loss）
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    per_sequence = importance_sampling_level == "sequence"
    if per_sequence:  # GSPO：每条回答一个比率 s_i，形状 (B, 1)
        _check_sequence_level(advantages, logps, loss_type)
        log_ratio = sequence_log_ratio(logps, old_logps, mask)
        # 把 log s_i 当作“旧对数概率为 0 的单个 token”交给同一个截断函数，再广播到这条回答的每个 token
        per_seq_loss, is_clipped = clipped_surrogate(log_ratio, torch.zeros_like(log_ratio), adv, epsilon, epsilon_high)
        per_token_loss = per_seq_loss.expand_as(logps)
    else:
        log_ratio = logps - old_logps
        per_token_loss, is_clipped = clipped_surrogate(logps, old_logps, adv, epsilon, epsilon_high)
    metrics = {"clip_ratio": _clip_fraction(is_clipped, mask, per_sequence)}
    if log_clip_sides:  # TRL 的 clip_ratio/low_mean 与 clip_ratio/high_mean，两者的并就是 clip_ratio
        ratio, eps_high = log_ratio.detach().exp(), epsilon if epsilon_high is None else epsilon_high
        metrics["clip_ratio/low_mean"] = _clip_fraction((ratio < 1 - epsilon) & (adv < 0), mask, per_sequence)
        metrics["clip_ratio/high_mean"] = _clip_fraction((ratio > 1 + eps_high) & (adv > 0), mask, per_sequence)
    if beta > 0:
        kl = kl_estimate(logps, ref_logps, "k3")
        per_token_loss = per_token_loss + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), mask).item()
    loss = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length)
    return loss, metrics


# --8<-- [end:grpo_loss]


def _clip_fraction(flags: Tensor, mask: Tensor, per_sequence: bool) -> float:
    """TRL 的 `masked_batch_mean`：逐 token 时在掩码内平均；序列级的 `(B, 1)` 直接对回答平均。"""
    return flags.float().mean().item() if per_sequence else masked_mean(flags.float(), mask).item()


def _check_sequence_level(advantages: Tensor, logps: Tensor, loss_type: str) -> None:
    if advantages.dim() != 1:
        raise ValueError(
            f"importance_sampling_level='sequence' 时每条回答只有一个比率 s_i，advantages 的形状应是 "
            f"{shape_str(logps.shape[:1])}，实际是 {shape_str(advantages.shape)}（逐 token 的优势请用 "
            "importance_sampling_level='token'）"
        )
    if loss_type in TOKEN_SUMMED_LOSS_TYPES:
        warnings.warn(
            f"importance_sampling_level='sequence' 与 loss_type={loss_type!r} 同用：{loss_type!r} 把逐 token 损失求和后"
            "再除以 token 数或常数，而序列比率给一条回答的每个 token 同一个损失，于是每条回答的损失被乘上了它的长度 "
            "|o_i|，不再是 GSPO 的按序列平均（TRL 在构造 GRPOTrainer 时用 logger.warning 提示，见 TRL #3823、#6042）。GSPO 请用 loss_type='grpo'。",
            UserWarning,
            stacklevel=3,
        )
