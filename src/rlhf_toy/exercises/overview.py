r"""第 1 章的练习：整条回答的对数概率 $\log\pi_\theta(y\mid x) = \sum_t m_t\log\pi_\theta(y_t\mid x, y_{<t})$。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output


def sequence_logps(logps: Tensor, mask: Tensor) -> Tensor:
    """参考实现：逐 token 对数概率在掩码内求和（与 `rlhf_toy.train.dpo.sequence_logps`、TRL `DPOTrainer` 相同）。

    Args:
        logps: 逐 token 对数概率，形状 `(B, T)`，浮点。
        mask: 0/1 掩码，形状 `(B, T)`；填充位置为 0。

    Returns:
        形状 `(B,)` 的序列对数概率；整行掩码为 0 时为 0。
    """
    return torch.where(mask.bool(), logps, 0.0).sum(-1)


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(1)
    logps = -torch.rand(3, 4, generator=g) * 2
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    padded = torch.where(mask.bool(), logps, -9.0)  # 填充位置的值有限但没有意义
    full = -torch.rand(2, 3, generator=g) * 2
    return (
        Case("长短不一的回答（填充处是 −9.0）", {"logps": padded, "mask": mask}, grad=("logps",)),
        Case("没有填充", {"logps": full, "mask": torch.ones(2, 3)}, grad=("logps",)),
        Case(
            "整行掩码为 0 的回答",
            {"logps": torch.tensor([[-0.5, -1.0], [-3.0, -3.0]]), "mask": torch.tensor([[1.0, 1.0], [0.0, 0.0]])},
            grad=("logps",),
            key="empty_row",
            hint="整行掩码为 0（回答为空）时，序列对数概率是空和，等于 0；不要除以真实长度（0/0 = NaN）。",
        ),
        Case(
            "T = 1 的查表策略",
            {"logps": torch.tensor([[-2.0794], [-0.1000]]), "mask": torch.ones(2, 1)},
            grad=("logps",),
        ),
    )


MISTAKES = (
    Mistake(
        "mean_not_sum",
        "对 token 取了平均（除以 T）。整条回答的概率是逐 token 概率之积，取对数后是逐 token 对数概率之和；"
        "平均是另一个目标，而且分母还算进了填充。",
        lambda logps, mask: logps.mean(-1),
    ),
    Mistake(
        "masked_mean",
        "在掩码内取了平均（除以真实长度）：这是长度归一化的对数概率（SimPO 用的就是它），不是 log π(y|x)。"
        "T = 1 时两者相同，查表策略上看不出这个错误，到第 9 章才会暴露。",
        lambda logps, mask: (logps * mask).sum(-1) / mask.sum(-1),
    ),
    Mistake(
        "padding_included",
        "没有用掩码：填充位置的对数概率也被加了进去，长短不一的回答被凭空加减了一截。按掩码选取后再求和。",
        lambda logps, mask: logps.sum(-1),
    ),
)

EXERCISE = Exercise("sequence_logps", sequence_logps, _cases(), tensor_output("seq_logps"), MISTAKES)


def check_sequence_logps(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `sequence_logps(logps, mask)`：整条回答的对数概率（第 1 章式 lm-policy）。

    用例：长短不一的回答（填充处放着无意义的有限值）、没有填充、整行掩码为 0、$T = 1$；比较值与对 `logps` 的梯度。

    Args:
        your_fn: 读者的函数，签名 `(logps, mask)`：`logps`、`mask` 形状 `(B, T)`，返回形状 `(B,)`。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_sequence_logps(lambda logps, mask: (logps * mask).sum(-1), verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
