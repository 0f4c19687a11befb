r"""第 14 章（续）的练习：梯度范数的尖峰倍数，即诊断器 `grad_norm_spike` 规则比较的量。

第 $i$ 条日志的倍数是 $g_i / \operatorname{median}(g_{\max(0, i-20)}, \dots, g_{i-1})$：此前至多 20 条的中位数
（偶数条时取中间两个的平均，同 Python 的 `statistics.median`）；此前不到 5 条时记 0（规则不判断）。
倍数不低于 10 即 `rlhf_toy.diagnose.rules.check_grad_spike` 报告的尖峰。
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output

WINDOW = 20
"""中位数的窗口：此前至多 20 条（同 `check_grad_spike`）。"""

MIN_HISTORY = 5
"""此前至少 5 条才判断（同 `rlhf_toy.diagnose.rules.GRAD_HISTORY`）。"""


def grad_spike_ratios(grad_norms: Tensor) -> Tensor:
    r"""每条日志的梯度范数除以此前至多 `WINDOW` 条的中位数；此前不到 `MIN_HISTORY` 条时为 0。

    Args:
        grad_norms: 形状 `(N,)` 的 `grad_norm` 序列（非负浮点数，按步排列）。

    Returns:
        形状 `(N,)`、dtype 同输入的倍数；中位数为 0 时记 0（同规则：不判断）。

    Raises:
        ValueError: `grad_norms` 不是一维浮点张量。
    """
    if not isinstance(grad_norms, Tensor) or grad_norms.dim() != 1 or not grad_norms.is_floating_point():
        raise ValueError(
            f"grad_norms 应是形状 (N,) 的浮点张量，实际是 {getattr(grad_norms, 'shape', type(grad_norms))}"
        )
    values = grad_norms.tolist()
    out = []
    for i, v in enumerate(values):
        if i < MIN_HISTORY:
            out.append(0.0)
            continue
        median = statistics.median(values[max(0, i - WINDOW) : i])
        out.append(v / median if median > 0 else 0.0)
    return torch.tensor(out, dtype=grad_norms.dtype)


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(14)
    steady = 0.05 + 0.01 * torch.rand(30, generator=g, dtype=torch.float64)
    short = steady[:10].clone()
    spikes = steady.clone()
    spikes[[3, 12, 13]] = torch.tensor([2.0, 1.0, 0.9], dtype=torch.float64)
    long = 0.05 + 0.01 * torch.rand(45, generator=g, dtype=torch.float64)
    long[:10] = 3.0  # 开头的梯度大：窗口要限在最近 20 条
    long[40] = 1.0
    return (
        Case("平稳的 10 条日志（偶数个数的窗口要取中间两个的平均）", {"grad_norms": short}),
        Case("第 4、13、14 条是尖峰（第 4 条此前不到 5 条）", {"grad_norms": spikes}),
        Case("开头 10 条很大，后面平稳，第 41 条是尖峰（窗口只看最近 20 条）", {"grad_norms": long}),
        Case("只有 3 条（全都不判断）", {"grad_norms": torch.tensor([1.0, 9.0, 0.5], dtype=torch.float64)}),
    )


def _ratios(grad_norms: Tensor, center: Callable[[list[float]], float], window: int | None = WINDOW,
            min_history: int = MIN_HISTORY, include_self: bool = False) -> Tensor:  # fmt: skip
    values = grad_norms.tolist()
    out = []
    for i, v in enumerate(values):
        if i < max(min_history, 1):
            out.append(0.0)
            continue
        lo = 0 if window is None else max(0, i - window)
        c = center(values[lo : i + 1] if include_self else values[lo:i])
        out.append(v / c if c > 0 else 0.0)
    return torch.tensor(out, dtype=grad_norms.dtype)


MISTAKES = (
    Mistake(
        "lower_median",
        "偶数条时取了较小的那个中位数（torch.median 的做法）；规则用 statistics.median，取中间两个的平均。",
        lambda grad_norms: _ratios(grad_norms, lambda w: torch.tensor(w).median().item()),
    ),
    Mistake(
        "mean_not_median",
        "用了平均数：此前的一个尖峰会把平均数抬高，后面紧跟的尖峰就显得不那么高。中位数不受少数尖峰影响。",
        lambda grad_norms: _ratios(grad_norms, statistics.fmean),
    ),
    Mistake(
        "includes_current",
        "窗口里包含了当前这一条：尖峰自己抬高了它的基准。基准只看此前的日志。",
        lambda grad_norms: _ratios(grad_norms, statistics.median, include_self=True),
    ),
    Mistake(
        "whole_history",
        "窗口是此前全部日志，而不是最近 20 条：训练开头的大梯度会一直留在基准里。",
        lambda grad_norms: _ratios(grad_norms, statistics.median, window=None),
    ),
    Mistake(
        "no_min_history",
        "此前不到 5 条时也算了倍数：开头几步的中位数不可靠，规则不判断，记 0。",
        lambda grad_norms: _ratios(grad_norms, statistics.median, min_history=1),
    ),
)

EXERCISE = Exercise("grad_spike_ratios", grad_spike_ratios, _cases(), tensor_output("ratios"), MISTAKES)


def check_grad_spike_ratios(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `grad_spike_ratios(grad_norms)`：梯度范数对此前至多 20 条中位数的倍数（第 14 章（续））。

    用例：平稳的日志（窗口为偶数条）、开头不足 5 条时的尖峰、开头梯度大而窗口只看最近 20 条、只有 3 条的日志；
    比较返回的倍数（参考实现是本模块的 `grad_spike_ratios`，与 `rlhf_toy.diagnose.rules.check_grad_spike` 一致）。

    Args:
        your_fn: 读者的函数；`grad_norms` 是形状 `(N,)` 的张量，返回形状 `(N,)` 的张量。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_grad_spike_ratios(grad_spike_ratios, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
