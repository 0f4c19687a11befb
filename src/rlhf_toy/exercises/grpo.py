r"""第 6 章的练习：组内相对优势 $\hat A_i = (r_i - \mu_g)/(\sigma_g + \varepsilon)$，包括组内奖励全相同的组。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlhf_toy.estimators.advantages import group_advantages
from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(8)
    two_groups = torch.cat([torch.rand(4, generator=g), 2.0 + 3.0 * torch.rand(4, generator=g)])
    return (
        Case("两组随机奖励，G = 4（两组的平均与离散程度都不同）", {"rewards": two_groups, "num_generations": 4}),
        Case("0/1 奖励 [1, 0, 0, 0]", {"rewards": torch.tensor([1.0, 0.0, 0.0, 0.0]), "num_generations": 4}),
        Case(
            "组内奖励全相同，G = 8（8 个 0.35 的 float32 平均不精确，允许 1e-3 的舍入误差）",
            {"rewards": torch.tensor([0.35] * 8 + [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]), "num_generations": 8},
            atol=1e-3,
        ),
        Case(
            "scale_rewards='batch'",
            {"rewards": two_groups, "num_generations": 4, "scale_rewards": "batch"},
            key="scale_batch",
            hint="scale_rewards='batch' 先减组内平均，再除以整批奖励的标准差（Lite-PPO，TRL 的同名选项）。",
        ),
        Case(
            "scale_rewards='none'",
            {"rewards": two_groups, "num_generations": 4, "scale_rewards": "none"},
            key="scale_none",
            hint="scale_rewards='none' 只减组内平均、不除以标准差（Dr. GRPO）。",
        ),
        Case("eps = 0.1", {"rewards": two_groups, "num_generations": 4, "eps": 0.1}),
        Case(
            "G = 1（每个提示词一个回答）",
            {"rewards": torch.tensor([0.3, 0.9]), "num_generations": 1},
            key="single_generation",
            hint="G = 1 时组里只有自己，减去组内平均后恰为 0；一个样本的 Bessel 标准差是 0/0 = NaN，本书定义优势为 0。",
        ),
    )


def _grouped(
    rewards,
    num_generations,
    scale_rewards="group",
    eps=1e-4,
    *,
    correction=1,
    use_eps=True,
    layout="adjacent",
    stats="group",
):
    grouped = rewards.view(-1, num_generations) if layout == "adjacent" else rewards.view(num_generations, -1).T
    if stats == "batch":
        mean, std = rewards.mean(), rewards.std(correction=correction)
    else:
        mean, std = grouped.mean(1, keepdim=True), grouped.std(1, keepdim=True, correction=correction)
    centered = grouped - mean
    if scale_rewards == "group":
        centered = centered / (std + eps) if use_eps else centered / std
    elif scale_rewards == "batch":
        centered = centered / (rewards.std() + eps)
    out = centered if layout == "adjacent" else centered.T
    return out.reshape(-1)


def _m(**options):
    return lambda **inputs: _grouped(**inputs, **options)


MISTAKES = (
    Mistake(
        "population_std",
        "标准差没做 Bessel 校正：torch.std 默认除以 G − 1（本书、TRL、verl 都如此），numpy.std 和 std(correction=0) 除以 G，"
        "组小时差别不小（G = 4 时差 √(4/3) 倍）。",
        _m(correction=0),
    ),
    Mistake(
        "group_layout",
        "组的布局错位：同一提示词的 G 个回答在批内相邻，应 rewards.view(-1, G)；view(G, -1) 把每隔几个的回答当成了一组"
        "（与用 repeat 而不是 repeat_interleave 配提示词是同一个错误）。",
        _m(layout="strided"),
    ),
    Mistake(
        "batch_statistics",
        "用了整批的平均和标准差，而不是每组自己的：组内相对优势要和同一提示词的其他回答比，不同提示词的难度不同。",
        _m(stats="batch"),
    ),
    Mistake(
        "no_std",
        "没有除以组内标准差：这是 scale_rewards='none'（Dr. GRPO）的做法；默认的 'group' 要除以 σ_g + ε。",
        _m(scale_rewards="none"),
    ),
    Mistake(
        "no_eps",
        "除以标准差时没有加 ε：全对或全错的组标准差为 0（或只剩舍入残差），得到 NaN 或 inf，一个就能毁掉整个批次的梯度。"
        "写成 (r − μ)/(σ + ε)，TRL 用 ε = 1e-4。",
        _m(use_eps=False),
    ),
    Mistake(
        "scale_rewards_ignored",
        "没有看 scale_rewards 参数：'batch' 除以整批奖励的标准差，'none' 不除，只有 'group'（默认）除以组内标准差。",
        lambda rewards, num_generations, scale_rewards="group", eps=1e-4: _grouped(
            rewards, num_generations, "group", eps
        ),
    ),
)

EXERCISE = Exercise(
    "group_advantages", group_advantages, _cases(), tensor_output("advantages"), MISTAKES, atol=1e-4, rtol=1e-3
)


def check_group_advantages(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `group_advantages(rewards, num_generations, scale_rewards="group", eps=1e-4)`（第 6 章）。

    用例：两组随机奖励、0/1 奖励、组内奖励全相同（允许 1e-3 的舍入误差：TRL 那样不特殊处理也能通过）、
    `scale_rewards` 的另两种取值、`eps = 0.1`、$G = 1$；比较值（参考实现是
    [`group_advantages`][rlhf_toy.estimators.advantages.group_advantages]）。

    Args:
        your_fn: 读者的函数；`rewards` 形状 `(B,)`，同组的回答相邻；返回形状 `(B,)`。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_group_advantages(group_advantages, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
