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

    # --8<-- [start:noisy_preference_pairs]
    def noisy_preference_pairs(
        self, pairs_per_prompt: int = 1, label_noise: float = 0.0
    ) -> tuple[Tensor, Tensor, Tensor]:
        """带标签噪声的偏好数据：每对是正确回答与一个随机错误回答，以概率 `label_noise` 把两者标反。

        标反模拟标注员的失误：此时“被选回答”是错的那个。（消耗全局随机数生成器。）

        Args:
            pairs_per_prompt: 每个提示词的偏好对数（错误回答各自独立抽取，可能重复）。
            label_noise: 标签噪声率，在 $[0, 1]$ 内；0 表示标签全对。

        Returns:
            `(prompts, chosen, rejected)`，形状 `(N,)`、`(N, 1)`、`(N, 1)`，
            `N = n_prompts * pairs_per_prompt`，同一提示词的偏好对相邻。

        Raises:
            ValueError: `pairs_per_prompt` 不是正整数，或 `label_noise` 不在 $[0, 1]$ 内。
        """
        if not isinstance(pairs_per_prompt, int) or pairs_per_prompt < 1:
            raise ValueError(f"pairs_per_prompt 应是正整数，实际是 {pairs_per_prompt!r}")
        if not 0.0 <= label_noise <= 1.0:
            raise ValueError(f"label_noise 应在 [0, 1] 内，实际是 {label_noise}")
        prompts = self.prompts().repeat_interleave(pairs_per_prompt)
        correct = self.correct[prompts]
        offset = torch.randint(1, self.n_answers, prompts.shape)  # 1..n_answers-1，保证不等于正确答案
        wrong = (correct + offset) % self.n_answers
        flip = torch.rand(prompts.shape) < label_noise
        chosen = torch.where(flip, wrong, correct)
        rejected = torch.where(flip, correct, wrong)
        return prompts, chosen.unsqueeze(1), rejected.unsqueeze(1)

    # --8<-- [end:noisy_preference_pairs]

    def evaluate(self, policy: TablePolicy) -> dict[str, float]:
        """训练循环每步调用的评估：`{"success_prob": 正确回答的平均概率}`。

        Args:
            policy: 有 `probs()` 方法的查表策略。

        Returns:
            指标字典。
        """
        return {"success_prob": self.success_prob(policy)}

    def success_prob(self, policy: TablePolicy) -> float:
        r"""真实期望奖励：策略给正确回答的平均概率 $\frac1N\sum_x \pi(y^*_x\mid x)$。

        Args:
            policy: 有 `probs()` 方法的查表策略。

        Returns:
            0 到 1 之间的浮点数。
        """
        with torch.no_grad():
            return policy.probs()[self.prompts(), self.correct].mean().item()


# --8<-- [end:bandit_task]
