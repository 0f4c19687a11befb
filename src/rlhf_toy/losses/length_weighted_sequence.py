r"""按回答长度加权的序列级截断损失：LUSPO（TRL `loss_type="luspo"`）。

GSPO 给每条回答一个比率 $s_i$ 和一个截断代理损失 $\ell_i = -\min(s_i\hat A_i, \mathrm{clip}(s_i)\hat A_i)$，再在回答间
平均（`grpo_loss(..., importance_sampling_level="sequence")`）。$s_i$ 是 token 比率的几何平均，所以每个 token 的
梯度被除了一次 $\lvert o_i\rvert$：长回答的每个 token 得到的更新更小。LUSPO（arXiv 2602.05261，
*Length-Unbiased Sequence Policy Optimization*）把每条回答的损失乘回它的长度：

$$\mathcal L = \frac1B\sum_{i=1}^{B} \lvert o_i\rvert\,\ell_i,\qquad
\frac{\partial \mathcal L}{\partial \log\pi_\theta(o_{i,t})} = -\frac1B\, s_i\hat A_i\,\mathbb 1[\text{未截断}]$$

于是每个 token 的梯度权重与回答长度无关（见 `gradient_weight`）。与 TRL 1.16 `GRPOTrainer._compute_loss`
在 `loss_type="luspo"` 时相同：TRL 的汇总是 `(per_token_loss * mask).sum(-1).mean()`，对序列级的 `(B, 1)` 损失
这正是 $\frac1B\sum_i\lvert o_i\rvert\ell_i$。TRL 的默认 `importance_sampling_level="token"` 也能跑（只打一条日志
警告），那时是逐 token 截断损失在每条回答内**求和**、再在回答间平均；本函数的默认是论文的 `"sequence"`。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_not_empty
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.losses.grpo import (
    IMPORTANCE_SAMPLING_LEVELS,
    _check_grpo_inputs,
    _check_sequence_level,
    clipped_surrogate,
    sequence_log_ratio,
)

# --8<-- [end:imports]


# --8<-- [start:gradient_weight]
def gradient_weight(
    ratio: Tensor, advantage: Tensor | float, epsilon: float = 0.2, epsilon_high: float | None = None
) -> Tensor:
    r"""目标 $\lvert o_i\rvert\min(s\hat A, \mathrm{clip}(s)\hat A)$ 对回答中任一 token 的 $\log\pi_\theta$ 的导数。

    等于 $s\hat A$（$s$ 在截断区内），截断起作用（$s > 1+\epsilon_{high}$ 且 $\hat A > 0$，或 $s < 1-\epsilon$ 且
    $\hat A < 0$）时为 0；与回答长度无关。GSPO 的同一导数还要再除以 $\lvert o_i\rvert$。

    Args:
        ratio: 序列比率 $s$，任意形状。
        advantage: 优势 $\hat A$，可与 `ratio` 广播。
        epsilon: 下侧幅度 $\epsilon$。
        epsilon_high: 上侧幅度；`None` 表示等于 `epsilon`。

    Returns:
        广播后同形状的权重。

    Examples:
        >>> gradient_weight(torch.tensor([1.0, 1.5]), 1.0).tolist()
        [1.0, 0.0]
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    advantage = torch.as_tensor(advantage, dtype=ratio.dtype)
    clipped = ((ratio > 1 + eps_high) & (advantage > 0)) | ((ratio < 1 - epsilon) & (advantage < 0))
    return torch.where(clipped, 0.0, ratio * advantage)


# --8<-- [end:gradient_weight]


# --8<-- [start:length_weighted_sequence_loss]
def length_weighted_sequence_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    ref_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    importance_sampling_level: str = "sequence",
) -> tuple[Tensor, dict[str, float]]:
    r"""LUSPO 损失 $\frac1B\sum_i\sum_t m_{i,t}\big(\ell^{clip}_{i,t} + \beta k_{3,i,t}\big)$：每条回答内求和，回答间平均。

    `"sequence"` 时 $\ell^{clip}_{i,t} = -\min(s_i\hat A_i, \mathrm{clip}(s_i, 1-\epsilon, 1+\epsilon_{high})\hat A_i)$
    对回答的每个 token 相同，求和即 $\lvert o_i\rvert\ell_i$；`"token"` 时是逐 token 的截断代理损失。
    KL 项逐 token 相加后同样**求和**（不是平均），所以 $\beta$ 的实际强度随回答长度增长，这与 TRL 相同。
    整行掩码为 0 的回答（`mask_truncated_completions=True` 截掉的）贡献 0，但仍算在 $B$ 里。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时的 $\log\pi_{old}$，形状 `(B, T)`，不带梯度；`None` 时取 `logps.detach()`。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`；`beta == 0` 时可为 `None`。
        advantages: 优势，形状 `(B,)`（`"token"` 时也可以是 `(B, T)`）。
        mask: 0/1 损失掩码，形状 `(B, T)`。
        epsilon: 截断下侧幅度（TRL `epsilon`，默认 0.2）。
        epsilon_high: 上侧幅度；`None` 表示等于 `epsilon`（TRL 同）。
        beta: KL 系数 $\beta \ge 0$（TRL 1.16 默认 0）。
        importance_sampling_level: `"sequence"`（默认，论文的设定）或 `"token"`（TRL 的默认，TRL 会警告）。

    Returns:
        `(loss, metrics)`：标量损失与 TRL 的 `clip_ratio/low_mean`、`clip_ratio/high_mean`、`clip_ratio/region_mean`
        （序列级时是回答比例，token 级时是掩码内 token 比例）；`beta > 0` 时另有 `kl`。

    Raises:
        ValueError: 形状不符、空批次（B = 0）、含非有限值、`mask` 不是 0/1、`epsilon`/`epsilon_high`/`beta` 为负、`beta > 0` 却没有
            `ref_logps`、`importance_sampling_level` 未知，或 `"sequence"` 时 `advantages` 是 `(B, T)`。
    """
    _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, epsilon, epsilon_high)
    check_not_empty("logps", logps)
    check_choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    old_logps = logps.detach() if old_logps is None else old_logps
    adv = advantages.detach().unsqueeze(-1) if advantages.dim() == 1 else advantages.detach()
    if importance_sampling_level == "sequence":
        _check_sequence_level(advantages, logps, "grpo")  # 只检查 advantages 是 (B,)
        log_ratio = sequence_log_ratio(logps, old_logps, mask)  # (B, 1)
        per_token_loss, _ = clipped_surrogate(log_ratio, torch.zeros_like(log_ratio), adv, epsilon, epsilon_high)
    else:
        log_ratio = logps - old_logps
        per_token_loss, _ = clipped_surrogate(logps, old_logps, adv, epsilon, epsilon_high)
    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = log_ratio.detach().exp()
    low, high = (ratio < 1 - epsilon) & (adv < 0), (ratio > 1 + eps_high) & (adv > 0)
    metrics = {name: _fraction(flags, mask) for name, flags in (("low", low), ("high", high), ("region", low | high))}
    metrics = {f"clip_ratio/{name}_mean": value for name, value in metrics.items()}
    if beta > 0:
        kl = kl_estimate(logps, ref_logps, "k3")
        per_token_loss = per_token_loss + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), mask).item()
    per_token_loss = per_token_loss.expand_as(logps)
    return torch.where(mask.bool(), per_token_loss, 0.0).sum(-1).mean(), metrics


# --8<-- [end:length_weighted_sequence_loss]


def _fraction(flags: Tensor, mask: Tensor) -> float:
    """TRL 的 `global_masked_mean`（单进程）：`(B, 1)` 时对回答平均，`(B, T)` 时在掩码内对 token 平均。"""
    return flags.float().mean().item() if flags.shape[1] == 1 else masked_mean(flags.float(), mask).item()
