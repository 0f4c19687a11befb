r"""第 6 章（续二）的练习：CISPO 的损失（TRL 约定）与 SAPO 的软门控。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, loss_outputs, run_check, tensor_output
from rlhf_toy.losses.clipped_is_weight import clipped_is_weight_loss
from rlhf_toy.losses.soft_gate import soft_gate

# ---- CISPO 的损失 ----


def cispo_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor, epsilon_high: float = 5.0) -> Tensor:
    r"""参考实现：TRL 约定的 CISPO 损失 $-\operatorname{sg}(\min(w, \epsilon_{\max}))\hat A\log\pi_\theta$，按 `dapo` 汇总。

    就是 [`clipped_is_weight_loss`][rlhf_toy.losses.clipped_is_weight.clipped_is_weight_loss]（`beta=0`）的损失。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，带梯度。
        old_logps: 采样时的对数概率，形状 `(B, T)`。
        advantages: 优势，形状 `(B,)`。
        mask: 0/1 掩码，形状 `(B, T)`。
        epsilon_high: 权重的绝对上限 $\epsilon_{\max}$（TRL `epsilon_high`）。

    Returns:
        标量损失。

    Examples:
        >>> logps = torch.full((1, 2), -0.5, requires_grad=True)
        >>> cispo_loss(logps, logps.detach(), torch.ones(1), torch.ones(1, 2)).item()
        0.5
    """
    return clipped_is_weight_loss(logps, old_logps, None, advantages, mask, epsilon_high=epsilon_high)[0]


def _cispo_cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(28)
    logps = -torch.rand(3, 4, generator=g) - 0.3
    adv = torch.tensor([1.0, -0.5, 0.8])
    near = logps + 0.6 * (torch.rand(3, 4, generator=g) - 0.5)  # 比率约在 0.74 到 1.35 之间
    far = logps - torch.tensor([[1.2, 0.1, -0.4, 0.0], [1.3, 0.2, -0.3, 0.5], [0.9, -0.2, 0.3, 1.1]])  # 有的比率超过 2
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    junk_old = torch.where(mask.bool(), near, -9.0)  # 填充处的比率极大
    empty = torch.cat([mask[:2], torch.zeros(1, 4)])
    ones = torch.ones(3, 4)
    grad = ("logps",)
    return (
        Case(
            "同策略（logps == old_logps）",
            {"logps": logps, "old_logps": logps, "advantages": adv, "mask": ones},
            grad=grad,
        ),
        Case(
            "异策略，比率都在上限以内", {"logps": logps, "old_logps": near, "advantages": adv, "mask": ones}, grad=grad
        ),
        Case(
            "有比率超过上限（epsilon_high = 2.0）",
            {"logps": logps, "old_logps": far, "advantages": adv, "mask": ones, "epsilon_high": 2.0},
            grad=grad,
        ),
        Case(
            "有填充（填充处的比率极大）",
            {"logps": logps, "old_logps": junk_old, "advantages": adv, "mask": mask},
            grad=grad,
        ),
        Case("一行掩码全为 0", {"logps": logps, "old_logps": near, "advantages": adv, "mask": empty}, grad=grad),
        Case(
            "epsilon_high = 0.2（TRL 不设 epsilon_high 时的值）",
            {"logps": logps, "old_logps": near, "advantages": adv, "mask": ones, "epsilon_high": 0.2},
            grad=grad,
        ),
    )


def _cispo(
    logps, old_logps, advantages, mask, epsilon_high=5.0, *, detach=True, cap="abs", surrogate=False, mean="token"
):
    ratio = (logps - old_logps).exp()
    adv = advantages[:, None]
    if surrogate:  # 截断代理目标（GRPO 的写法），不是 CISPO
        per_token = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    else:
        weight = ratio.detach() if detach else ratio
        if cap == "abs":
            weight = weight.clamp(max=epsilon_high)
        elif cap == "rel":
            weight = weight.clamp(max=1 + epsilon_high)
        else:  # 两侧都截，带 PPO 的下界 0.8
            weight = weight.clamp(min=0.8, max=epsilon_high)
        per_token = -weight * adv * logps
    per_token = torch.where(mask.bool(), per_token, 0.0)
    if mean == "sequence":
        return (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if mean == "all":
        return per_token.mean()
    return per_token.sum() / mask.sum().clamp(min=1)


def _c(**options):
    return lambda **inputs: _cispo(**inputs, **options)


CISPO_MISTAKES = (
    Mistake(
        "weight_not_detached",
        "权重 min(w, ε_max) 没有 .detach()：梯度也经过了比率，成了 −Â·w·(1 + log π_θ)，而不是 −min(w, ε_max)·Â。"
        "CISPO 的权重是常数，梯度只经过 log π_θ。",
        _c(detach=False),
    ),
    Mistake(
        "clipped_surrogate",
        "写成了截断代理目标 −min(wÂ, clip(w)Â)（GRPO / PPO）：越界的 token 梯度为 0。"
        "CISPO 的损失是 −sg(min(w, ε_max))·Â·log π_θ：比率只作权重，越界时封顶、不清零。",
        _c(surrogate=True),
    ),
    Mistake(
        "relative_cap",
        "把上限写成了 1 + epsilon_high（verl 与 PPO 的相对写法）。TRL 的 epsilon_high 就是比率的绝对上限 ε_max。",
        _c(cap="rel"),
    ),
    Mistake(
        "lower_bound",
        "给权重加了下限 1 − ε（verl 的写法）。TRL 的 CISPO 没有下限：比率小于 1 时权重就是 w。",
        _c(cap="both"),
    ),
    Mistake(
        "sequence_mean",
        "按 grpo 的方式汇总（先回答内平均、再回答间平均）。TRL 的 cispo 与 dapo 一样，是掩码内全部 token 的平均。",
        _c(mean="sequence"),
    ),
    Mistake(
        "no_mask",
        "没有用掩码：填充 token 也算了进去。用 torch.where(mask.bool(), x, 0.0) 选取，再除以掩码内的 token 数。",
        lambda logps, old_logps, advantages, mask, epsilon_high=5.0: _cispo(
            logps, old_logps, advantages, torch.ones_like(mask), epsilon_high, mean="all"
        ),
    ),
)

CISPO_EXERCISE = Exercise("cispo_loss", cispo_loss, _cispo_cases(), loss_outputs, CISPO_MISTAKES)


def check_cispo_loss(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `cispo_loss(logps, old_logps, advantages, mask, epsilon_high=5.0)`（第 6 章续二）。

    用例：同策略、异策略、比率超过上限、填充处比率极大、一行掩码全为 0、`epsilon_high=0.2`；比较损失与它对
    `logps` 的梯度。参考实现是 [`cispo_loss`][rlhf_toy.exercises.ratio_shaping.cispo_loss]。

    Args:
        your_fn: 读者的函数；`logps`、`old_logps`、`mask` 形状 `(B, T)`，`advantages` 形状 `(B,)`，返回标量。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_cispo_loss(cispo_loss, verbose=False).passed
        True
    """
    return run_check(CISPO_EXERCISE, your_fn, verbose=verbose)


# ---- SAPO 的软门控 ----


def sapo_gate(
    ratio: Tensor, advantages: Tensor, sapo_temperature_pos: float = 1.0, sapo_temperature_neg: float = 1.05
) -> Tensor:
    r"""参考实现：SAPO 的门 $f_\tau(w) = \frac{4}{\tau}\operatorname{sigmoid}(\tau(w-1))$，就是 `losses.soft_gate.soft_gate`。

    Args:
        ratio: 比率 $w$，形状 `(B, T)`，带梯度。
        advantages: 优势，可与 `ratio` 广播（通常 `(B, 1)`）；$\hat A > 0$ 用 $\tau_{pos}$，否则 $\tau_{neg}$。
        sapo_temperature_pos: $\tau_{pos} > 0$。
        sapo_temperature_neg: $\tau_{neg} > 0$。

    Returns:
        与 `ratio` 同形状的门值。

    Examples:
        >>> sapo_gate(torch.ones(1, 1), torch.ones(1, 1)).item()
        2.0
    """
    return soft_gate(ratio, advantages, sapo_temperature_pos, sapo_temperature_neg)


def _gate_cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(11)
    ratio = 0.4 + 2.6 * torch.rand(3, 4, generator=g)
    adv = torch.tensor([[1.0], [-0.7], [0.4]])
    grad = ("ratio",)
    return (
        Case(
            "同策略（ratio 全是 1），正负优势",
            {"ratio": torch.ones(2, 3), "advantages": torch.tensor([[1.0], [-1.0]])},
            grad=grad,
        ),
        Case("异策略，比率在 0.4 到 3 之间", {"ratio": ratio, "advantages": adv}, grad=grad),
        Case("优势为 0（用 τ_neg）", {"ratio": ratio[:2], "advantages": torch.zeros(2, 1)}, grad=grad),
        Case(
            "温度 τ_pos = 2、τ_neg = 3",
            {"ratio": ratio, "advantages": adv, "sapo_temperature_pos": 2.0, "sapo_temperature_neg": 3.0},
            grad=grad,
        ),
        Case(
            "float64，比率离 1 很远",
            {
                "ratio": torch.tensor([[0.05, 1.0, 6.0, 20.0]], dtype=torch.float64),
                "advantages": torch.tensor([[-1.0]]),
            },
            grad=grad,
        ),
    )


def _gate(
    ratio,
    advantages,
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    *,
    swap=False,
    nonneg=False,
    scale="4/tau",
    shift=True,
):
    positive = advantages >= 0 if nonneg else advantages > 0
    pos, neg = (sapo_temperature_neg, sapo_temperature_pos) if swap else (sapo_temperature_pos, sapo_temperature_neg)
    tau = torch.where(positive, torch.tensor(pos, dtype=ratio.dtype), torch.tensor(neg, dtype=ratio.dtype))
    sig = torch.sigmoid(tau * (ratio - 1) if shift else tau * ratio)
    if scale == "none":
        return sig
    if scale == "4":
        return 4 * sig
    return sig * 4 / tau


def _s(**options):
    return lambda **inputs: _gate(**inputs, **options)


GATE_MISTAKES = (
    Mistake(
        "swapped_temperatures",
        "两个温度用反了：Â > 0 用 sapo_temperature_pos（默认 1.0），Â ≤ 0 用 sapo_temperature_neg（默认 1.05，负优势衰减得更快）。",
        _s(swap=True),
    ),
    Mistake(
        "zero_advantage_uses_pos",
        "Â = 0 时用了 τ_pos。TRL 与 verl 都按 advantages > 0 选 τ_pos，所以 Â = 0 用 τ_neg（损失为 0，但门值不同）。",
        _s(nonneg=True),
    ),
    Mistake(
        "missing_scale",
        "门少了系数 4/τ：sigmoid 在 w = 1 处的斜率是 τ/4，乘上 4/τ 才让 f'(1) = 1，同策略时梯度与 GRPO 相同。",
        _s(scale="none"),
    ),
    Mistake(
        "scale_not_divided_by_tau",
        "系数写成了 4 而不是 4/τ：τ ≠ 1 时 w = 1 处的斜率变成 τ，同策略的梯度被放大了 τ 倍。",
        _s(scale="4"),
    ),
    Mistake(
        "no_shift",
        "sigmoid 的参数是 τ·(w − 1)，不是 τ·w：门要以 w = 1（同策略）为中心。",
        _s(shift=False),
    ),
)

GATE_EXERCISE = Exercise("sapo_gate", sapo_gate, _gate_cases(), tensor_output("gate"), GATE_MISTAKES)


def check_sapo_gate(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `sapo_gate(ratio, advantages, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05)`（第 6 章续二）。

    用例：同策略、异策略、优势为 0、别的温度、float64 下离 1 很远的比率；比较门值与 `sum(gate)` 对 `ratio` 的梯度。
    参考实现是 [`soft_gate`][rlhf_toy.losses.soft_gate.soft_gate]。

    Args:
        your_fn: 读者的函数；`ratio` 形状 `(B, T)`，`advantages` 形状 `(B, 1)`，返回与 `ratio` 同形状的张量。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_sapo_gate(sapo_gate, verbose=False).passed
        True
    """
    return run_check(GATE_EXERCISE, your_fn, verbose=verbose)


__all__ = ["check_cispo_loss", "check_sapo_gate", "cispo_loss", "sapo_gate"]
