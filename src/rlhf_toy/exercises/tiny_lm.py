r"""第 9 章的练习：回答的损失掩码（第一个 EOS 计入，之后的位置不计入；没有 EOS 的行全为 1）。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, OutputError, as_tensor, run_check
from rlhf_toy.policies.transformer import completion_mask


def _outputs(ret: Any) -> dict[str, torch.Tensor]:
    mask = as_tensor("mask", ret)
    if mask.dtype == torch.bool or not mask.is_floating_point():
        mask = mask.float()  # 布尔或整数掩码也接受，按 0/1 比较
    if not ((mask == 0) | (mask == 1)).all():
        raise OutputError("mask 只能含 0 和 1")
    return {"mask": mask}


def _cases() -> tuple[Case, ...]:
    EOS = 2
    return (
        Case(
            "一行以 EOS 结束、一行没有 EOS（被超长截停）",
            {"completions": torch.tensor([[5, 2, 0], [5, 6, 7]]), "eos_id": EOS},
        ),
        Case(
            "EOS 之后不是填充符（采样器在 EOS 后还写了 token）",
            {"completions": torch.tensor([[5, 6, 2, 7, 8], [2, 9, 9, 9, 9]]), "eos_id": EOS},
        ),
        Case("两个 EOS（只有第一个算）", {"completions": torch.tensor([[5, 2, 2, 0], [5, 6, 2, 2]]), "eos_id": EOS}),
        Case("EOS 的编号不是 2", {"completions": torch.tensor([[3, 4, 9, 0], [9, 0, 0, 0]]), "eos_id": 9}),
        Case("T = 1", {"completions": torch.tensor([[2], [5]]), "eos_id": EOS}),
    )


def _before_eos(completions, eos_id):
    is_eos = (completions == eos_id).long()
    return (is_eos.cumsum(1) == 0).float()


def _not_eos(completions, eos_id):
    return (completions != eos_id).float()


def _not_pad(completions, eos_id):
    return (completions != 0).float()


def _last_eos(completions, eos_id):
    is_eos = (completions == eos_id).long()
    remaining = is_eos.flip(1).cumsum(1).flip(1)  # 该位置及之后还有几个 EOS
    has = is_eos.sum(1, keepdim=True) > 0
    return torch.where(has, remaining > 0, True).float()


def _hard_coded(completions, eos_id):
    return completion_mask(completions, 2)


MISTAKES = (
    Mistake(
        "eos_excluded",
        "掩码漏掉了 EOS：把 EOS 当成填充去掉，EOS 这个 token 就得不到梯度，模型从奖励里学不到“在哪里停”。"
        "EOS 要算进 |y|：第一个 EOS 及其之前为 1。",
        _before_eos,
    ),
    Mistake(
        "not_eos",
        "用了 completions != eos_id：EOS 本身被去掉，EOS 之后的 token 反而留下了。掩码由第一个 EOS 的位置决定"
        "（TRL：is_eos.int().argmax(1) 找到第一个 EOS 的位置 eos_idx，mask = idx <= eos_idx）。",
        _not_eos,
    ),
    Mistake(
        "pad_based",
        "按填充符判断（completions != PAD）：EOS 之后不一定是填充符（采样器可能在 EOS 后继续写，或者填充符就是 EOS），"
        "掩码要由第一个 EOS 的位置决定。",
        _not_pad,
    ),
    Mistake(
        "last_eos",
        "掩码延伸到了最后一个 EOS：只有第一个 EOS 算数，它之后的一切（包括别的 EOS）都是填充。",
        _last_eos,
    ),
    Mistake("eos_hard_coded", "EOS 的编号写死成了 2：用参数 eos_id。", _hard_coded),
)

EXERCISE = Exercise("completion_mask", completion_mask, _cases(), _outputs, MISTAKES)


def check_completion_mask(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `completion_mask(completions, eos_id)`：回答的损失掩码（第 9 章）。

    用例：以 EOS 结束与被超长截停的行、EOS 之后不是填充符、两个 EOS、EOS 编号不是 2、$T = 1$；比较掩码
    （浮点、布尔或整数的 0/1 都接受；参考实现是 [`completion_mask`][rlhf_toy.policies.transformer.completion_mask]）。

    Args:
        your_fn: 读者的函数；`completions` 形状 `(B, T)`，整数；返回同形状的 0/1 掩码。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_completion_mask(completion_mask, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
