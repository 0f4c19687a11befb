"""输入检查：坏输入给出清楚的 `ValueError`，而不是静默的 NaN 或错误的广播。

每条报错都写出参数名、实际形状和期望形状，例如::

    ValueError: old_logps 的形状是 (4, 2)，期望 (4, 3)（与 logps 相同）
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def shape_str(shape) -> str:
    """把 `torch.Size` 写成 `(4, 3)` 的样子（一维时写成 `(4,)`）。"""
    dims = tuple(int(d) for d in shape)
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def check_tensor(name: str, x: object) -> Tensor:
    """`x` 必须是张量，否则报错；返回 `x` 本身。"""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} 应是 torch.Tensor，实际是 {type(x).__name__}")
    return x


def check_ndim(name: str, x: Tensor, ndim: int, layout: str) -> None:
    """`x` 必须是 `ndim` 维（`layout` 写进报错，例如 `"(B, T)"`）。"""
    check_tensor(name, x)
    if x.dim() != ndim:
        raise ValueError(f"{name} 的形状是 {shape_str(x.shape)}，期望 {ndim} 维 {layout}")


def check_shape(name: str, x: Tensor, shape, like: str | None = None) -> None:
    """`x` 的形状必须等于 `shape`；`like` 说明期望形状从哪来（例如 `"logps"`）。"""
    check_tensor(name, x)
    if tuple(x.shape) != tuple(shape):
        hint = f"（与 {like} 相同）" if like else ""
        raise ValueError(f"{name} 的形状是 {shape_str(x.shape)}，期望 {shape_str(shape)}{hint}")


def check_finite(name: str, x: Tensor) -> None:
    """`x` 不得含 NaN 或 ±inf。"""
    if not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} 含 {bad} 个非有限值（NaN 或 ±inf）；填充位置也请填有限值，例如 0")


def check_finite_inside(name: str, x: Tensor, mask: Tensor) -> None:
    """`x` 在掩码为 1 的位置不得含 NaN 或 ±inf（填充位置的值不看：汇总时按掩码选取，不相乘）。"""
    bad = ~torch.isfinite(x) & mask.bool()
    if bad.any():
        raise ValueError(f"{name} 在掩码为 1 的位置含 {int(bad.sum())} 个非有限值（NaN 或 ±inf）")


def check_float(name: str, x: Tensor) -> None:
    """`x` 必须是浮点张量（整数奖励求平均时 torch 只会报 `mean(): could not infer output dtype`）。"""
    if not x.is_floating_point():
        raise ValueError(f"{name} 应是浮点张量，实际 dtype 是 {x.dtype}；请先转换，例如 {name}.float()")


def check_detached(name: str, x: Tensor, why: str) -> None:
    """`x`（旧策略或参考模型的对数概率）不得带梯度，否则 `why` 里说的梯度恰好抵消为 0、损失在动却什么也学不到。"""
    if x.requires_grad:
        raise ValueError(
            f"{name} 带着梯度（requires_grad=True）：{why}。请在 torch.no_grad() 下计算它，或传入 {name}.detach()"
        )


def check_not_empty(name: str, x: Tensor) -> None:
    """批大小 `B = x.shape[0]` 必须 ≥ 1：空批次没有可平均的回答。"""
    if x.shape[0] == 0:
        raise ValueError(f"{name} 的形状是 {shape_str(x.shape)}：空批次（B = 0）没有可平均的回答")


def check_mask(name: str, mask: Tensor, shape, like: str) -> None:
    """掩码形状必须等于 `shape`，且只含 0 和 1。"""
    check_shape(name, mask, shape, like)
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f"{name} 只能含 0 和 1")


def check_nonnegative(name: str, value: float) -> None:
    """标量超参数（如 `beta`、`epsilon`、`eps`）必须是有限的数且 ≥ 0；拒绝 NaN 与 inf（`beta=inf` 只会给出 NaN）。"""
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{name} 应 ≥ 0，实际是 {value}")
    if not math.isfinite(value):
        raise ValueError(f"{name} 应是有限数，实际是 {value}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """字符串选项必须是 `choices` 之一；报错时列出全部可选值。"""
    if value not in choices:
        raise ValueError(f"未知的 {name}={value!r}；可选：{', '.join(repr(c) for c in choices)}")


def check_groups(rewards: Tensor, num_generations: int) -> None:
    """`rewards` 是有限的一维浮点 `(B,)`，`num_generations` 是正整数且整除 `B`（每组 G 个回答相邻）。"""
    check_ndim("rewards", rewards, 1, "(B,)")
    check_float("rewards", rewards)
    check_finite("rewards", rewards)
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations 应是正整数，实际是 {num_generations!r}")
    if rewards.numel() % num_generations:
        raise ValueError(
            f"rewards 的形状是 {shape_str(rewards.shape)}，期望 (n_prompts * num_generations,)："
            f"{rewards.numel()} 不能被 num_generations={num_generations} 整除"
        )


def check_table_batch(prompts: Tensor, completions: Tensor) -> None:
    """查表模型的一批输入：`prompts` 形状 `(B,)`，`completions` 形状 `(B, 1)`（每条回答一个 token）。"""
    check_ndim("prompts", prompts, 1, "(B,)")
    check_ndim("completions", completions, 2, "(B, 1)")
    if completions.shape != (prompts.shape[0], 1):
        raise ValueError(f"completions 的形状是 {tuple(completions.shape)}，期望 ({prompts.shape[0]}, 1)")
