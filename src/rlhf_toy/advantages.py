r"""优势函数（advantage）的估计：GRPO 的组内相对优势。

一个提示词（prompt）采样 $G$ 个回答，排成连续的一组：批大小 $B = n_{\text{prompts}}\times G$，
第 $g$ 组是下标 $gG,\dots,gG+G-1$。这与 TRL `GRPOTrainer` 的布局相同。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_finite, check_ndim

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
        eps: 加在标准差上的小常数，TRL 用 `1e-4`（verl 用 `1e-6`）。

    Returns:
        形状 `(B,)` 的优势。组内奖励全部相同时 $\sigma_g = 0$，优势恰好为 0（不会出现 NaN）；
        `num_generations == 1` 时同样返回 0，与 TRL 一致（verl 此时返回 $r_i$）。

    Raises:
        ValueError: `rewards` 不是一维、含非有限值，`num_generations` 不是正整数或不整除 `B`，
            或 `scale_rewards` 未知。

    Examples:
        >>> group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), num_generations=4)
        tensor([ 1.4997, -0.4999, -0.4999, -0.4999])
        >>> group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), num_generations=2)
        tensor([0., 0., 0., 0.])
    """
    check_ndim("rewards", rewards, 1, "(B,)")
    check_finite("rewards", rewards)
    check_choice("scale_rewards", scale_rewards, SCALE_REWARDS)
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations 应是正整数，实际是 {num_generations!r}")
    if rewards.numel() % num_generations:
        raise ValueError(
            f"rewards 的形状是 ({rewards.numel()},)，期望 (n_prompts * num_generations,)："
            f"{rewards.numel()} 不能被 num_generations={num_generations} 整除"
        )
    if num_generations == 1:
        return torch.zeros_like(rewards)
    grouped = rewards.view(-1, num_generations)  # (n_prompts, G)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        centered = centered / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centered = centered / (rewards.std() + eps)
    return centered.view(-1)


# --8<-- [end:group_advantages]
