r"""第 2 章的练习：RLOO 的留一法优势 $\hat A_i = r_i - \frac{1}{G-1}\sum_{j\ne i} r_j$。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlhf_toy.estimators.advantages import rloo_advantages
from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(2)
    two_groups = torch.cat([torch.rand(4, generator=g), 2.0 + torch.rand(4, generator=g)])
    return (
        Case("两组随机奖励，G = 4（两组的平均相差很大）", {"rewards": two_groups, "num_generations": 4}),
        Case(
            "0/1 奖励，G = 4", {"rewards": torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]), "num_generations": 4}
        ),
        Case("组内奖励全相同", {"rewards": torch.tensor([0.35, 0.35, 0.35, 1.0, 0.0, 0.0]), "num_generations": 3}),
        Case("G = 2", {"rewards": torch.tensor([0.3, 0.9, 0.5, 0.1]), "num_generations": 2}),
        Case(
            "G = 1（没有其余回答）",
            {"rewards": torch.tensor([0.3, 0.9]), "num_generations": 1},
            key="single_generation",
            hint="G = 1 时组里没有“其余回答”，留一法基线没有定义；本书与 group_advantages 一致，定义优势为 0"
            "（直接套 G/(G−1) 会除以 0）。",
        ),
    )


def _include_self(rewards, num_generations):
    grouped = rewards.view(-1, num_generations)
    return (grouped - grouped.mean(1, keepdim=True)).view(-1)


def _strided(rewards, num_generations):
    grouped = rewards.view(num_generations, -1)  # 把 [0, 1, 0, 1, …] 的布局当成了组
    k = num_generations
    return (k / (k - 1) * (grouped - grouped.mean(0, keepdim=True))).view(-1)


def _std(rewards, num_generations):
    grouped = rewards.view(-1, num_generations)
    return ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)


def _batch(rewards, num_generations):
    return rewards - (rewards.sum() - rewards) / (rewards.numel() - 1)


MISTAKES = (
    Mistake(
        "self_baseline",
        "用这条回答自己的奖励当了基线：优势恒为 0，什么也学不到。基线必须与被打分的回答无关，用同组其余 G − 1 个回答的平均。",
        lambda rewards, num_generations: torch.zeros_like(rewards),
    ),
    Mistake(
        "include_self",
        "基线用了含自己的组内平均：结果恰好是 RLOO 乘 (G − 1)/G。它逐样本只是一个常数倍（Dr. GRPO 用的就是它），"
        "算不上错误，但不是留一法：留一法的基线不含被打分的回答，Â_i = G/(G − 1)·(r_i − r̄)。",
        _include_self,
    ),
    Mistake(
        "group_layout",
        "组的布局错位：同一提示词的 G 个回答在批内相邻，应 rewards.view(-1, G)；view(G, -1) 把每隔一个的回答当成了一组"
        "（与用 repeat 而不是 repeat_interleave 配提示词是同一个错误）。",
        _strided,
    ),
    Mistake(
        "std_normalised",
        "除以了组内标准差：这是 GRPO 的组内标准化（第 6 章），不是 RLOO。RLOO 只减基线，不缩放。",
        _std,
    ),
    Mistake(
        "batch_baseline",
        "基线用了整批其余回答的平均，而不是同组其余回答的平均：不同提示词的难度不同，基线要按提示词（组）分开算。",
        _batch,
    ),
)

EXERCISE = Exercise("rloo_advantages", rloo_advantages, _cases(), tensor_output("advantages"), MISTAKES)


def check_rloo_advantages(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `rloo_advantages(rewards, num_generations)`：RLOO 的留一法优势（第 2 章）。

    用例：两组平均相差很大的随机奖励、0/1 奖励、组内奖励全相同、$G = 2$、$G = 1$；比较值
    （参考实现是 [`rloo_advantages`][rlhf_toy.estimators.advantages.rloo_advantages]）。

    Args:
        your_fn: 读者的函数，签名 `(rewards, num_generations)`：`rewards` 形状 `(B,)`，同组的回答相邻；返回形状 `(B,)`。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_rloo_advantages(rloo_advantages, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
