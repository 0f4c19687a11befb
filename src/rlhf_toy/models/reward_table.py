r"""查表奖励模型 $r_\phi(x, y) = \phi_{x, y}$：每个（提示词，回答）一个可学习的分数。

它只从偏好对里学：没在任何偏好对里出现过的回答，分数一直停在初始值 0。这正是一个“不完美”
的奖励模型：PPO 接下来优化的是它，而不是真实奖励。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor, nn

from rlhf_toy._checks import check_table_batch

# --8<-- [end:imports]


# --8<-- [start:table_reward_model]
class TableRewardModel(nn.Module):
    r"""查表奖励模型，参数 $\phi$ 形状 `(n_prompts, n_answers)`，初始为 0。

    `forward` 带梯度（训练用），`reward` 不带梯度（当作任务的奖励函数用，接口同 `Task.reward`）。

    Args:
        n_prompts: 提示词个数。
        n_answers: 候选回答个数。

    Raises:
        ValueError: `n_prompts < 1` 或 `n_answers < 2`。
    """

    def __init__(self, n_prompts: int, n_answers: int):
        super().__init__()
        if n_prompts < 1 or n_answers < 2:
            raise ValueError(f"需要 n_prompts ≥ 1、n_answers ≥ 2，实际是 {n_prompts}、{n_answers}")
        self.table = nn.Parameter(torch.zeros(n_prompts, n_answers))

    def forward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        r"""每条回答的分数 $r_\phi(x, y)$，带梯度。

        Args:
            prompts: 提示词下标，形状 `(B,)`，整数。
            completions: 回答，形状 `(B, 1)`，整数。

        Returns:
            形状 `(B,)` 的浮点分数。

        Raises:
            ValueError: 形状不符。
        """
        check_table_batch(prompts, completions)
        return self.table[prompts, completions[:, 0]]

    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """当作奖励函数用：同 `forward`，但不带梯度（PPO 的代理奖励，proxy reward）。

        Args:
            prompts: 提示词下标，形状 `(B,)`。
            completions: 回答，形状 `(B, 1)`。

        Returns:
            形状 `(B,)` 的浮点分数。
        """
        with torch.no_grad():
            return self.forward(prompts, completions)


# --8<-- [end:table_reward_model]
