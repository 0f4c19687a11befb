r"""种子演示的“老虎机”任务：20 个问题、每题 8 个候选回答，恰有一个正确。

可验证奖励（verifiable reward）：回答正确得 1，否则得 0。偏好数据：正确回答 ≻ 一个随机的错误回答。
"""

# --8<-- [start:imports]
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf_toy._checks import check_ndim
from rlhf_toy.policies.table import TablePolicy

# --8<-- [end:imports]


# --8<-- [start:bandit_task]
@dataclass
class BanditTask:
    """查表任务。

    Attributes:
        correct: 每个提示词的正确回答下标，形状 `(n_prompts,)`，整数。
        n_answers: 候选回答个数。
    """

    correct: Tensor
    n_answers: int

    @classmethod
    def make(cls, n_prompts: int = 20, n_answers: int = 8) -> BanditTask:
        """随机抽取正确答案（消耗全局随机数生成器，与种子演示相同）。

        Args:
            n_prompts: 提示词个数。
            n_answers: 候选回答个数，至少 2。

        Returns:
            新任务。

        Raises:
            ValueError: `n_prompts < 1` 或 `n_answers < 2`。
        """
        if n_prompts < 1 or n_answers < 2:
            raise ValueError(f"需要 n_prompts ≥ 1、n_answers ≥ 2，实际是 {n_prompts}、{n_answers}")
        return cls(torch.randint(0, n_answers, (n_prompts,)), n_answers)

    @property
    def n_prompts(self) -> int:
        """提示词个数。"""
        return self.correct.shape[0]

    def prompts(self) -> Tensor:
        """全部提示词下标 `0..n_prompts-1`，形状 `(n_prompts,)`。"""
        return torch.arange(self.n_prompts)

    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """可验证奖励：正确为 1.0，否则为 0.0。

        Args:
            prompts: 提示词下标，形状 `(B,)`。
            completions: 回答，形状 `(B, 1)`。

        Returns:
            形状 `(B,)` 的浮点奖励。

        Raises:
            ValueError: 形状不符。
        """
        check_ndim("completions", completions, 2, "(B, 1)")
        return (completions[:, 0] == self.correct[prompts]).float()

    def preference_pairs(self) -> tuple[Tensor, Tensor, Tensor]:
        """每个提示词一对偏好：正确回答（chosen）≻ 随机错误回答（rejected）。

        Returns:
            `(prompts, chosen, rejected)`，形状 `(n_prompts,)`、`(n_prompts, 1)`、`(n_prompts, 1)`。
        """
        offset = torch.randint(1, self.n_answers, (self.n_prompts,))  # 1..n_answers-1，保证不等于正确答案
        rejected = (self.correct + offset) % self.n_answers
        return self.prompts(), self.correct.unsqueeze(1), rejected.unsqueeze(1)

    def evaluate(self, policy: TablePolicy) -> dict[str, float]:
        """训练循环每步调用的评估：`{"success_prob": 正确回答的平均概率}`。

        Args:
            policy: 有 `probs()` 方法的查表策略。

        Returns:
            指标字典。
        """
        return {"success_prob": self.success_prob(policy)}

    def success_prob(self, policy: TablePolicy) -> float:
        """真实期望奖励：策略给正确回答的平均概率 $\\frac1N\\sum_x \\pi(y^*_x\\mid x)$。

        Args:
            policy: 有 `probs()` 方法的查表策略。

        Returns:
            0 到 1 之间的浮点数。
        """
        with torch.no_grad():
            return policy.probs()[self.prompts(), self.correct].mean().item()


# --8<-- [end:bandit_task]
