"""任务：提示词、可验证奖励与偏好数据。"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from rlhf_toy.tasks.bandit import BanditTask


class Task(Protocol):
    """任务接口（结构化类型）：在线算法（GRPO、PPO 等）的训练循环只用到这三个方法。"""

    def prompts(self) -> Tensor:
        """本步用来采样的提示词，第 0 维长 `P`。"""
        ...

    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """每条回答的标量奖励，形状 `(B,)`；`prompts` 与 `completions` 逐行对应。"""
        ...

    def evaluate(self, policy) -> dict[str, float]:  # noqa: ANN001 - any Policy
        """评估指标（例如真实期望奖励），由训练循环并入每步的指标。"""
        ...


__all__ = ["BanditTask", "Task"]
