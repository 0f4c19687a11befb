r"""DPPO（Divergence Proximal Policy Optimization）的损失：用散度而不是比率来划定信任域。

DPPO（Qi et al., 2026, *Rethinking the Trust Region in LLM Reinforcement Learning*, arXiv 2602.04879）认为 PPO 的
比率截断对大词表不合适：低概率 token 的比率一动就很大（被过度限制），高概率 token 的概率大幅变化时比率却不大
（限制不足）。它改为直接估计采样 token 上新旧策略的散度，超出阈值 $\delta$ 且朝着优势方向走的 token 不给梯度。
论文的 Binary 近似只看被采样的 token 与“其余所有 token”两类：

- Binary-TV：$D = \lvert p - p_{old}\rvert$，$p = \pi_\theta(o_t)$；
- Binary-KL：$D = p_{old}\log\frac{p_{old}}{p} + (1-p_{old})\log\frac{1-p_{old}}{1-p}$。

与 verl 0.9.1 登记为 `"dppo_tv"`、`"dppo_kl"` 的 `compute_policy_loss_dppo_tv`、`compute_policy_loss_dppo_kl` 对应。
约定：**损失 = −目标**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_nonnegative
from rlhf_toy.losses._token_inputs import VERL_LOG_RATIO_CLAMP, check_policy_inputs, check_positive
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean

# --8<-- [end:imports]

DIVERGENCES = ("tv", "kl")


# --8<-- [start:binary_divergence_valid]
def binary_divergence_valid(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    divergence: str = "tv",
) -> Tensor:
    r"""DPPO 的信任域：哪些 token 保留梯度（verl 的 `valid_mask`）。

    $\hat A > 0$ 时，只有概率上升且散度超过 $\delta_{high}$ 的 token 被挡住；$\hat A \le 0$ 时，只有概率下降且
    散度超过 $\delta_{low}$ 的被挡住（与 PPO 一样只挡“朝优势方向走过头”的一侧）：

    - `"tv"`：$\hat A>0$ 保留 $p - p_{old} \le \delta_{high}$；否则保留 $p - p_{old} \ge -\delta_{low}$；
    - `"kl"`：$\hat A>0$ 保留 $D_{KL} \le \delta_{high}$ 或 $p \le p_{old}$；否则保留 $D_{KL} \le \delta_{low}$ 或 $p \ge p_{old}$，
      $D_{KL}$ 的第二项按 verl 写成 $(1-p_{old})\log\frac{1-p_{old}+10^{-8}}{1-p+10^{-8}}$。

    Args:
        logps: 当前策略的逐 token 对数概率 $\log p$，形状 `(B, T)`。
        old_logps: 采样时策略的对数概率 $\log p_{old}$，形状 `(B, T)`。
        advantages: 优势，形状 `(B, T)`（已展开）。
        epsilon: 下侧阈值 $\delta_{low}$（verl `clip_ratio_low`）。
        epsilon_high: 上侧阈值 $\delta_{high}$（verl `clip_ratio_high`）；`None` 表示等于 `epsilon`。
        divergence: `"tv"` 或 `"kl"`。

    Returns:
        布尔张量，形状 `(B, T)`，`True` 表示保留梯度。不带梯度。
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    with torch.no_grad():
        prob, old_prob = logps.exp(), old_logps.exp()
        if divergence == "tv":
            valid_pos = (prob - old_prob) <= eps_high
            valid_neg = (prob - old_prob) >= -epsilon
        else:
            binary_kl = old_prob * (old_logps - logps) + (1 - old_prob) * torch.log(
                (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
            )
            valid_pos = (binary_kl <= eps_high) | (prob <= old_prob)
            valid_neg = (binary_kl <= epsilon) | (prob >= old_prob)
        return torch.where(advantages > 0, valid_pos, valid_neg)


# --8<-- [end:binary_divergence_valid]


# --8<-- [start:dppo_loss]
def dppo_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    divergence: str = "tv",
    clip_ratio_c: float = 20.0,
    loss_type: str = "bnpo",
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""DPPO-Binary 的损失：逐 token
    $\ell_{i,t} = -\hat A_{i,t}\,\operatorname{sg}\big(\min(w_{i,t}, C)\big)\,\log\pi_\theta(o_{i,t})\cdot v_{i,t}$，
    $v$ 是 [`binary_divergence_valid`][rlhf_toy.losses.divergence_mask.binary_divergence_valid] 给出的信任域，
    $w = \exp\big(\mathrm{clamp}(\log\pi_\theta - \log\pi_{old}, -20, 20)\big)$；再按 `loss_type` 汇总。

    梯度是 $-\hat A\min(w, C)\nabla\log\pi_\theta$（在信任域内），即截断重要性采样（TIS）的策略梯度；信任域外为 0。
    与 verl 0.9.1 `compute_policy_loss_dppo_tv` / `compute_policy_loss_dppo_kl` 逐式相同。verl 的约定：

    - **阈值沿用 PPO 的名字**：$\delta_{low}$、$\delta_{high}$ 读 `clip_ratio_low`、`clip_ratio_high`（默认 0.2），
      含义却是概率差（TV）或二元 KL 的上限，不是比率幅度。
    - **TIS 上限 $C$ 读 `clip_ratio_c`**：verl 函数里的后备值是 20（`config.get("clip_ratio_c", 20.0)`），但
      `ActorConfig.clip_ratio_c` 的默认是 3.0（为 dual-clip PPO 设的），所以照默认配置运行时 $C = 3$，不是 20。
      本函数的默认 20 是 verl 函数的后备值；要复现默认配置的 verl 训练，请传 `clip_ratio_c=3.0`。
      论文 §5.4 建议取较大的 $C$，以免截断带来偏差。
    - 信任域判定用 $\hat A > 0$；$\hat A = 0$ 的 token 按负优势一侧判定（损失为 0，无影响）。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`，不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`。
        epsilon: 下侧散度阈值 $\delta_{low} \ge 0$（verl `clip_ratio_low`）。
        epsilon_high: 上侧散度阈值 $\delta_{high}$（verl `clip_ratio_high`）；`None` 表示等于 `epsilon`。
        divergence: `"tv"`（verl `dppo_tv`）或 `"kl"`（verl `dppo_kl`）。
        clip_ratio_c: 截断重要性采样的上限 $C > 0$（verl `clip_ratio_c`）。
        loss_type: 汇总方式，默认 `"bnpo"`（verl 的 `token-mean`）。
        max_completion_length: `dr_grpo` 的常数分母 $L$；默认取 `T`。

    Returns:
        `(loss, metrics)`：标量损失与 verl 的指标 `actor/pg_clipfrac`（掩码内被信任域挡住的 token 比例）、
        `actor/pg_clipfrac_lower`（信任域内 $w > C$、被 TIS 截断的比例）、`actor/ppo_kl`（限幅后的 $\overline{-\log w}$）。

    Raises:
        ValueError: 形状不符、`B = 0`、含非有限值、`old_logps` 带梯度、`mask` 不是 0/1、阈值为负、`clip_ratio_c`
            不是有限的正数、`divergence` 或 `loss_type` 未知。
    """
    adv = check_policy_inputs(logps, old_logps, advantages, mask)
    check_nonnegative("epsilon", epsilon)
    if epsilon_high is not None:
        check_nonnegative("epsilon_high", epsilon_high)
    check_choice("divergence", divergence, DIVERGENCES)
    check_positive("clip_ratio_c", clip_ratio_c)
    log_ratio = (logps - old_logps).clamp(-VERL_LOG_RATIO_CLAMP, VERL_LOG_RATIO_CLAMP)
    ratio = log_ratio.detach().exp()
    truncated = ratio.clamp(max=clip_ratio_c)
    valid = binary_divergence_valid(logps, old_logps, adv, epsilon, epsilon_high, divergence).to(logps.dtype)
    per_token_loss = -adv * truncated * logps * valid
    loss = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length)
    metrics = {
        "actor/pg_clipfrac": masked_mean(1.0 - valid, mask).item(),
        "actor/pg_clipfrac_lower": masked_mean((ratio > clip_ratio_c).to(logps.dtype) * valid, mask).item(),
        "actor/ppo_kl": masked_mean(-log_ratio.detach(), mask).item(),
    }
    return loss, metrics


# --8<-- [end:dppo_loss]


# --8<-- [start:dppo_gradient_weight]
def dppo_gradient_weight(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    divergence: str = "tv",
    clip_ratio_c: float = 20.0,
) -> Tensor:
    r"""逐 token 损失对 $\log\pi_\theta$ 的导数：$-\hat A\,\min(w, C)\cdot v$。

    与别的损失不同，DPPO 的信任域看概率本身（$p$ 与 $p_{old}$），不只看比率 $w = p/p_{old}$：同一个 $w$，
    $p_{old}$ 小时（低概率 token）概率差小、仍在信任域内，$p_{old}$ 大时可能已经出界。所以这里的输入是两个对数概率。

    Args:
        logps: $\log p$，任意形状（与 `old_logps`、`advantages` 可广播）。
        old_logps: $\log p_{old}$。
        advantages: 优势 $\hat A$。
        epsilon: 下侧阈值 $\delta_{low}$。
        epsilon_high: 上侧阈值；`None` 表示等于 `epsilon`。
        divergence: `"tv"` 或 `"kl"`。
        clip_ratio_c: 截断重要性采样的上限 $C$。

    Returns:
        广播后的形状。

    Examples:
        >>> import math, torch
        >>> old = torch.log(torch.tensor([0.01, 0.5]))
        >>> new = old + math.log(2.0)  # 两个 token 的比率都是 2
        >>> dppo_gradient_weight(new, old, torch.tensor(1.0))  # 低概率 token 仍有梯度，高概率 token 出界
        tensor([-2., -0.])
    """
    logps, old_logps, advantages = torch.broadcast_tensors(logps, old_logps, advantages)
    ratio = (logps - old_logps).clamp(-VERL_LOG_RATIO_CLAMP, VERL_LOG_RATIO_CLAMP).exp()
    valid = binary_divergence_valid(logps, old_logps, advantages, epsilon, epsilon_high, divergence)
    return -advantages * ratio.clamp(max=clip_ratio_c) * valid.to(ratio.dtype)


# --8<-- [end:dppo_gradient_weight]
