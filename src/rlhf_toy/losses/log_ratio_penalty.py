r"""DRO（Direct Reward Optimization）式的损失：策略梯度项加上对数比率的二次惩罚。

目标是 $\hat A\log\pi_\theta - \frac\beta2\big(\log\pi_\theta - \log\pi_{old}\big)^2$：不截断比率，而用一个
二次项把策略拉回采样时的策略附近。verl 0.9.1 登记为 `"dro"` 的 `compute_policy_loss_dro` 没有写出处；
它与 Tinker 文档 “DRO” 损失的公式逐字相同，那里引用 Richemond et al., 2024（*Offline Regularised Reinforcement
Learning for Large Language Models Alignment*，arXiv 2405.19107，DRO 的平方损失）与 Kimi k1.5（Kimi Team, 2025,
arXiv 2501.12599，§2.3.2 策略优化的平方损失）。二者都是**整条回答**上的平方回归损失
$(r - b - \tau\log W)^2$，$\log W = \sum_s\log w_s$ 是整条回答的对数比率（$b$ 是价值估计或组内平均奖励；
Richemond 的比率分母是参考策略 $\pi_{ref}$，Kimi k1.5 与 verl 用采样时的策略）。把 $r - b$ 记作优势 $\hat A$，
它对第 $t$ 个 token 的 $\log\pi_\theta$ 的梯度是 $-2\tau(\hat A - \tau\sum_s\log w_s)$：回答里每个 token 的系数相同。
verl 的 `dro` 逐 token 惩罚 $\frac\beta2(\log w_t)^2$，第 $t$ 个 token 的梯度是 $-(\hat A - \beta\log w_t)$，
随 token 而变。两者只在回答只有一个 token 时方向相同（$\beta = \tau$，差正的常数因子 $2\tau$）；
verl 的写法是两篇论文都没有写出的逐 token 变体。约定：**损失 = −目标**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_nonnegative
from rlhf_toy.losses._token_inputs import check_policy_inputs
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean

# --8<-- [end:imports]


# --8<-- [start:dro_loss]
def dro_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    beta: float,
    loss_type: str = "bnpo",
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""二次对数比率惩罚的策略损失：逐 token

    $$\ell_{i,t} = -\Big(\hat A_{i,t}\log\pi_\theta(o_{i,t}) - \frac\beta2\big(\log\pi_\theta(o_{i,t}) - \log\pi_{old}(o_{i,t})\big)^2\Big),$$

    再按 `loss_type` 汇总。与 verl 0.9.1 `compute_policy_loss_dro`（`policy_loss.loss_mode="dro"`,
    `policy_loss.dro_beta=β`）逐式相同（汇总的对应见 [`gpg_loss`][rlhf_toy.losses.group_pg.gpg_loss]）。
    惩罚项在 $\hat A = 0$ 的 token 上照样起作用：要排除一个位置只能让掩码为 0。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`，不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`。
        beta: 二次惩罚的系数 $\beta \ge 0$（verl `policy_loss.dro_beta`，默认 `None`，verl 要求 $> 0$）；
            $\beta = 0$ 时就是 [`gpg_loss`][rlhf_toy.losses.group_pg.gpg_loss]。
        loss_type: 汇总方式，默认 `"bnpo"`（verl 的 `token-mean`）。
        max_completion_length: `dr_grpo` 的常数分母 $L$；默认取 `T`。

    Returns:
        `(loss, metrics)`：标量损失，以及 verl 的指标名 `actor/ppo_kl`
        （$\overline{\log\pi_{old} - \log\pi_\theta}$，掩码内 token 平均，即 $k_1$ 估计的 $\mathrm{KL}(\pi_{old}\,\|\,\pi_\theta)$）。

    Raises:
        ValueError: 形状不符、`B = 0`、含非有限值、`old_logps` 带梯度、`mask` 不是 0/1、`beta` 为负或非有限，
            或 `loss_type` 未知。

    Examples:
        >>> import torch
        >>> logps, old = torch.tensor([[-1.0]]), torch.tensor([[-2.0]])
        >>> loss, _ = dro_loss(logps, old, torch.tensor([1.0]), torch.ones(1, 1), beta=0.5)
        >>> loss.item()  # -(1·(-1) - 0.25·1²)
        1.25
    """
    adv = check_policy_inputs(logps, old_logps, advantages, mask)
    check_nonnegative("beta", beta)
    log_ratio = logps - old_logps
    per_token_loss = -(adv * logps - 0.5 * beta * log_ratio.square())
    loss = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length)
    metrics = {"actor/ppo_kl": masked_mean(-log_ratio.detach(), mask).item()}
    return loss, metrics


# --8<-- [end:dro_loss]


# --8<-- [start:dro_gradient_weight]
def dro_gradient_weight(ratio: Tensor, advantages: Tensor, beta: float) -> Tensor:
    r"""逐 token 损失对 $\log\pi_\theta$ 的导数：$\partial\ell_t/\partial\log\pi_\theta = -\big(\hat A_t - \beta\log w_t\big)$。

    $w_t = 1$ 时就是策略梯度的 $-\hat A_t$；比率往 $\hat A$ 的方向走得越远，二次项把梯度拉回得越多，
    在 $\log w_t = \hat A_t/\beta$ 处为 0，再往外就把策略推回去（没有截断那样的“梯度为 0 的平台”）。

    Args:
        ratio: 重要性采样比率 $w_t > 0$，任意形状。
        advantages: 优势 $\hat A_t$，可与 `ratio` 广播。
        beta: 二次惩罚的系数 $\beta$。

    Returns:
        广播后的形状。

    Examples:
        >>> import torch
        >>> dro_gradient_weight(torch.tensor([1.0]), torch.tensor(1.0), beta=0.5)
        tensor([-1.])
    """
    return -(advantages - beta * torch.log(ratio))


# --8<-- [end:dro_gradient_weight]
