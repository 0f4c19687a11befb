r"""精确的蒸馏实验台（第 12 章，第 7 章实验台的写法）：双峰教师、受限的学生，正向 KL 与反向 KL 各拟合一次。

一个提示词、$K$ 个回答（格点 $x = 0, 1, \dots, K-1$）。教师 $\pi_T$ 是两个离散高斯峰的混合，峰高不同；
学生只能是**一个**离散高斯 $\pi_{\mu,\sigma}(x)\propto\exp(-(x-\mu)^2 / 2\sigma^2)$，参数 $(\mu, \log\sigma)$。
学生放不下两个峰，于是两种 KL 给出不同的“最好”：

* 正向 KL $\mathrm{KL}(\pi_T\|\pi_\theta)$（SFT 在教师样本上的期望损失减去常数）：覆盖两个峰（mode covering），
  $\sigma$ 变大、均值落在两峰之间；
* 反向 KL $\mathrm{KL}(\pi_\theta\|\pi_T)$（同策略蒸馏的目标）：挑一个峰（mode seeking），从哪个峰附近出发就落在哪个峰。

全部是对 $K$ 个回答的精确求和，梯度下降用 autograd，结果确定。
"""

# --8<-- [start:imports]
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_ndim
from rlhf_toy.studies.kl_estimators import exact_kl

# --8<-- [end:imports]

DIRECTIONS = ("forward", "reverse")


# --8<-- [start:bimodal_teacher]
def discretised_gaussian(mu: Tensor | float, log_sigma: Tensor | float, n_answers: int) -> Tensor:
    r"""格点 $0..K-1$ 上的离散高斯的对数概率：$\log\mathrm{softmax}_x\big(-(x-\mu)^2 / 2\sigma^2\big)$。

    Args:
        mu: 均值 $\mu$（标量张量可带梯度）。
        log_sigma: $\log\sigma$（标量张量可带梯度）。
        n_answers: 回答个数 $K$。

    Returns:
        形状 `(K,)` 的 float64 对数概率。
    """
    x = torch.arange(n_answers, dtype=torch.float64)
    sigma = torch.as_tensor(log_sigma, dtype=torch.float64).exp()
    return torch.log_softmax(-((x - torch.as_tensor(mu, dtype=torch.float64)) ** 2) / (2 * sigma**2), dim=0)


def bimodal_teacher(
    n_answers: int = 61,
    peaks: tuple[float, float] = (22.0, 38.0),
    weights: tuple[float, float] = (0.7, 0.3),
    width: float = 3.0,
) -> Tensor:
    r"""双峰教师：两个离散高斯（宽 `width`）按 `weights` 混合，$\pi_T = w_1\,\mathcal N_1 + w_2\,\mathcal N_2$。

    Args:
        n_answers: 回答个数 $K$。
        peaks: 两个峰的位置。
        weights: 两个峰的质量（和为 1）。
        width: 每个峰的 $\sigma$。

    Returns:
        形状 `(K,)` 的 float64 对数概率。

    Raises:
        ValueError: `weights` 不是正数或和不为 1。
    """
    if min(weights) <= 0 or abs(sum(weights) - 1) > 1e-9:
        raise ValueError(f"weights 应为正且和为 1，实际是 {weights}")
    log_sigma = torch.tensor(float(width)).log()
    parts = [
        torch.tensor(w).log() + discretised_gaussian(p, log_sigma, n_answers)
        for p, w in zip(peaks, weights, strict=True)
    ]
    return torch.logsumexp(torch.stack(parts), dim=0)


# --8<-- [end:bimodal_teacher]


class FittedStudent(NamedTuple):
    """拟合结果：参数、对数概率，以及它离教师的两种 KL（nat）。"""

    mu: float
    sigma: float
    logps: Tensor
    forward_kl: float
    reverse_kl: float


# --8<-- [start:fit_student]
def fit_student(
    teacher_logps: Tensor, direction: str, mu: float = 30.0, sigma: float = 10.0, steps: int = 600, lr: float = 0.1
) -> FittedStudent:
    r"""用 Adam 在精确 KL 上拟合离散高斯学生：`"forward"` 最小化 $\mathrm{KL}(\pi_T\|\pi_\theta)$，`"reverse"` 最小化 $\mathrm{KL}(\pi_\theta\|\pi_T)$。

    Args:
        teacher_logps: 教师的对数概率，形状 `(K,)`。
        direction: `"forward"` 或 `"reverse"`。
        mu: 学生均值的初值。
        sigma: 学生 $\sigma$ 的初值。
        steps: Adam 步数。
        lr: 学习率。

    Returns:
        `FittedStudent`。

    Raises:
        ValueError: `teacher_logps` 不是一维，或 `direction` 未知。
    """
    check_ndim("teacher_logps", teacher_logps, 1, "(K,)")
    check_choice("direction", direction, DIRECTIONS)
    n = teacher_logps.numel()
    params = torch.tensor([mu, float(torch.tensor(sigma).log())], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([params], lr=lr, fused=True)
    for _ in range(steps):
        logps = discretised_gaussian(params[0], params[1], n)
        loss = exact_kl(teacher_logps, logps) if direction == "forward" else exact_kl(logps, teacher_logps)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        logps = discretised_gaussian(params[0], params[1], n)
        return FittedStudent(
            mu=params[0].item(),
            sigma=params[1].exp().item(),
            logps=logps,
            forward_kl=exact_kl(teacher_logps, logps).item(),
            reverse_kl=exact_kl(logps, teacher_logps).item(),
        )


def mode_masses(logps: Tensor, split: int) -> tuple[float, float]:
    """分布在两个峰上的质量：回答 `< split` 的概率之和与 `≥ split` 的概率之和。

    Args:
        logps: 形状 `(K,)` 的对数概率。
        split: 两峰之间的分界（例如两峰位置的中点）。

    Returns:
        `(左峰质量, 右峰质量)`。
    """
    p = logps.exp()
    return p[:split].sum().item(), p[split:].sum().item()


# --8<-- [end:fit_student]
