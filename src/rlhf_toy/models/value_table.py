r"""查表价值模型 $V_\psi(x)$：每个提示词一个可学习的值，初始为 0。

在 $T = 1$ 的查表任务里，唯一需要估值的状态就是“看到提示词、还没回答”；
序列模型（$T > 1$）的价值模型要对每个前缀 $(x, y_{<t})$ 给一个值，形状同样是 `(B, T)`。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor, nn

from rlhf_toy._checks import check_ndim

# --8<-- [end:imports]


# --8<-- [start:table_value_model]
class TableValueModel(nn.Module):
    r"""查表价值模型，参数 $\psi$ 形状 `(n_prompts,)`。

    Args:
        n_prompts: 提示词个数。

    Raises:
        ValueError: `n_prompts < 1`。
    """

    def __init__(self, n_prompts: int):
        super().__init__()
        if n_prompts < 1:
            raise ValueError(f"需要 n_prompts ≥ 1，实际是 {n_prompts}")
        self.table = nn.Parameter(torch.zeros(n_prompts))

    def values(self, prompts: Tensor, completions: Tensor) -> Tensor:
        r"""每个 token 位置之前的状态价值 $V_\psi(x, y_{<t})$，这里就是 $V_\psi(x)$。

        Args:
            prompts: 提示词下标，形状 `(B,)`，整数。
            completions: 回答，形状 `(B, T)`；只用到它的形状。

        Returns:
            形状 `(B, T)` 的浮点张量，带梯度。

        Raises:
            ValueError: 形状不符。
        """
        check_ndim("prompts", prompts, 1, "(B,)")
        check_ndim("completions", completions, 2, "(B, T)")
        if completions.shape[0] != prompts.shape[0]:
            raise ValueError(f"completions 的形状是 {tuple(completions.shape)}，期望第 0 维为 {prompts.shape[0]}")
        return self.table[prompts].unsqueeze(1).expand(-1, completions.shape[1])


# --8<-- [end:table_value_model]
