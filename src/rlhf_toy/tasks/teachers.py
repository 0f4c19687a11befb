r"""蒸馏用的教师：精确的加法器加 $\varepsilon$ 平滑（第 12 章）。

教师对**任何**回答前缀都给出下一 token 的分布，包括学生写错之后的前缀。约定：教师按位置说话，
不看前缀——位置 $t$ 上，它以 $1-\varepsilon$ 的概率说正确的和的第 $t$ 个字符（和写完之后说 EOS），其余
$\varepsilon$ 均分给词表里另外 $V-1$ 个 token。所以学生第一位写错之后，教师在第二位仍然说正确答案的第二位：
它给每一位单独打分，错一位不会让后面的位都得不到信号。

它不是神经网络：打分是查表，不需要前向计算。真实的同策略蒸馏里，这一步是教师对“提示词 + 学生回答”的
**一次**前向（prefill，不生成）；SFT 的数据则要教师逐 token 自回归地**生成**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math

import torch
from torch import Tensor

from rlhf_toy._checks import check_ndim
from rlhf_toy.policies.transformer import completion_mask
from rlhf_toy.tasks.addition import EOS, PAD, VOCAB, AdditionTask, encode

# --8<-- [end:imports]


# --8<-- [start:exact_adder_teacher]
class ExactAdderTeacher:
    r"""精确加法器教师 $\pi_T(y_t\mid x, y_{<t}) = (1-\varepsilon)\,[y_t = s_t] + \frac{\varepsilon}{V-1}\,[y_t \ne s_t]$，$s$ 是正确的和加 EOS。

    Args:
        task: 加法任务（用它的 `answers` 与 `max_completion_length`；不支持草稿区）。
        epsilon: 平滑量 $\varepsilon\in(0, 1)$：教师放在错误 token 上的总概率。

    Raises:
        ValueError: `epsilon` 不在 $(0, 1)$，或任务带草稿区。
    """

    def __init__(self, task: AdditionTask, epsilon: float = 0.05):
        if not 0 < epsilon < 1:
            raise ValueError(f"epsilon 应在 (0, 1) 内，实际是 {epsilon}")
        if task.scratch:
            raise ValueError(f"ExactAdderTeacher 不支持草稿区（task.scratch={task.scratch}）")
        self.task, self.epsilon, self.vocab_size = task, epsilon, len(VOCAB)

    def targets(self, prompts: Tensor, length: int) -> Tensor:
        """每个位置上教师最想说的 token：正确的和的各位，之后全是 EOS。形状 `(B, length)`。"""
        rows = [encode(str(s)) + [EOS] * length for s in self.task.answers(prompts)]
        return torch.tensor([r[:length] for r in rows])

    def log_probs(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """每个回答位置上教师的整个下一 token 分布（对数概率），形状 `(B, T, V)`；也就是教师的 logits。

        Args:
            prompts: 提示词，形状 `(B, Lp)`。
            completions: 回答，形状 `(B, T)`（只用它的长度：教师不看前缀）。

        Returns:
            形状 `(B, T, V)` 的 float32 对数概率，每行和为 1。
        """
        check_ndim("completions", completions, 2, "(B, T)")
        target = self.targets(prompts, completions.shape[1])
        low = math.log(self.epsilon / (self.vocab_size - 1))
        out = torch.full((*target.shape, self.vocab_size), low)
        return out.scatter(-1, target.unsqueeze(-1), math.log1p(-self.epsilon))

    def logps(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """教师对给定回答各 token 的对数概率 $\\log\\pi_T(y_t)$，形状 `(B, T)`；第一个 EOS 之后为 0（同学生的 `logps`）。"""
        logps = self.log_probs(prompts, completions).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
        return logps * completion_mask(completions, EOS)

    @torch.no_grad()
    def generate(self, prompts: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """从教师采样回答（SFT 的数据）：逐位置独立地采，第一个 EOS 之后填 PAD。

        Args:
            prompts: 提示词，形状 `(B, Lp)`。
            generator: 随机数生成器。

        Returns:
            `(completions, mask)`，形状均为 `(B, max_completion_length)`。
        """
        length = self.task.max_completion_length
        probs = self.log_probs(prompts, torch.zeros(prompts.shape[0], length, dtype=torch.long)).exp()
        tokens = torch.multinomial(probs.view(-1, self.vocab_size), 1, generator=generator).view(-1, length)
        mask = completion_mask(tokens, EOS)
        return tokens.masked_fill(mask == 0, PAD), mask


# --8<-- [end:exact_adder_teacher]
