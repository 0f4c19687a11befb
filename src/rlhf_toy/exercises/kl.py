r"""第 7 章的练习：KL 估计量 k1、k2、k3（值与梯度）和两种限幅。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output

GRAD = ("logps",)


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(10)
    ref = -2.0 * torch.rand(2, 3, generator=g) - 0.1
    logps = ref + 0.8 * torch.randn(2, 3, generator=g)
    base = {"logps": logps, "ref_logps": ref}
    far = {"logps": torch.tensor([[-1.0, -101.0]]), "ref_logps": torch.tensor([[-1.2, -1.0]])}
    return (
        Case("k3，随机的对数概率", {**base, "estimator": "k3"}, grad=GRAD),
        Case("k1", {**base, "estimator": "k1"}, grad=GRAD),
        Case("k2", {**base, "estimator": "k2"}, grad=GRAD),
        Case("策略等于参考模型（KL 与梯度都是 0）", {"logps": ref, "ref_logps": ref, "estimator": "k3"}, grad=GRAD),
        Case(
            "value_clamp = 10（d = 29）",
            {
                "logps": torch.tensor([[-30.0, -1.0]]),
                "ref_logps": torch.tensor([[-1.0, -1.5]]),
                "estimator": "k3",
                "value_clamp": 10.0,
            },
            grad=GRAD,
        ),
        Case(
            "log_ratio_clamp = 20 与 value_clamp = 10（填充处 d = 100）",
            {**far, "estimator": "k3", "log_ratio_clamp": 20.0, "value_clamp": 10.0},
            grad=GRAD,
        ),
        Case("k1 与 log_ratio_clamp = 20", {**far, "estimator": "k1", "log_ratio_clamp": 20.0}, grad=GRAD),
    )


def _kl(
    logps,
    ref_logps,
    estimator="k3",
    *,
    log_ratio_clamp=None,
    value_clamp=None,
    flip=False,
    k1_sign=1.0,
    half=0.5,
    use_log_clamp=True,
    use_value_clamp=True,
    clamp_logps=False,
):
    d = logps - ref_logps if flip else ref_logps - logps
    if log_ratio_clamp is not None and use_log_clamp:
        if clamp_logps:
            d = ref_logps - logps.clamp(min=-log_ratio_clamp)
        else:
            d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    if estimator == "k1":
        kl = -k1_sign * d
    elif estimator == "k2":
        kl = half * d**2
    else:
        kl = d.exp() - d - 1
    if value_clamp is not None and use_value_clamp:
        kl = kl.clamp(-value_clamp, value_clamp)
    return kl


def _m(**options):
    def fn(logps, ref_logps, estimator="k3", *, log_ratio_clamp=None, value_clamp=None):
        return _kl(logps, ref_logps, estimator, log_ratio_clamp=log_ratio_clamp, value_clamp=value_clamp, **options)

    return fn


MISTAKES = (
    Mistake(
        "k3_direction",
        "d 的方向反了：d = log π_ref − log π_θ（Schulman 的 log r）。写成 log π_θ − log π_ref 时，"
        "k3 = e^d − d − 1 估计的就成了另一个方向的 KL，梯度也不同。",
        _m(flip=True),
    ),
    Mistake(
        "k1_sign",
        "k1 的符号反了：k1 = −d = log π_θ − log π_ref（样本来自 π_θ 时它估计 KL(π_θ‖π_ref)）。"
        "写成 log π_ref − log π_θ，“惩罚”就成了奖励远离参考模型。",
        _m(k1_sign=-1.0),
    ),
    Mistake("k2_no_half", "k2 = d²/2，少了 1/2。", _m(half=1.0)),
    Mistake(
        "log_ratio_clamp_ignored",
        "没有给对数比率限幅（或者只给值限幅）：float32 里 d > 88 时 e^d = inf，值被限成 10，梯度却是 NaN，"
        "一个填充位置就毁掉整个批次（乘掩码也救不了：0 · NaN 仍是 NaN）。先把 d 限幅到 [−c, c]，再算估计量。",
        _m(use_log_clamp=False),
    ),
    Mistake(
        "value_clamp_ignored",
        "没有给估计值限幅：value_clamp = c 时最后把 KL 估计限幅到 [−c, c]，被限幅的位置梯度为 0（verl、OpenRLHF 用 c = 10）。",
        _m(use_value_clamp=False),
    ),
    Mistake(
        "clamp_on_logps",
        "限幅的对象错了：log_ratio_clamp 限的是对数比率 d = log π_ref − log π_θ，不是对数概率本身。",
        _m(clamp_logps=True),
    ),
)

EXERCISE = Exercise("kl_estimate", kl_estimate, _cases(), tensor_output("kl"), MISTAKES)


def check_kl_estimate(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `kl_estimate(logps, ref_logps, estimator="k3", *, log_ratio_clamp=None, value_clamp=None)`（第 7 章）。

    用例：三个估计量在随机对数概率上、策略等于参考模型、只给值限幅、两种限幅一起用在 $d = 100$ 的填充位置上
    （只给值限幅时梯度是 NaN）；比较逐 token 的值与 $\partial\sum\mathrm{kl}/\partial$`logps`（参考实现是
    [`kl_estimate`][rlhf_toy.estimators.kl.kl_estimate]）。

    Args:
        your_fn: 读者的函数；`logps`、`ref_logps` 形状 `(B, T)`，返回同形状的逐 token 估计。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_kl_estimate(kl_estimate, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
