r"""第 8 章的练习：KL 正则目标的精确最优解 $\log\pi^*_\beta = \log\mathrm{softmax}(\log\pi_{\mathrm{ref}} + \hat r/\beta)$。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output
from rlhf_toy.studies.kl_estimators import reverse_kl_optimum


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(11)
    ref = torch.randn(2, 5, generator=g).log_softmax(-1)
    rewards = torch.rand(2, 5, generator=g)
    binary = torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]])
    return (
        Case("两个提示词、5 个回答，β = 0.5", {"ref_logps": ref, "rewards": rewards, "beta": 0.5}),
        Case("β = 2", {"ref_logps": ref, "rewards": rewards, "beta": 2.0}),
        Case("奖励整体加 5（最优解不变）", {"ref_logps": ref, "rewards": rewards + 5.0, "beta": 0.5}),
        Case("β = 0.01，0/1 奖励（r/β = 100）", {"ref_logps": ref, "rewards": binary, "beta": 0.01}),
        Case("β = 1000（几乎就是参考模型）", {"ref_logps": ref, "rewards": rewards, "beta": 1000.0}),
    )


MISTAKES = (
    Mistake(
        "beta_multiplies",
        "写成了 exp(β·r)：最优解是 π* ∝ π_ref·exp(r/β)。β 越大越贴近参考模型，β → 0 时只追奖励。",
        lambda ref_logps, rewards, beta: (ref_logps + beta * rewards).log_softmax(-1),
    ),
    Mistake(
        "no_reference",
        "漏了参考模型：π* ∝ π_ref·exp(r/β)，不是 softmax(r/β)。KL 正则把最优解锚在参考模型上。",
        lambda ref_logps, rewards, beta: (rewards / beta).log_softmax(-1),
    ),
    Mistake(
        "not_normalised",
        "没有归一化：log π_ref + r/β 只是 log π* 加上 log Z(x)，要在回答维度上减去 logsumexp（log_softmax(·, dim=-1)）。",
        lambda ref_logps, rewards, beta: ref_logps + rewards / beta,
    ),
    Mistake(
        "returns_probs",
        "返回的是概率 π*，而参考实现（reverse_kl_optimum）返回对数概率 log π*。",
        lambda ref_logps, rewards, beta: (ref_logps + rewards / beta).softmax(-1),
    ),
    Mistake(
        "wrong_dim",
        "在错的维度上归一化：每个提示词（每一行）自己是一个分布，softmax 要沿最后一维（回答）做。",
        lambda ref_logps, rewards, beta: (ref_logps + rewards / beta).log_softmax(0),
    ),
    Mistake(
        "overflow",
        "先算 exp(r/β) 再归一化：β 小时 r/β 很大，float32 里 e^{89} 就已是 inf，inf/inf = NaN。在对数空间里做：log_softmax(log π_ref + r/β)。",
        lambda ref_logps, rewards, beta: torch.log(
            ref_logps.exp()
            * torch.exp(rewards / beta)
            / (ref_logps.exp() * torch.exp(rewards / beta)).sum(-1, keepdim=True)
        ),
    ),
)

EXERCISE = Exercise("reverse_kl_optimum", reverse_kl_optimum, _cases(), tensor_output("log_pi_star"), MISTAKES)


def check_reverse_kl_optimum(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `reverse_kl_optimum(ref_logps, rewards, beta)`：KL 正则目标的精确最优解 $\log\pi^*_\beta$（第 8 章）。

    用例：两个 $\beta$、奖励整体平移、$\beta = 0.01$ 的 0/1 奖励（朴素写法会溢出）、$\beta = 1000$；比较返回的
    $\log\pi^*$（参考实现是 [`reverse_kl_optimum`][rlhf_toy.studies.kl_estimators.reverse_kl_optimum]）。

    Args:
        your_fn: 读者的函数；`ref_logps`、`rewards` 形状 `(P, V)`（每行一个提示词），返回同形状的 $\log\pi^*$。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_reverse_kl_optimum(reverse_kl_optimum, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
