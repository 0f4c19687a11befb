r"""用 sigmoid 软门代替硬截断：SAPO（TRL `loss_type="sapo"`）。

硬截断在 $w$ 越过 $1\pm\epsilon$ 的那一点把梯度从 $w\hat A$ 一下变成 0。SAPO（Gao et al., 2025, arXiv 2511.20347）
把代理目标里的 $w$ 换成一个光滑的门函数

$$f_\tau(w) = \frac{4}{\tau}\,\sigma\big(\tau\,(w-1)\big),\qquad
\ell_{i,t} = -f_{\tau_i}(w_{i,t})\,\hat A_i,\qquad
\tau_i = \begin{cases}\tau_{pos} & \hat A_i > 0\\ \tau_{neg} & \hat A_i \le 0\end{cases}$$

$\sigma$ 是 logistic 函数。对 $\log\pi_\theta$ 的梯度权重是
$f_\tau'(w)\,w\,\hat A = 4\,\sigma(1-\sigma)\,w\,\hat A$（$\sigma = \sigma(\tau(w-1))$）：$w = 1$ 时恰为 $\hat A$（与不截断的
策略梯度相同，$4/\tau$ 就是为此而乘），离 1 越远越平滑地衰减到 0，$\tau$ 越大衰减越快（见 `gradient_weight`）。
负优势用更大的温度 $\tau_{neg} > \tau_{pos}$（TRL 默认 1.05 与 1.0），让负样本的更新衰减得更快。
与 TRL 1.16 `GRPOTrainer._compute_loss` 的 `sapo` 分支逐式相同，汇总同 `grpo`（先在每条回答内平均，再在回答间平均）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean
from rlhf_toy.losses.grpo import (
    IMPORTANCE_SAMPLING_LEVELS,
    _check_grpo_inputs,
    _check_sequence_level,
    sequence_log_ratio,
)

# --8<-- [end:imports]


def _check_temperatures(sapo_temperature_pos: float, sapo_temperature_neg: float) -> None:
    for name, value in (("sapo_temperature_pos", sapo_temperature_pos), ("sapo_temperature_neg", sapo_temperature_neg)):
        if not value > 0 or value == float("inf"):  # 也拒绝 NaN：门是 4/τ·σ(τ(w−1))，τ ≤ 0 没有定义
            raise ValueError(f"{name} 应是有限正数，实际是 {value}")


def _temperatures(positive: Tensor, pos: float, neg: float, dtype: torch.dtype) -> Tensor:
    """τ 直接建成输入的 dtype（TRL 的 `torch.where(cond, pos, neg)` 先得到 float32，float64 时 1.05 被舍入）。"""
    return torch.where(positive, torch.tensor(pos, dtype=dtype), torch.tensor(neg, dtype=dtype))


# --8<-- [start:soft_gate]
def soft_gate(
    ratio: Tensor, advantages: Tensor, sapo_temperature_pos: float = 1.0, sapo_temperature_neg: float = 1.05
) -> Tensor:
    r"""SAPO 的软门 $f_\tau(w) = \frac{4}{\tau}\sigma(\tau(w-1))$，$\hat A > 0$ 时 $\tau = \tau_{pos}$，否则 $\tau_{neg}$。

    $f_\tau(1) = 2/\tau$，$f_\tau'(1) = 1$：在同策略处与 $w$ 本身一阶相同，所以梯度等于普通策略梯度。

    Args:
        ratio: 重要性采样比率 $w$，形状 `(B, T)` 或 `(B, 1)`，带梯度。
        advantages: 优势，可与 `ratio` 广播（通常 `(B, 1)`）；只用它的符号选温度。
        sapo_temperature_pos: $\hat A > 0$ 时的温度 $\tau_{pos} > 0$（TRL `sapo_temperature_pos`，默认 1.0）。
        sapo_temperature_neg: $\hat A \le 0$ 时的温度 $\tau_{neg} > 0$（TRL `sapo_temperature_neg`，默认 1.05）。

    Returns:
        与 `ratio`、`advantages` 广播后同形状的门值，dtype 同 `ratio`。

    Raises:
        ValueError: 温度不是有限正数。

    Examples:
        >>> soft_gate(torch.tensor([[1.0]]), torch.tensor([[1.0]])).item()
        2.0
    """
    _check_temperatures(sapo_temperature_pos, sapo_temperature_neg)
    tau = _temperatures(advantages > 0, sapo_temperature_pos, sapo_temperature_neg, ratio.dtype)
    return torch.sigmoid(tau * (ratio - 1)) * 4 / tau


# --8<-- [end:soft_gate]


# --8<-- [start:gradient_weight]
def gradient_weight(
    ratio: Tensor, advantage: Tensor | float, sapo_temperature_pos: float = 1.0, sapo_temperature_neg: float = 1.05
) -> Tensor:
    r"""目标 $f_\tau(w)\hat A$ 对 $\log\pi_\theta$ 的导数 $4\,\sigma(1-\sigma)\,w\,\hat A$，$\sigma = \sigma(\tau(w-1))$。

    处处为正（乘 $\hat A$ 的符号）、没有零梯度区：$w = 1$ 时等于 $\hat A$，$w \to 0$ 或 $w \to \infty$ 时平滑地趋于 0。

    Args:
        ratio: 比率 $w$，任意形状。
        advantage: 优势 $\hat A$，可与 `ratio` 广播。
        sapo_temperature_pos: $\hat A > 0$ 时的温度。
        sapo_temperature_neg: $\hat A \le 0$ 时的温度。

    Returns:
        广播后同形状的权重。

    Examples:
        >>> gradient_weight(torch.tensor([1.0]), 1.0).item()
        1.0
    """
    advantage = torch.as_tensor(advantage, dtype=ratio.dtype)
    _check_temperatures(sapo_temperature_pos, sapo_temperature_neg)
    tau = _temperatures(advantage > 0, sapo_temperature_pos, sapo_temperature_neg, ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1))
    return 4 * gate * (1 - gate) * ratio * advantage


# --8<-- [end:gradient_weight]


# --8<-- [start:soft_gate_loss]
def soft_gate_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    ref_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    beta: float = 0.0,
    importance_sampling_level: str = "token",
) -> tuple[Tensor, dict[str, float]]:
    r"""SAPO 损失：$\ell_{i,t} = -f_{\tau_i}(w_{i,t})\hat A_i + \beta k_3$，按 `grpo` 方式汇总。

    与 TRL 1.16 `GRPOTrainer._compute_loss` 在 `loss_type="sapo"` 时相同（单进程、无梯度累积）。没有
    `epsilon`/`epsilon_high`：门本身就是信任域，TRL 的 `sapo` 分支也不读它们，也不记 `clip_ratio`。
    `importance_sampling_level="sequence"` 时门作用在 GSPO 的序列比率 $s_i$ 上，每条回答一个门值。

    TRL 的细节：它用 `torch.where(advantages > 0, τ_pos, τ_neg)` 取温度，得到的是**默认 dtype（float32）**的张量，
    所以 float64 输入时 TRL 实际用的 $\tau_{neg}$ 是 float32 的 1.05（1.0499999523…）；本函数用输入的 dtype。
    两者相差约 $5\times10^{-8}$（相对），在 float64 的比较容差之内（`tests/conformance/test_soft_gate_trl.py`）。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时的 $\log\pi_{old}$，形状 `(B, T)`，不带梯度；`None` 时取 `logps.detach()`。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`；`beta == 0` 时可为 `None`。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`（`"sequence"` 时只能是 `(B,)`）。
        mask: 0/1 损失掩码，形状 `(B, T)`；整行为 0 的回答（例如 `mask_truncated_completions=True` 截掉的）贡献 0，
            但仍算在回答数 $B$ 里（同 `grpo`）。
        sapo_temperature_pos: $\tau_{pos} > 0$（TRL 默认 1.0）。
        sapo_temperature_neg: $\tau_{neg} > 0$（TRL 默认 1.05）。
        beta: KL 系数 $\beta \ge 0$（TRL 1.16 默认 0）。
        importance_sampling_level: `"token"` 或 `"sequence"`，同 TRL。

    Returns:
        `(loss, metrics)`：标量损失；`beta > 0` 时 `metrics["kl"]` 是掩码内 $k_3$ 的 token 平均，否则为空字典。

    Raises:
        ValueError: 形状不符、含非有限值、`mask` 不是 0/1、温度不是有限正数、`beta` 为负、`beta > 0` 却没有
            `ref_logps`、`importance_sampling_level` 未知，或 `"sequence"` 时 `advantages` 是 `(B, T)`。
    """
    _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, 0.0, None)
    _check_temperatures(sapo_temperature_pos, sapo_temperature_neg)
    check_choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    old_logps = logps.detach() if old_logps is None else old_logps
    adv = advantages.detach().unsqueeze(-1) if advantages.dim() == 1 else advantages.detach()
    if importance_sampling_level == "sequence":
        _check_sequence_level(advantages, logps, "grpo")  # 只检查 advantages 是 (B,)
        ratio = sequence_log_ratio(logps, old_logps, mask).exp()  # (B, 1)
    else:
        ratio = (logps - old_logps).exp()
    per_token_loss = -soft_gate(ratio, adv, sapo_temperature_pos, sapo_temperature_neg) * adv
    metrics = {}
    if beta > 0:
        kl = kl_estimate(logps, ref_logps, "k3")
        per_token_loss = per_token_loss + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), mask).item()
    return aggregate_loss(per_token_loss.expand_as(logps), mask, "grpo"), metrics


# --8<-- [end:soft_gate_loss]
