r"""KL 估计量的小型实验台（第 7 章）：精确 KL、估计量的偏差与标准差、放进损失或奖励时的期望梯度。

全部在类别分布（categorical）上精确计算：回答只有 $V$ 个，期望就是对支撑集求和，不需要采样，结果是确定的。
采样只用来做蒙特卡洛（Monte Carlo）对照，并复现 Schulman（2020）的正态分布例子。

记号同 [`kl_estimate`][rlhf_toy.estimators.kl.kl_estimate]：$d = \log\pi_{\mathrm{ref}}(y) - \log\pi_\theta(y)$，$y\sim\pi_\theta$。
“反向 KL”指 $\mathrm{KL}(\pi_\theta\,\|\,\pi_{\mathrm{ref}})$，“正向 KL”指 $\mathrm{KL}(\pi_{\mathrm{ref}}\,\|\,\pi_\theta)$。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_ndim, check_nonnegative, check_shape, check_tensor
from rlhf_toy.estimators.kl import ESTIMATORS, importance_corrected_k3, kl_estimate

# --8<-- [end:imports]

PLACEMENTS = ("loss", "reward")
GRADIENT_ESTIMATORS = (*ESTIMATORS, "k3_corrected")
DIRECTIONS = ("reverse", "forward")


# --8<-- [start:exact_kl]
def exact_kl(logps: Tensor, ref_logps: Tensor) -> Tensor:
    r"""两个类别分布之间的精确 KL：$\mathrm{KL}(\pi\,\|\,\pi_{\mathrm{ref}}) = \sum_y \pi(y)\,(\log\pi(y) - \log\pi_{\mathrm{ref}}(y))$。

    正向 KL 把两个参数对调：`exact_kl(ref_logps, logps)`。

    Args:
        logps: $\log\pi$，形状 `(..., V)`，最后一维是全部 $V$ 个回答，每行的概率之和为 1。
        ref_logps: $\log\pi_{\mathrm{ref}}$，形状与 `logps` 相同。

    Returns:
        形状 `(...)` 的 KL（nat），对 `logps` 与 `ref_logps` 都可求导。

    Raises:
        ValueError: 形状不一致。
    """
    check_tensor("logps", logps)
    check_shape("ref_logps", ref_logps, logps.shape, like="logps")
    return (logps.exp() * (logps - ref_logps)).sum(-1)


# --8<-- [end:exact_kl]


# --8<-- [start:log_ratio_samples]
def gaussian_log_ratios(mu: float, n: int, generator: torch.Generator) -> Tensor:
    r"""Schulman 的例子：$x\sim q = \mathcal N(0, 1)$，$p = \mathcal N(\mu, 1)$，返回 $n$ 个 $d = \log p(x) - \log q(x)$。

    $d = \mu x - \mu^2/2$，真值 $\mathrm{KL}(q\,\|\,p) = \mu^2/2$。$q$ 扮演 $\pi_\theta$（采样分布），$p$ 扮演 $\pi_{\mathrm{ref}}$。

    Args:
        mu: $p$ 的均值。
        n: 样本数。
        generator: 随机数生成器（固定种子以得到确定的结果）。

    Returns:
        形状 `(n,)` 的 float64 张量。
    """
    x = torch.randn(n, generator=generator, dtype=torch.float64)
    return mu * x - mu**2 / 2


def categorical_log_ratios(logps: Tensor, ref_logps: Tensor, n: int, generator: torch.Generator) -> Tensor:
    r"""从类别分布 $\pi$ 采 $n$ 个回答 $y$，返回 $d = \log\pi_{\mathrm{ref}}(y) - \log\pi(y)$。

    Args:
        logps: $\log\pi$，形状 `(V,)`。
        ref_logps: $\log\pi_{\mathrm{ref}}$，形状 `(V,)`。
        n: 样本数。
        generator: 随机数生成器。

    Returns:
        形状 `(n,)` 的张量，dtype 同 `logps`。

    Raises:
        ValueError: `logps` 不是一维，或两者形状不一致。
    """
    check_ndim("logps", logps, 1, "(V,)")
    check_shape("ref_logps", ref_logps, logps.shape, like="logps")
    y = torch.multinomial(logps.exp(), n, replacement=True, generator=generator)
    return ref_logps[y] - logps[y]


# --8<-- [end:log_ratio_samples]


# --8<-- [start:estimator_stats]
class EstimatorStats(NamedTuple):
    """一个估计量的三个统计量（单位 nat；`frac_negative` 是比例）。"""

    mean: float
    std: float
    frac_negative: float


def estimator_stats(d: Tensor, weights: Tensor | None = None) -> dict[str, EstimatorStats]:
    r"""k1、k2、k3 的均值、标准差与负值比例：蒙特卡洛样本上（等权），或类别分布上的精确值（以概率加权）。

    三个估计量都只依赖 $d$，所以直接把 `ref_logps = d`、`logps = 0` 交给 `kl_estimate`。

    Args:
        d: 对数比率 $d$，形状 `(N,)`：$N$ 个蒙特卡洛样本，或类别分布的全部 $V$ 个回答。
        weights: `None` 表示等权（样本）；否则为形状 `(N,)`、和为 1 的概率 $\pi_\theta(y)$，给出精确的矩。

    Returns:
        `{"k1": EstimatorStats(mean, std, frac_negative), "k2": ..., "k3": ...}`，Python 浮点数。
        标准差按总体公式（除以 $N$）。

    Raises:
        ValueError: `d` 不是一维，或 `weights` 形状不符。
    """
    check_ndim("d", d, 1, "(N,)")
    if weights is None:
        weights = torch.full_like(d, 1.0 / d.numel())
    check_shape("weights", weights, d.shape, like="d")
    stats = {}
    for name in ESTIMATORS:
        k = kl_estimate(torch.zeros_like(d), d, name)  # ref_logps − logps = d
        mean = (weights * k).sum()
        std = math.sqrt((weights * (k - mean) ** 2).sum().item())  # libm 的开方：各家 CPU 逐位相同
        negative = (weights * (k < 0)).sum()
        stats[name] = EstimatorStats(mean.item(), std, negative.item())
    return stats


# --8<-- [end:estimator_stats]


# --8<-- [start:expected_kl_gradient]
def expected_kl_gradient(
    logits: Tensor,
    ref_logps: Tensor,
    estimator: str = "k3",
    placement: str = "loss",
    *,
    log_ratio_clamp: float | None = None,
    value_clamp: float | None = None,
) -> Tensor:
    r"""把估计量放进损失或奖励时，对 logits 的**期望**梯度（每单位 $\beta$），对支撑集精确求和。

    $\pi_\theta = \mathrm{softmax}(\theta)$，$\theta$ 即 `logits`。采样分布看成固定（与训练时一样，样本不随参数变）：

    * `placement="loss"`：损失里加 $\beta k$，梯度 $\mathbb E_{y\sim\pi_\theta}[\nabla_\theta k(y)]$；
    * `placement="reward"`：奖励里减 $\beta k$（值不带梯度），REINFORCE 的损失 $-\mathbb E[\operatorname{sg}(-\beta k)\log\pi_\theta]$，
      梯度 $\mathbb E_{y\sim\pi_\theta}[\operatorname{sg}(k(y))\,\nabla_\theta\log\pi_\theta(y)]$。

    `estimator="k3_corrected"` 用 [`importance_corrected_k3`][rlhf_toy.estimators.kl.importance_corrected_k3]（同策略，$w$ 的值为 1）。
    结论（第 7 章）：k1 进损失 → 0；k2 进损失、k1 进奖励、修正 k3 进损失 → $\nabla\mathrm{KL}(\pi_\theta\|\pi_{\mathrm{ref}})$；
    k3 进损失 → $\nabla\mathrm{KL}(\pi_{\mathrm{ref}}\|\pi_\theta)$。
    两个限幅参数原样交给 [`kl_estimate`][rlhf_toy.estimators.kl.kl_estimate]（`log_ratio_clamp=20, value_clamp=10` 即 verl 的
    `low_var_kl`）：被限幅的回答没有 KL 梯度，期望梯度于是不再是任何一个 KL 的梯度。

    Args:
        logits: 策略的 logits $\theta$，形状 `(..., V)`，浮点。
        ref_logps: $\log\pi_{\mathrm{ref}}$，形状与 `logits` 相同。
        estimator: `"k1"`、`"k2"`、`"k3"` 或 `"k3_corrected"`。
        placement: `"loss"` 或 `"reward"`。
        log_ratio_clamp: 见 `kl_estimate`；`None`（默认）不限幅。
        value_clamp: 见 `kl_estimate`；`None`（默认）不限幅。

    Returns:
        与 `logits` 同形状的期望梯度（不带计算图）。

    Raises:
        ValueError: 形状不一致，`estimator`、`placement` 未知，限幅阈值不是正数，
            或给 `"k3_corrected"` 传了限幅参数（`importance_corrected_k3` 不限幅）。
    """
    check_tensor("logits", logits)
    check_shape("ref_logps", ref_logps, logits.shape, like="logits")
    check_choice("estimator", estimator, GRADIENT_ESTIMATORS)
    check_choice("placement", placement, PLACEMENTS)
    clamps = {"log_ratio_clamp": log_ratio_clamp, "value_clamp": value_clamp}
    theta = logits.detach().clone().requires_grad_(True)
    logps = torch.log_softmax(theta, dim=-1)
    probs = logps.detach().exp()  # 采样分布：不参与求导
    per_answer = _per_answer_surrogate(logps, ref_logps, estimator, placement, clamps)
    (grad,) = torch.autograd.grad((probs * per_answer).sum(), theta)
    return grad


def _per_answer_surrogate(
    logps: Tensor, ref_logps: Tensor, estimator: str, placement: str, clamps: dict[str, float | None]
) -> Tensor:
    r"""每个回答上的代理损失：放进损失时是 $k$，放进奖励时是 $\operatorname{sg}(k)\log\pi_\theta$。"""
    if estimator == "k3_corrected":
        if any(v is not None for v in clamps.values()):
            raise ValueError("k3_corrected 不支持限幅参数：importance_corrected_k3 不限幅")
        k = importance_corrected_k3(logps, ref_logps)
    else:
        k = kl_estimate(logps, ref_logps, estimator, **clamps)
    return k if placement == "loss" else k.detach() * logps


# --8<-- [end:expected_kl_gradient]


# --8<-- [start:per_sample_kl_gradients]
def per_sample_kl_gradients(
    logits: Tensor, ref_logps: Tensor, estimator: str = "k3", placement: str = "loss"
) -> Tensor:
    r"""每个回答各自的逐样本梯度（对 logits，每单位 $\beta$）：第 $y$ 行是采到 $y$ 时 KL 项的梯度。

    [`expected_kl_gradient`][rlhf_toy.studies.kl_estimators.expected_kl_gradient] 是这些行按 $\pi_\theta(y)$ 的加权和。
    有了每一行，梯度的方差也能对支撑集精确求和。放进损失时第 $y$ 行是 $c(y)\,\nabla_\theta\log\pi_\theta(y)$，
    系数 $c$ 是第 7 章的 $1$、$-d$、$1 - e^d$（修正 k3 同策略时是 $-d$）；放进奖励时 $c = k(y)$。

    Args:
        logits: 策略的 logits $\theta$，形状 `(..., V)`，浮点。
        ref_logps: $\log\pi_{\mathrm{ref}}$，形状与 `logits` 相同。
        estimator: `"k1"`、`"k2"`、`"k3"` 或 `"k3_corrected"`。
        placement: `"loss"` 或 `"reward"`。

    Returns:
        形状 `(..., V, V)` 的张量（不带计算图）：`[..., y, :]` 是采到回答 $y$ 时对 logits 的梯度。

    Raises:
        ValueError: 形状不一致，或 `estimator`、`placement` 未知。
    """
    check_tensor("logits", logits)
    check_shape("ref_logps", ref_logps, logits.shape, like="logits")
    check_choice("estimator", estimator, GRADIENT_ESTIMATORS)
    check_choice("placement", placement, PLACEMENTS)
    theta = logits.detach().clone().requires_grad_(True)
    logps = torch.log_softmax(theta, dim=-1)
    per_answer = _per_answer_surrogate(logps, ref_logps, estimator, placement, {})
    rows = [  # 各行（提示词）互不相关：对第 y 列求和再求导，得到每一行采到 y 时的梯度
        torch.autograd.grad(per_answer[..., y].sum(), theta, retain_graph=True)[0] for y in range(logits.shape[-1])
    ]
    return torch.stack(rows, dim=-2)


# --8<-- [end:per_sample_kl_gradients]


# --8<-- [start:exact_kl_gradient]
def exact_kl_gradient(logits: Tensor, ref_logps: Tensor, direction: str = "reverse") -> Tensor:
    r"""精确 KL 对 logits 的梯度（autograd）：`"reverse"` 为 $\nabla\mathrm{KL}(\pi_\theta\|\pi_{\mathrm{ref}})$，`"forward"` 为 $\nabla\mathrm{KL}(\pi_{\mathrm{ref}}\|\pi_\theta)$。

    Args:
        logits: 策略的 logits $\theta$，形状 `(..., V)`。
        ref_logps: $\log\pi_{\mathrm{ref}}$，形状与 `logits` 相同。
        direction: `"reverse"` 或 `"forward"`。

    Returns:
        与 `logits` 同形状的梯度（各行 KL 之和的梯度）。

    Raises:
        ValueError: 形状不一致，或 `direction` 未知。
    """
    check_tensor("logits", logits)
    check_shape("ref_logps", ref_logps, logits.shape, like="logits")
    check_choice("direction", direction, DIRECTIONS)
    theta = logits.detach().clone().requires_grad_(True)
    logps = torch.log_softmax(theta, dim=-1)
    kl = exact_kl(logps, ref_logps) if direction == "reverse" else exact_kl(ref_logps, logps)
    (grad,) = torch.autograd.grad(kl.sum(), theta)
    return grad


# --8<-- [end:exact_kl_gradient]


# --8<-- [start:regularised_optima]
def reverse_kl_optimum(ref_logps: Tensor, rewards: Tensor, beta: float) -> Tensor:
    r"""$\max_\pi\ \mathbb E_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{\mathrm{ref}})$ 的解 $\pi^*\propto\pi_{\mathrm{ref}}\,e^{r/\beta}$（第 1 章），返回 $\log\pi^*$。

    Args:
        ref_logps: $\log\pi_{\mathrm{ref}}$，形状 `(..., V)`。
        rewards: 每个回答的奖励 $r(y)$，形状同 `ref_logps`。
        beta: KL 系数 $\beta > 0$。

    Returns:
        形状 `(..., V)` 的 $\log\pi^*$。

    Raises:
        ValueError: 形状不一致或 `beta` 不是正数。
    """
    _check_optimum_inputs(ref_logps, rewards, beta)
    return torch.log_softmax(ref_logps + rewards / beta, dim=-1)


def forward_kl_optimum(ref_logps: Tensor, rewards: Tensor, beta: float, iters: int = 200) -> Tensor:
    r"""$\max_\pi\ \mathbb E_\pi[r] - \beta\,\mathrm{KL}(\pi_{\mathrm{ref}}\|\pi)$ 的解，返回 $\log\pi^\dagger$。

    拉格朗日条件给出 $\pi^\dagger(y) = \dfrac{\beta\,\pi_{\mathrm{ref}}(y)}{\lambda - r(y)}$，$\lambda$ 由 $\sum_y\pi^\dagger(y) = 1$ 决定，
    且 $r_{\max} < \lambda \le r_{\max} + \beta$；在这个区间上二分求 $\lambda$。

    Args:
        ref_logps: $\log\pi_{\mathrm{ref}}$，形状 `(..., V)`。
        rewards: 每个回答的奖励 $r(y)$，形状同 `ref_logps`。
        beta: KL 系数 $\beta > 0$。
        iters: 二分次数（200 次在 float64 下远超机器精度）。

    Returns:
        形状 `(..., V)` 的 $\log\pi^\dagger$。

    Raises:
        ValueError: 形状不一致或 `beta` 不是正数。
    """
    _check_optimum_inputs(ref_logps, rewards, beta)
    r_max = rewards.max(dim=-1, keepdim=True).values
    lo, hi = r_max.clone(), r_max + beta  # 总和在 lo 处为 +∞，在 hi 处 ≤ 1
    for _ in range(iters):
        lam = (lo + hi) / 2
        total = (beta * ref_logps.exp() / (lam - rewards)).sum(-1, keepdim=True)
        lo = torch.where(total > 1, lam, lo)
        hi = torch.where(total > 1, hi, lam)
    return torch.log(beta * ref_logps.exp() / (hi - rewards))


# --8<-- [end:regularised_optima]


def _check_optimum_inputs(ref_logps: Tensor, rewards: Tensor, beta: float) -> None:
    check_tensor("ref_logps", ref_logps)
    check_shape("rewards", rewards, ref_logps.shape, like="ref_logps")
    check_nonnegative("beta", beta)
    if beta == 0:
        raise ValueError("beta 应 > 0，实际是 0")
