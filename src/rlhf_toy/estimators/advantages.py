r"""优势函数（advantage）的估计：GRPO 的组内相对优势、RLOO 的留一法基线、PPO 的 GAE 与白化。

一个提示词（prompt）采样 $G$ 个回答，排成连续的一组：批大小 $B = n_{\text{prompts}}\times G$，
第 $g$ 组是下标 $gG,\dots,gG+G-1$。这与 TRL `GRPOTrainer` 的布局相同。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import (
    check_choice,
    check_finite,
    check_float,
    check_groups,
    check_mask,
    check_ndim,
    check_nonnegative,
    check_shape,
    check_tensor,
)

# --8<-- [end:imports]

SCALE_REWARDS = ("group", "batch", "none")


# --8<-- [start:group_advantages]
def group_advantages(rewards: Tensor, num_generations: int, scale_rewards: str = "group", eps: float = 1e-4) -> Tensor:
    r"""组内相对优势（group-relative advantage），式 $\hat A_i = (r_i - \mu_g)/(\sigma_g + \varepsilon)$。

    $\mu_g$ 是回答 $i$ 所在组的平均奖励；$\sigma_g$ 是组内的样本标准差（Bessel 校正，除以 $G-1$），
    与 DeepSeekMath（arXiv 2402.03300）§4.1 的结果监督、TRL `GRPOTrainer` 以及 verl
    `compute_grpo_outcome_advantage` 一致。

    Args:
        rewards: 每个回答的标量奖励，形状 `(B,)`，浮点；同一提示词的 `num_generations` 个回答相邻。
        num_generations: 每组回答数 $G$（TRL 的 `num_generations`），须整除 `B`。
        scale_rewards: 除以什么：`"group"` 组内标准差（GRPO，默认）、`"batch"` 整批标准差
            （Lite-PPO，TRL `scale_rewards="batch"`）、`"none"` 不缩放（Dr. GRPO）。
        eps: 加在标准差上的小常数，TRL 用 `1e-4`（写死在代码里，不能配置；verl 用 `1e-6`）。

    Returns:
        形状 `(B,)` 的优势。组内奖励全部相同时优势**恰好**为 0（这样的组最后被置 0）。
        不这样做，像 `[0.35] * 8` 这种在 float32 里不精确的奖励，均值的舍入误差会被 $1/(\sigma_g+\varepsilon)$
        放大（`eps=1e-4` 时每个约 3e-4，`eps=1e-8` 时到 0.7）。TRL 与 verl 不做这一步。
        `num_generations == 1` 时返回 0（TRL 的 `GRPOConfig` 直接拒绝 G < 2，verl 此时返回 $r_i$）。

    Raises:
        ValueError: `rewards` 不是一维浮点张量、含非有限值，`num_generations` 不是正整数或不整除 `B`，
            `scale_rewards` 未知，或 `eps` 为负或不是有限数。

    Examples:
        >>> group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), num_generations=4)
        tensor([ 1.4997, -0.4999, -0.4999, -0.4999])
        >>> group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), num_generations=2)
        tensor([0., 0., 0., 0.])
    """
    check_groups(rewards, num_generations)
    check_choice("scale_rewards", scale_rewards, SCALE_REWARDS)
    check_nonnegative("eps", eps)
    if num_generations == 1:
        return torch.zeros_like(rewards)
    grouped = rewards.view(-1, num_generations)  # (n_prompts, G)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        centered = centered / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centered = centered / (rewards.std() + eps)
    # 组内奖励全相同：恰好为 0（均值的舍入误差不能被 1/(σ+ε) 放大，eps=0 时也不出 0/0）
    constant = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    return centered.masked_fill(constant, 0.0).view(-1)


# --8<-- [end:group_advantages]


# --8<-- [start:rloo_advantages]
def rloo_advantages(rewards: Tensor, num_generations: int) -> Tensor:
    r"""留一法基线（leave-one-out baseline）的优势：RLOO（Ahmadian et al., 2024, arXiv 2402.14740）。

    回答 $i$ 的基线是同组**其余** $G-1$ 个回答的平均奖励，它与 $y_i$ 独立，所以梯度估计无偏：

    $$\hat A_i = r_i - \frac{1}{G-1}\sum_{j\ne i} r_j = \frac{G}{G-1}\big(r_i - \bar r\big),$$

    $G$ 是组大小（`num_generations`），$\bar r$ 是组内平均。代码用右边的形式，与 verl
    `compute_rloo_outcome_advantage` 相同；TRL `RLOOTrainer` 用左边的形式（逐个减去其余回答的平均），
    并把所有奖励函数都返回 None 的回答排除在基线之外（分母是可打分回答数 − 1）。奖励全部有值时两者相等。

    Args:
        rewards: 每个回答的标量奖励，形状 `(B,)`，浮点；同一提示词的 `num_generations` 个回答相邻。
        num_generations: 组大小 $G$，须整除 `B`。

    Returns:
        形状 `(B,)` 的优势。组内奖励全部相同时恰好为 0；`num_generations == 1` 时没有“其余回答”，
        定义为 0（与 `group_advantages` 一致）。

    Raises:
        ValueError: `rewards` 不是一维或含非有限值，`num_generations` 不是正整数或不整除 `B`。

    Examples:
        >>> rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), num_generations=4)
        tensor([ 1.0000, -0.3333, -0.3333, -0.3333])
    """
    check_groups(rewards, num_generations)
    if num_generations == 1:
        return torch.zeros_like(rewards)
    k = num_generations
    grouped = rewards.view(-1, k)  # (n_prompts, k)
    advantages = k / (k - 1) * (grouped - grouped.mean(dim=1, keepdim=True))
    constant = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    return advantages.masked_fill(constant, 0.0).view(-1)


# --8<-- [end:rloo_advantages]


def _check_gae_inputs(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> None:
    check_ndim("rewards", rewards, 2, "(B, T)")
    check_finite("rewards", rewards)
    check_shape("values", values, rewards.shape, like="rewards")
    check_finite("values", values)
    check_mask("mask", mask, rewards.shape, like="rewards")
    for name, x in (("gamma", gamma), ("lam", lam)):
        if not 0.0 <= x <= 1.0:
            raise ValueError(f"{name} 应在 [0, 1] 内，实际是 {x}")


# --8<-- [start:gae_advantages]
def gae_advantages(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[Tensor, Tensor]:
    r"""广义优势估计（GAE；Schulman et al., 2016, arXiv 1506.02438, 式 (16)），跳过掩码为 0 的位置。

    在掩码为 1 的 token 上从后往前递推（$t'$ 是 $t$ 之后下一个掩码为 1 的位置，没有则 $V_{t'} = 0$）：

    $$\delta_t = r_t + \gamma V_{t'} - V_t,\qquad \hat A_t = \delta_t + \gamma\lambda\,\hat A_{t'},\qquad
    R_t = \hat A_t + V_t .$$

    掩码为 0 的位置被**跳过**：它们的奖励与价值不参与递推，$V_{t'}$ 与 $\hat A_{t'}$ 越过它们向前传，
    与 verl `compute_gae_advantage_return` 相同。对右填充的回答，给定同样放在最后一个真实 token 上的奖励、
    且填充处 $r = V = 0$ 时，这与在整行上递推的结果在真实 token 上一致；区别只在中间有 0 的掩码
    （例如多轮对话里夹着的提示词 token）。TRL 删除 PPO 之前的最后版本 v1.12.0 的 `PPOTrainer` 不是这样：
    它把分数放在 EOS 之后的第一个填充位置、并保留那里的价值，$\lambda < 1$ 时真实 token 上的优势因此不同。

    Args:
        rewards: 逐 token 奖励 $r_t$，形状 `(B, T)`，浮点（通常由 `kl_penalized_rewards` 给出）。
        values: 价值模型的估计 $V_t$（采样时的旧值），形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`。
        gamma: 折扣 $\gamma \in [0, 1]$（TRL 默认 1.0）。
        lam: GAE 的 $\lambda \in [0, 1]$（TRL 默认 0.95，verl 默认 1.0）。

    Returns:
        `(advantages, returns)`，形状均为 `(B, T)`，不带梯度；掩码为 0 的位置为 0（与 verl 不同，
        verl 在那里留着向前传的值）。整行掩码为 0 时整行为 0。$\gamma = \lambda = 1$ 时
        $\hat A_t = \sum_{s \ge t} r_s - V_t$（对掩码为 1 的 $s$ 求和）。

    Raises:
        ValueError: 形状不符、含非有限值、`mask` 不是 0/1，或 `gamma`、`lam` 不在 $[0, 1]$ 内。

    Examples:
        >>> adv, ret = gae_advantages(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]]),
        ...                           torch.ones(1, 2), gamma=1.0, lam=1.0)
        >>> adv, ret
        (tensor([[0.5000, 0.5000]]), tensor([[1., 1.]]))
    """
    _check_gae_inputs(rewards, values, mask, gamma, lam)
    rewards, values, mask = rewards.detach(), values.detach(), mask.to(rewards.dtype)
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])  # V_{t'}，越过掩码为 0 的位置
    next_advantage = torch.zeros_like(rewards[:, 0])  # Â_{t'}
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = m * advantage
        next_value = m * values[:, t] + (1 - m) * next_value
        next_advantage = m * advantage + (1 - m) * next_advantage
    returns = (advantages + values) * mask
    return advantages, returns


# --8<-- [end:gae_advantages]


# --8<-- [start:whiten]
def whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    r"""带掩码的白化（whitening）：$(x - \mu)/\sqrt{\sigma^2 + \varepsilon}$，只统计掩码为 1 的元素。

    方差用 Bessel 校正（除以 $n - 1$），与 TRL `masked_whiten` 及 verl `masked_whiten` 相同。
    PPO 用它把一批优势变成均值 0、方差 1（advantage whitening）。

    Args:
        x: 任意形状的浮点张量，通常是 `(B, T)` 的优势。
        mask: 与 `x` 同形状的 0/1 掩码。
        shift_mean: `False` 时只缩放、把均值加回去（TRL `whiten_rewards` 的用法）。
        eps: 加在方差上的小常数（TRL 用 `1e-8`）。

    Returns:
        与 `x` 同形状，不带梯度；掩码为 0 的位置为 0（同 TRL PPO 对优势的处理）。
        掩码全为 0 时返回全 0；掩码内的值全部相同时方差为 0，中心化后恰为 0
        （`shift_mean=False` 时为原值）；只有一个元素时 $n - 1$ 取 1。

    Raises:
        ValueError: `mask` 形状不符或不是 0/1，`x` 不是浮点张量或含非有限值，`eps` 为负或不是有限数。

    Examples:
        >>> whiten(torch.tensor([1.0, 2.0, 3.0, 9.0]), torch.tensor([1.0, 1.0, 1.0, 0.0]))
        tensor([-1.,  0.,  1.,  0.])
    """
    check_tensor("x", x)
    check_float("x", x)
    check_mask("mask", mask, x.shape, like="x")
    check_finite("x", x)
    check_nonnegative("eps", eps)
    x, mask = x.detach(), mask.to(x.dtype)
    n = mask.sum()
    if n == 0:
        return torch.zeros_like(x)
    mean = (x * mask).sum() / n
    centered = (x - mean) * mask
    inside = x.masked_select(mask.bool())
    if inside.max() == inside.min():  # 常数：方差为 0，中心化结果恰为 0
        return (x * mask) if not shift_mean else torch.zeros_like(x)
    var = (centered**2).sum() / (n - 1).clamp(min=1)  # Bessel 校正
    out = centered * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask


# --8<-- [end:whiten]
