r"""策略（policy）：把语言模型看成 $\pi_\theta(y\mid x)$。

所有策略共用一个很小的接口 [`Policy`][rlhf_toy.policies.Policy]：采样回答（带掩码），以及计算给定回答的逐 token
对数概率。查表策略是 $T = 1$ 的特例，极小 Transformer 是 $T > 1$ 的情形，损失函数对两者一视同仁。
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from rlhf_toy.policies.table import TablePolicy


class Policy(Protocol):
    """策略接口（结构化类型）：一个 `torch.nn.Module`，并实现下面三个方法。"""

    def sample(self, prompts: Tensor, num_generations: int) -> tuple[Tensor, Tensor]:
        """为每个提示词采样 `num_generations` 个回答。

        Args:
            prompts: 提示词，第 0 维长 `P`。
            num_generations: 每个提示词的回答数 $G$。

        Returns:
            `(completions, mask)`：形状均为 `(P * G, T)`；同一提示词的回答相邻；`mask` 为 0/1 浮点。
        """
        ...

    def logps(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """给定回答的逐 token 对数概率 $\\log\\pi_\\theta(y_t\\mid x, y_{<t})$。

        Args:
            prompts: 提示词，第 0 维长 `B`（与 `completions` 逐行对应）。
            completions: 回答 token，形状 `(B, T)`，整数。

        Returns:
            形状 `(B, T)` 的浮点张量，带梯度；填充位置的值有限但无意义，由掩码去掉。
        """
        ...

    def frozen_copy(self) -> Policy:
        """冻结的副本，用作参考模型 $\\pi_{ref}$：参数不再需要梯度。"""
        ...

    def entropy(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """每个回答位置上整个词表分布的熵（PPO 的熵奖励与 `policy/entropy_avg` 用它），带梯度。

        Args:
            prompts: 提示词，第 0 维长 `B`。
            completions: 回答 token，形状 `(B, T)`，整数。

        Returns:
            形状 `(B, T)` 的浮点张量（见 `rlhf_toy.estimators.entropy.entropy_from_logits`）。
        """
        ...


__all__ = ["Policy", "TablePolicy"]
