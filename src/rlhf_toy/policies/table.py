r"""查表策略：每个提示词一行 logits，回答只有一个 token（$T = 1$）。

这是种子演示里的“语言模型”：20 个提示词 × 8 个候选回答。它小到可以精确算出期望奖励，
却已经具备策略梯度、重要性采样、KL 惩罚所需的一切。
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlhf_toy._checks import check_ndim, check_table_batch
from rlhf_toy.estimators.entropy import entropy_from_logits

# --8<-- [end:imports]


# --8<-- [start:table_policy]
class TablePolicy(nn.Module):
    r"""查表策略 $\pi_\theta(y\mid x) = \mathrm{softmax}(\theta_x)_y$，参数 $\theta$ 形状 `(n_prompts, n_answers)`。

    Args:
        logits: 初始 logits，形状 `(n_prompts, n_answers)`，浮点。

    Raises:
        ValueError: `logits` 不是二维张量。
    """

    def __init__(self, logits: Tensor):
        super().__init__()
        check_ndim("logits", logits, 2, "(n_prompts, n_answers)")
        self.logits = nn.Parameter(logits.detach().clone())

    @classmethod
    def random(cls, n_prompts: int, n_answers: int, scale: float = 0.1) -> TablePolicy:
        """用 `scale * randn` 初始化（与种子演示相同，消耗全局随机数生成器）。

        Args:
            n_prompts: 提示词个数。
            n_answers: 候选回答个数（词表大小）。
            scale: 初始 logits 的标准差；越小初始策略越接近均匀分布。

        Returns:
            新的策略。
        """
        return cls(scale * torch.randn(n_prompts, n_answers))

    def probs(self) -> Tensor:
        """整张概率表，形状 `(n_prompts, n_answers)`，每行和为 1。"""
        return F.softmax(self.logits, dim=-1)

    def sample(self, prompts: Tensor, num_generations: int) -> tuple[Tensor, Tensor]:
        """每个提示词有放回地采样 `num_generations` 个回答。

        Args:
            prompts: 提示词下标，形状 `(P,)`，整数。
            num_generations: 每组回答数 $G$。

        Returns:
            `(completions, mask)`：形状 `(P * G, 1)`；组内相邻；掩码全为 1。
        """
        with torch.no_grad():
            probs = F.log_softmax(self.logits, dim=-1)[prompts].exp()
            answers = torch.multinomial(probs, num_generations, replacement=True)  # (P, G)
        completions = answers.reshape(-1, 1)
        return completions, torch.ones(completions.shape)

    def logps(self, prompts: Tensor, completions: Tensor) -> Tensor:
        r"""回答的对数概率，形状 `(B, 1)`，带梯度。

        Args:
            prompts: 提示词下标，形状 `(B,)`。
            completions: 回答，形状 `(B, 1)`。

        Returns:
            $\log\pi_\theta(y\mid x)$，形状 `(B, 1)`。

        Raises:
            ValueError: 形状不符。
        """
        check_table_batch(prompts, completions)
        return F.log_softmax(self.logits, dim=-1)[prompts].gather(1, completions)

    def entropy(self, prompts: Tensor, completions: Tensor) -> Tensor:
        r"""每个回答位置上整个回答分布的熵 $H(\pi_\theta(\cdot\mid x))$，形状 `(B, 1)`，带梯度。

        Args:
            prompts: 提示词下标，形状 `(B,)`。
            completions: 回答，形状 `(B, 1)`；只用到它的形状。

        Returns:
            形状 `(B, 1)` 的熵，单位 nat（见 `rlhf_toy.estimators.entropy.entropy_from_logits`）。

        Raises:
            ValueError: 形状不符。
        """
        check_table_batch(prompts, completions)
        return entropy_from_logits(self.logits[prompts]).unsqueeze(1)

    def frozen_copy(self) -> TablePolicy:
        """冻结的副本（参考模型）：参数不再需要梯度。"""
        ref = copy.deepcopy(self)
        ref.requires_grad_(False)
        return ref


# --8<-- [end:table_policy]


def exact_kl(policy: TablePolicy, ref_policy: TablePolicy) -> float:
    r"""查表策略与参考模型之间的精确 KL（不采样）：$\frac1N\sum_x \mathrm{KL}(\pi_\theta(\cdot\mid x)\,\|\,\pi_{ref}(\cdot\mid x))$，单位 nat。

    Args:
        policy: 查表策略。
        ref_policy: 参考模型（同形状的查表策略）。

    Returns:
        非负浮点数：各提示词上反向 KL 的平均。
    """
    with torch.no_grad():
        logp = torch.log_softmax(policy.logits, -1)
        ref_logp = torch.log_softmax(ref_policy.logits, -1)
        return (logp.exp() * (logp - ref_logp)).sum(-1).mean().item()
