r"""RLHF-PPO 的三项损失：截断的策略损失、截断的价值损失、熵奖励。

策略损失对应 PPO（Schulman et al., 2017, arXiv 1707.06347）式 (7)；价值损失的截断不在论文里（论文式 (9) 是普通平方误差），
来自 OpenAI baselines `ppo2` 的实现。两者与 TRL 删除 PPO 之前的最后版本 v1.12.0 的 `PPOTrainer.train`
（"N+ implementation details" 的写法）相同；与 verl `compute_policy_loss_vanilla` 在 `clip_ratio_c` → ∞（不做 dual-clip）时相同，
与 verl `compute_value_loss` 同形。
约定：**损失 = −目标**。总损失是

$$\mathcal L = \mathcal L^{\text{clip}}_\pi + c_V\,\mathcal L_V - c_H\,\bar H,$$

熵 $\bar H$ 是要**增大**的量，所以在损失里带负号。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_detached, check_finite, check_mask, check_ndim, check_nonnegative, check_shape
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.losses.grpo import clipped_surrogate

# --8<-- [end:imports]


def _check_same(name: str, x: Tensor, like: Tensor, like_name: str) -> None:
    check_shape(name, x, like.shape, like=like_name)
    check_finite(name, x)


# --8<-- [start:ppo_policy_loss]
def ppo_policy_loss(
    logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor, epsilon: float = 0.2
) -> tuple[Tensor, dict[str, float]]:
    r"""PPO 的截断策略损失，掩码内按 token 平均（TRL v1.12 `PPOTrainer` 的 `pg_loss`）：

    $$\mathcal L^{\text{clip}}_\pi = \overline{\max\big(-w_t\hat A_t,\ -\mathrm{clip}(w_t, 1-\epsilon, 1+\epsilon)\hat A_t\big)},
    \qquad w_t = \frac{\pi_\theta(y_t)}{\pi_{\theta_{old}}(y_t)} .$$

    逐 token 的部分就是 [`clipped_surrogate`][rlhf_toy.losses.grpo.clipped_surrogate]
    （$-\min(\cdot) = \max(-\cdot)$），这里只负责汇总与指标。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，带梯度。
        old_logps: 采样时旧策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势 $\hat A_t$，形状 `(B, T)`（通常来自 GAE 并已白化），不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`。
        epsilon: 截断范围 $\epsilon$（TRL `cliprange`，默认 0.2）。

    Returns:
        `(loss, metrics)`：标量损失（掩码全为 0 时为 0）与指标
        `policy/clipfrac_avg`（截断起作用、梯度为 0 的 token 比例）、
        `policy/approxkl_k1`（$\overline{\log\pi_{old} - \log\pi_\theta}$）、
        `policy/approxkl_k3`（$\overline{(w - 1) - \log w}$），两者都估计 $\mathrm{KL}(\pi_{old}\,\|\,\pi_\theta)$。

    Raises:
        ValueError: 形状不符、含非有限值、`old_logps` 带梯度、`mask` 不是 0/1，或 `epsilon < 0`。
    """
    check_ndim("logps", logps, 2, "(B, T)")
    check_finite("logps", logps)
    _check_same("old_logps", old_logps, logps, "logps")
    check_detached("old_logps", old_logps, "比率 exp(logps − old_logps) 对参数的梯度恰好抵消为 0")
    _check_same("advantages", advantages, logps, "logps")
    check_mask("mask", mask, logps.shape, like="logps")
    check_nonnegative("epsilon", epsilon)
    per_token_loss, is_clipped = clipped_surrogate(logps, old_logps, advantages.detach(), epsilon)
    loss = masked_mean(per_token_loss, mask)
    with torch.no_grad():  # 样本来自旧策略：KL(π_old ‖ π_θ) 的两个估计量
        metrics = {
            "policy/clipfrac_avg": masked_mean(is_clipped.float(), mask).item(),
            "policy/approxkl_k1": masked_mean(kl_estimate(old_logps, logps, "k1"), mask).item(),
            "policy/approxkl_k3": masked_mean(kl_estimate(old_logps, logps, "k3"), mask).item(),
        }
    return loss, metrics


# --8<-- [end:ppo_policy_loss]


# --8<-- [start:ppo_value_loss]
def ppo_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, cliprange_value: float | None = 0.2
) -> tuple[Tensor, dict[str, float]]:
    r"""截断的价值损失（TRL v1.12 `PPOTrainer` 的 `vf_loss`，verl `compute_value_loss`）：

    $$\mathcal L_V = \tfrac12\,\overline{\max\Big(\big(V_t - R_t\big)^2,\
    \big(\mathrm{clip}(V_t, V^{old}_t - \epsilon_V, V^{old}_t + \epsilon_V) - R_t\big)^2\Big)} .$$

    取 `max` 是悲观的一侧：新的价值估计离旧值超过 $\epsilon_V$ 时，如果那样做会让误差变小，就不给梯度。

    Args:
        values: 价值模型当前的估计 $V_t$，形状 `(B, T)`，带梯度。
        old_values: 采样时的估计 $V^{old}_t$，形状 `(B, T)`，不带梯度。
        returns: 回报目标 $R_t = \hat A_t + V^{old}_t$（GAE 给出，白化之前），形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`。
        cliprange_value: $\epsilon_V$（TRL `cliprange_value`，默认 0.2）；`None` 表示不截断，
            即普通的 $\frac12\overline{(V_t - R_t)^2}$。

    Returns:
        `(loss, metrics)`：标量损失与 `val/clipfrac_avg`（截断那一项更大、因而被选中的 token 比例）。

    Raises:
        ValueError: 形状不符、含非有限值、`mask` 不是 0/1，或 `cliprange_value < 0`。
    """
    check_ndim("values", values, 2, "(B, T)")
    check_finite("values", values)
    _check_same("old_values", old_values, values, "values")
    _check_same("returns", returns, values, "values")
    check_mask("mask", mask, values.shape, like="values")
    unclipped = (values - returns) ** 2
    if cliprange_value is None:
        return 0.5 * masked_mean(unclipped, mask), {"val/clipfrac_avg": 0.0}
    check_nonnegative("cliprange_value", cliprange_value)
    values_clipped = old_values + (values - old_values).clamp(-cliprange_value, cliprange_value)
    clipped = (values_clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(unclipped, clipped), mask)
    clipfrac = masked_mean((clipped > unclipped).float(), mask).item()
    return loss, {"val/clipfrac_avg": clipfrac}


# --8<-- [end:ppo_value_loss]


# --8<-- [start:entropy_bonus]
def entropy_bonus(entropy: Tensor, mask: Tensor, ent_coef: float) -> Tensor:
    r"""熵奖励在**损失**里的那一项：$-c_H\,\bar H$（掩码内按 token 平均）。

    目标里是 $+c_H\bar H$（鼓励探索），损失 = −目标，所以这里是负号；写成 $+c_H\bar H$ 会让训练
    主动压低熵。TRL v1.12 的 `PPOTrainer` 没有这一项；CleanRL `ppo.py` 写作 `loss = pg_loss - ent_coef * entropy_loss + ...`。

    Args:
        entropy: 逐 token 的熵，形状 `(B, T)`，带梯度（见 `entropy_from_logits`）。
        mask: 0/1 掩码，形状 `(B, T)`。
        ent_coef: 系数 $c_H \ge 0$。

    Returns:
        标量（0 维张量），加到总损失上。

    Raises:
        ValueError: 形状不符、含非有限值、`mask` 不是 0/1，或 `ent_coef < 0`。

    Examples:
        >>> entropy_bonus(torch.tensor([[1.0, 3.0]]), torch.ones(1, 2), ent_coef=0.1).item()
        -0.20000000298023224
    """
    check_ndim("entropy", entropy, 2, "(B, T)")
    check_finite("entropy", entropy)
    check_mask("mask", mask, entropy.shape, like="entropy")
    check_nonnegative("ent_coef", ent_coef)
    return -ent_coef * masked_mean(entropy, mask)


# --8<-- [end:entropy_bonus]


# --8<-- [start:explained_variance]
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    r"""价值模型的解释方差 $1 - \mathrm{Var}[R - V]/\mathrm{Var}[R]$（掩码内；CleanRL 的 `explained_variance`）。

    1 表示价值模型完美预测回报，0 表示不比常数好，负数表示比常数还差。

    Args:
        values: 价值估计，形状 `(B, T)`。
        returns: 回报目标，形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`。

    Returns:
        Python 浮点数。掩码内的回报方差为 0（或掩码全为 0）时没有定义，返回 `nan`，与 CleanRL 相同。

    Raises:
        ValueError: 形状不符、含非有限值，或 `mask` 不是 0/1。

    Examples:
        >>> explained_variance(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 2.0]]), torch.ones(1, 2))
        0.75
    """
    check_ndim("values", values, 2, "(B, T)")
    check_finite("values", values)
    _check_same("returns", returns, values, "values")
    check_mask("mask", mask, values.shape, like="values")
    inside = mask.bool()
    y, y_pred = returns.detach()[inside], values.detach()[inside]
    if y.numel() == 0 or y.var(correction=0) == 0:
        return float("nan")
    return 1.0 - ((y - y_pred).var(correction=0) / y.var(correction=0)).item()


# --8<-- [end:explained_variance]
