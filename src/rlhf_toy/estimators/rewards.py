r"""RLHF-PPO 的逐 token 奖励：每个 token 扣 KL 惩罚，序列分数只加在一个位置上。

$$r_t = -\beta\,k_t + \mathbb 1[t = t_{\text{last}}]\;s(x, y),\qquad k_t = \log\pi_{\theta_{old}}(y_t) - \log\pi_{\text{ref}}(y_t)\ (k_1),$$

$s$ 是奖励模型的分数，$t_{\text{last}}$ 是回答最后一个真实 token（掩码为 1 的最后一个位置，通常是 EOS）。
这与 verl（奖励循环把分数写在 `valid_response_length - 1` 处：`experimental/reward_loop/reward_manager/base.py` 的
`assemble_rm_scores`，`workers/reward_manager/naive.py` 是旧实现，写法相同；`apply_kl_penalty` 只减去 β·KL）
和 OpenRLHF `compute_reward` 相同。TRL 删除 PPO 之前的最后版本 v1.12.0 的 `PPOTrainer`
默认不设停止符，分数落在生成满长度的最后一个 token 上；设了 `stop_token="eos"` 时加在 EOS **之后**的第一个填充位置上
（填充符就是 EOS 时落在 EOS 上）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_finite, check_mask, check_ndim, check_nonnegative, check_shape
from rlhf_toy.estimators.kl import kl_estimate

# --8<-- [end:imports]

KL_ESTIMATORS = ("k1", "k3")


# --8<-- [start:kl_penalized_rewards]
def kl_penalized_rewards(
    scores: Tensor, logps: Tensor, ref_logps: Tensor, mask: Tensor, kl_coef: float = 0.05, kl_estimator: str = "k1"
) -> tuple[Tensor, Tensor]:
    r"""把序列分数与逐 token 的 KL 惩罚合成 PPO 的逐 token 奖励 $r_t$（见本模块公式）。

    Args:
        scores: 奖励模型给每条回答的分数 $s$，形状 `(B,)`，浮点。
        logps: 采样时策略的逐 token 对数概率 $\log\pi_{\theta_{old}}$，形状 `(B, T)`，不带梯度。
        ref_logps: 参考模型的逐 token 对数概率，形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`。
        kl_coef: KL 系数 $\beta \ge 0$（TRL `kl_coef`，默认 0.05）。
        kl_estimator: `"k1"`（默认，TRL 与 verl 的默认）或 `"k3"`（TRL `kl_estimator="k3"`）。

    Returns:
        `(rewards, kl)`，形状均为 `(B, T)`，不带梯度：逐 token 奖励，以及掩码内的逐 token KL 估计
        （掩码外为 0）。整行掩码为 0 的回答没有位置可放分数，整行奖励为 0。

    Raises:
        ValueError: 形状不符、含非有限值、`mask` 不是 0/1、`kl_coef < 0` 或 `kl_estimator` 未知。

    Examples:
        >>> rewards, kl = kl_penalized_rewards(torch.tensor([1.0]), torch.zeros(1, 3), torch.zeros(1, 3),
        ...                                    torch.tensor([[1.0, 1.0, 0.0]]))
        >>> rewards
        tensor([[0., 1., 0.]])
    """
    check_ndim("logps", logps, 2, "(B, T)")
    check_finite("logps", logps)
    check_shape("ref_logps", ref_logps, logps.shape, like="logps")
    check_finite("ref_logps", ref_logps)
    check_shape("scores", scores, logps.shape[:1], like="logps 的第 0 维")
    check_finite("scores", scores)
    check_mask("mask", mask, logps.shape, like="logps")
    check_nonnegative("kl_coef", kl_coef)
    check_choice("kl_estimator", kl_estimator, KL_ESTIMATORS)
    mask = mask.to(logps.dtype)
    kl = kl_estimate(logps.detach(), ref_logps.detach(), kl_estimator) * mask
    rewards = -kl_coef * kl
    positions = torch.arange(logps.shape[1], device=logps.device)
    last = (positions * mask).argmax(dim=1)  # 每行最后一个掩码为 1 的位置
    has_token = mask.sum(dim=1) > 0
    rows = torch.arange(logps.shape[0], device=logps.device)
    rewards[rows, last] += scores.detach() * has_token
    return rewards, kl


# --8<-- [end:kl_penalized_rewards]
