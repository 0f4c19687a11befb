r"""第 5 章（续）的练习：IPO 损失 $\overline{(\Delta - \frac{1}{2\beta})^2}$，可选按回答长度归一化（TRL 的做法）。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, loss_outputs, run_check
from rlhf_toy.losses.dpo import dpo_loss

GRAD = ("chosen_logps", "rejected_logps")


def ipo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
    chosen_lengths: Tensor | None = None,
    rejected_lengths: Tensor | None = None,
) -> Tensor:
    """参考实现：[`rlhf_toy.dpo_loss`][rlhf_toy.losses.dpo.dpo_loss] 的 `loss_type="ipo"`，只返回损失。"""
    return dpo_loss(
        chosen_logps,
        rejected_logps,
        ref_chosen_logps,
        ref_rejected_logps,
        beta=beta,
        loss_type="ipo",
        chosen_lengths=chosen_lengths,
        rejected_lengths=rejected_lengths,
    )[0]


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(7)
    ref_w, ref_l = -5 - 5 * torch.rand(4, generator=g), -5 - 5 * torch.rand(4, generator=g)
    w, lo = ref_w + torch.randn(4, generator=g), ref_l + torch.randn(4, generator=g)
    base = {"chosen_logps": w, "rejected_logps": lo, "ref_chosen_logps": ref_w, "ref_rejected_logps": ref_l}
    lengths = {
        "chosen_lengths": torch.tensor([3.0, 5.0, 2.0, 4.0]),
        "rejected_lengths": torch.tensor([4.0, 1.0, 6.0, 2.0]),
    }
    empty = {
        "chosen_lengths": torch.tensor([3.0, 0.0, 2.0, 4.0]),
        "rejected_lengths": torch.tensor([4.0, 1.0, 0.0, 2.0]),
    }
    return (
        Case("随机的 4 个偏好对，β = 0.1，不按长度归一化（论文的 IPO）", {**base, "beta": 0.1}, grad=GRAD),
        Case("β = 0.5", {**base, "beta": 0.5}, grad=GRAD),
        Case("按回答长度归一化（TRL 的 IPO）", {**base, "beta": 0.1, **lengths}, grad=GRAD),
        Case(
            "空回答（长度为 0）",
            {**base, "beta": 0.1, **empty},
            grad=GRAD,
            key="empty_response",
            hint="长度为 0 的空回答（提示词占满了最大长度、回答被整段截掉）要能处理：本书与 TRL 1.16.0 都把长度限幅为至少 1，"
            "分数是 0 而不是 0/0 = NaN。",
        ),
    )


def _ipo(
    chosen_logps,
    rejected_logps,
    ref_chosen_logps,
    ref_rejected_logps,
    beta=0.1,
    chosen_lengths=None,
    rejected_lengths=None,
    *,
    target=None,
    norm="each",
    reduce="mean",
    form="ipo",
):
    cw, cl = chosen_logps - ref_chosen_logps, rejected_logps - ref_rejected_logps
    if chosen_lengths is not None:
        if norm == "each":
            cw, cl = cw / chosen_lengths.clamp(min=1), cl / rejected_lengths.clamp(min=1)
        elif norm == "noclamp":
            cw, cl = cw / chosen_lengths, cl / rejected_lengths
        elif norm == "sum":
            delta = (cw - cl) / (chosen_lengths + rejected_lengths).clamp(min=1)
            cw, cl = delta, torch.zeros_like(delta)
    delta = cw - cl
    if form == "dpo":
        losses = -F.logsigmoid(beta * delta)
    elif form == "beta_inside":
        losses = (beta * delta - 0.5) ** 2
    else:
        losses = (delta - (1 / (2 * beta) if target is None else target(beta))) ** 2
    return losses.mean() if reduce == "mean" else losses.sum()


def _m(**options):
    return lambda **inputs: _ipo(**inputs, **options)


MISTAKES = (
    Mistake(
        "target_one_over_beta",
        "目标间隔写成了 1/β：IPO 的损失是 (Δ − 1/(2β))²，最小值在 Δ = 1/(2β)（Azar et al. 式 (17)，论文的 τ 即 β）。",
        _m(target=lambda beta: 1 / beta),
    ),
    Mistake(
        "beta_inside",
        "写成了 (βΔ − 1/2)²：最小值的位置相同（Δ = 1/(2β)），但损失与梯度差一个因子 β²。TRL 与论文都是 (Δ − 1/(2β))²。",
        _m(form="beta_inside"),
    ),
    Mistake(
        "dpo_instead",
        "这是 DPO 的 sigmoid 损失 −log σ(βΔ)：IPO 把它换成平方损失，间隔超过目标时会往回拉。",
        _m(form="dpo"),
    ),
    Mistake("sum_not_mean", "对偏好对求了和而不是平均。", _m(reduce="sum")),
    Mistake(
        "lengths_ignored",
        "给了 chosen_lengths、rejected_lengths 却没有用：TRL 的 IPO 先把两侧的对数概率比各自除以回答长度，再相减。",
        _m(norm="none"),
    ),
    Mistake(
        "sum_of_lengths",
        "用两侧长度之和去除间隔：两侧要各自除以自己的长度，(ρ_w/|y_w|) − (ρ_l/|y_l|)。",
        _m(norm="sum"),
    ),
    Mistake(
        "length_not_clamped",
        "长度没有限幅为至少 1：空回答（长度 0）的分数成了 0/0 = NaN 或 ±inf，一个偏好对毁掉整批。"
        "TRL 1.16.0 与本书都用 lengths.clamp(min=1)。",
        _m(norm="noclamp"),
    ),
)

EXERCISE = Exercise("ipo_loss", ipo_loss, _cases(), loss_outputs, MISTAKES)


def check_ipo_loss(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `ipo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1, chosen_lengths=None, rejected_lengths=None)`（第 5 章续）。

    读者的函数返回标量损失（或 `(loss, metrics)`，只检查损失）；给了长度时两侧的对数概率比先各自除以
    $\max(\lvert y\rvert, 1)$。用例：不归一化（$\beta = 0.1$ 与 $0.5$）、按长度归一化、空回答；比较损失与它对策略两侧的梯度。
    参考实现是 [`dpo_loss`][rlhf_toy.losses.dpo.dpo_loss] 的 `loss_type="ipo"`。

    Args:
        your_fn: 读者的函数；输入都是形状 `(B,)` 的张量。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_ipo_loss(ipo_loss, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
