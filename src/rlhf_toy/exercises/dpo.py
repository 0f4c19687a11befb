r"""第 5 章的练习：DPO 损失 $-\overline{\log\sigma(\beta\Delta)}$ 与 TRL 的四个日志指标 `rewards/*`。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, loss_and_metrics, run_check
from rlhf_toy.losses.dpo import dpo_loss as _dpo_loss

METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")
GRAD = ("chosen_logps", "rejected_logps")


def dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
) -> tuple[Tensor, dict[str, float]]:
    """参考实现：[`rlhf_toy.dpo_loss`][rlhf_toy.losses.dpo.dpo_loss] 的 `loss_type="sigmoid"`（其余参数取默认值）。"""
    return _dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=beta)


def _inputs(w, lo, rw, rl, beta=0.1):
    return {"chosen_logps": w, "rejected_logps": lo, "ref_chosen_logps": rw, "ref_rejected_logps": rl, "beta": beta}


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(6)
    ref_w, ref_l = -5 - 5 * torch.rand(4, generator=g), -5 - 5 * torch.rand(4, generator=g)
    w, lo = ref_w + torch.randn(4, generator=g), ref_l + torch.randn(4, generator=g)
    return (
        Case("随机的 4 个偏好对，β = 0.1", _inputs(w, lo, ref_w, ref_l), grad=GRAD),
        Case("β = 1", _inputs(w, lo, ref_w, ref_l, beta=1.0), grad=GRAD),
        Case("策略等于参考模型（训练第 0 步）", _inputs(ref_w, ref_l, ref_w, ref_l), grad=GRAD),
        Case(
            "排得很反的一对（βΔ = −200）",
            _inputs(
                torch.tensor([-1000.0, -5.0]),
                torch.tensor([-5.0, -6.0]),
                torch.tensor([-5.0, -5.0]),
                torch.tensor([-5.0, -5.0]),
            ),
            grad=GRAD,
        ),
    )


def _dpo(w, lo, rw, rl, beta, *, margins=None, loss_fn=None, rewards_scale=None, acc_ge=False, reduce="mean"):
    cw, cl = w - rw, lo - rl
    delta = cw - cl if margins is None else margins
    losses = -F.logsigmoid(beta * delta) if loss_fn is None else loss_fn(delta)
    loss = losses.mean() if reduce == "mean" else losses.sum()
    s = beta if rewards_scale is None else rewards_scale
    rw_, rl_ = s * cw.detach(), s * cl.detach()
    acc = (rw_ >= rl_) if acc_ge else (rw_ > rl_)
    return loss, {
        "rewards/chosen": rw_.mean(),
        "rewards/rejected": rl_.mean(),
        "rewards/margins": (rw_ - rl_).mean(),
        "rewards/accuracies": acc.float().mean(),
    }


def _m(**options):
    def fn(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1):
        w, lo, rw, rl = chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps
        if options.get("no_ref"):
            rw, rl = torch.zeros_like(rw), torch.zeros_like(rl)
        if options.get("reversed"):
            margins = (lo - rl) - (w - rw)
            return _dpo(w, lo, rw, rl, beta, margins=margins)
        kw = {k: v for k, v in options.items() if k != "no_ref"}
        if "loss_fn" in kw and kw["loss_fn"] == "nobeta":
            kw["loss_fn"] = lambda d: -F.logsigmoid(d)
        if "loss_fn" in kw and kw["loss_fn"] == "two_step":
            kw["loss_fn"] = lambda d: -torch.log(torch.sigmoid(beta * d))
        if "loss_fn" in kw and kw["loss_fn"] == "sign":
            kw["loss_fn"] = lambda d: F.logsigmoid(beta * d)
        return _dpo(w, lo, rw, rl, beta, **kw)

    return fn


MISTAKES = (
    Mistake(
        "no_reference",
        "没有减去参考模型的对数概率：损失成了 −log σ(β(log π(y_w) − log π(y_l)))，失去了“相对参考模型”的含义。"
        "间隔是两个对数概率比之差 Δ = (log π_θ(y_w) − log π_ref(y_w)) − (log π_θ(y_l) − log π_ref(y_l))。",
        _m(no_ref=True),
    ),
    Mistake("reversed", "被选回答与被拒回答弄反了：Δ 是被选一侧减被拒一侧，损失会把偏好反过来学。", _m(reversed=True)),
    Mistake("sign", "损失的符号反了：损失是 −log σ(βΔ)（损失 = −目标）。", _m(loss_fn="sign")),
    Mistake(
        "beta_missing",
        "sigmoid 里没有乘 β：DPO 的损失是 −log σ(βΔ)，β 决定间隔到多大时权重就饱和，也就是离参考模型能走多远。",
        _m(loss_fn="nobeta"),
    ),
    Mistake("sum_not_mean", "对偏好对求了和而不是平均：损失的大小随批大小变化。", _m(reduce="sum")),
    Mistake(
        "rewards_without_beta",
        "rewards/chosen、rewards/rejected 是隐式奖励 β·(log π_θ(y) − log π_ref(y)) 的批平均，要乘 β（TRL 同义）。",
        _m(rewards_scale=1.0),
    ),
    Mistake(
        "accuracies_ge",
        "rewards/accuracies 用了 ≥：训练开始时策略等于参考模型，所有偏好对都是平局，按严格大于计为 0.0；用 ≥ 会得到 1.0。",
        _m(acc_ge=True),
    ),
    Mistake(
        "log_of_sigmoid",
        "把 log σ 写成了 log(sigmoid(·)) 两步：βΔ 是很大的负数时 σ 在 float32 里下溢为 0，log 0 = −inf，"
        "一个排得很反的偏好对就让整批的损失变成 inf。用 F.logsigmoid。",
        _m(loss_fn="two_step"),
    ),
)

EXERCISE = Exercise("dpo_loss", dpo_loss, _cases(), loss_and_metrics(METRICS), MISTAKES)


def check_dpo_loss(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1)`（第 5 章）。

    读者的函数返回 `(loss, metrics)`，`metrics` 含 TRL 的 `rewards/chosen`、`rewards/rejected`、`rewards/margins`、
    `rewards/accuracies`（严格大于）。用例：随机偏好对（$\beta = 0.1$ 与 $1$）、策略等于参考模型、排得很反的一对；
    比较损失、四个指标与损失对策略两侧序列对数概率的梯度。参考实现是
    [`dpo_loss`][rlhf_toy.losses.dpo.dpo_loss] 的 `loss_type="sigmoid"`。

    Args:
        your_fn: 读者的函数；四个输入都是形状 `(B,)` 的序列对数概率。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_dpo_loss(dpo_loss, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
