r"""第 14 章的练习：诊断规则里的“持续”——第一段连续 `sustain` 个不低于 `limit` 的值从哪里开始。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output


def first_sustained(values: Tensor, limit: float, sustain: int = 3) -> int:
    """第一段连续 `sustain` 个不低于 `limit` 的值的起始下标；没有时返回 -1。值不足 `sustain` 个时要求全部满足。

    与 `rlhf_toy.diagnose.rules` 判断“持续”的写法相同（那里按日志的步，这里按下标）。

    Args:
        values: 一个指标按步排列的值，形状 `(N,)`。
        limit: 阈值（含）。
        sustain: 要连续几个。

    Returns:
        起始下标（从 0 数），或 -1。
    """
    need = min(sustain, len(values))
    run = 0
    for i, v in enumerate(values.tolist()):
        run = run + 1 if v >= limit else 0
        if need and run >= need:
            return i - need + 1
    return -1


def _cases() -> tuple[Case, ...]:
    t = torch.tensor
    return (
        Case("中间有一段连续 3 个", {"values": t([0.1, 0.95, 0.92, 0.97, 1.0, 0.3]), "limit": 0.9}),
        Case("单步的尖峰不算", {"values": t([0.1, 0.95, 0.2, 0.95, 0.93, 0.2]), "limit": 0.9}),
        Case("没有", {"values": t([0.1, 0.2, 0.3]), "limit": 0.9}),
        Case("恰好等于阈值也算", {"values": t([0.25, 0.5, 0.5, 0.5]), "limit": 0.5}),
        Case("在结尾", {"values": t([0.0, 0.0, 1.0, 1.0, 1.0]), "limit": 0.9}),
        Case("sustain = 2", {"values": t([0.0, 1.0, 0.0, 1.0, 1.0]), "limit": 0.5, "sustain": 2}),
        Case(
            "只有 2 个值：要求全部满足",
            {"values": t([0.95, 0.97]), "limit": 0.9},
            key="short_log",
            hint="值不足 sustain 个时，规则要求全部满足（min(sustain, len(values))），不是永远检不出。",
        ),
    )


def _end_of_run(values: Tensor, limit: float, sustain: int = 3) -> int:
    need, run = min(sustain, len(values)), 0
    for i, v in enumerate(values.tolist()):
        run = run + 1 if v >= limit else 0
        if need and run >= need:
            return i
    return -1


def _not_consecutive(values: Tensor, limit: float, sustain: int = 3) -> int:
    need, seen = min(sustain, len(values)), []
    for i, v in enumerate(values.tolist()):
        if v >= limit:
            seen.append(i)
            if len(seen) >= need:
                return seen[0]
    return -1


def _strict(values: Tensor, limit: float, sustain: int = 3) -> int:
    return first_sustained(values, limit + 1e-6, sustain)


MISTAKES = (
    Mistake(
        "end_of_run",
        "返回的是这一段的最后一个下标：症状从这一段的第一步开始（i − need + 1），报告要指向它开始的那一步。",
        _end_of_run,
    ),
    Mistake(
        "not_consecutive",
        "数的是一共有几个值越过阈值，不是连续几个：中间隔着正常值的几次尖峰不算持续，遇到低于阈值的值要把计数清零。",
        _not_consecutive,
    ),
    Mistake("strict", "用了 > 而不是 ≥：恰好等于阈值也算越过（规则写的是“不低于”）。", _strict),
)

EXERCISE = Exercise("first_sustained", first_sustained, _cases(), tensor_output("first_sustained"), MISTAKES)


def check_first_sustained(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `first_sustained(values, limit, sustain=3)`：诊断规则里的“持续”（第 14 章）。

    用例：中间一段、单步尖峰、没有、恰等于阈值、在结尾、`sustain=2`、值少于 `sustain` 个；比较返回的下标
    （参考实现是本模块的 `first_sustained`，与 `rlhf_toy.diagnose.rules` 的写法相同）。

    Args:
        your_fn: 读者的函数；`values` 形状 `(N,)`，返回整数下标或 -1。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_first_sustained(first_sustained, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
