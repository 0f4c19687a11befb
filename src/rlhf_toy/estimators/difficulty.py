r"""难度筛选（difficulty filtering）：按起始模型的通过率挑训练用的提示词，只留通过率落在一个窗口里的题。

每道题采 $n$ 个回答、数出 $c$ 个正确，通过率就是 pass@1 的无偏估计 $c/n$
（第 11 章 [`pass_at_k`][rlhf_toy.estimators.pass_at_k.pass_at_k] 取 $k=1$）。
通过率为 0 或 1 的题在 GRPO 里整组奖励相同、优势为 0，不给梯度。
训练前可以只留通过率落在某个窗口里的题。本书取 $[0.2, 0.8]$，这是本书自己的选择（最宽的窗口只去掉 0 与 1）。
这里是纯函数，只看计数，不碰策略；与训练中逐批丢组的动态采样（`rlhf_toy.estimators.dynamic_sampling`）互补。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_ndim
from rlhf_toy.estimators.pass_at_k import pass_at_k

# --8<-- [end:imports]


# --8<-- [start:pass_rate_window]
def pass_rate_window(correct: Tensor, n: int, low: float = 0.2, high: float = 0.8) -> Tensor:
    r"""标出通过率 $c/n$ 落在闭区间 $[\text{low}, \text{high}]$ 里的题。

    通过率 $c/n$ 就是 `pass_at_k(n, c, 1)`；这里直接做除法（正确舍入），
    免得连乘的舍入误差把恰在端点上的题（如 $2/10$ 对 $0.2$）挤出窗口。窗口两端都算在内。

    Args:
        correct: 每道题 `n` 个样本里正确的个数，形状 `(P,)`，整数张量，取值 `0..n`。
        n: 每道题的样本数，正整数。
        low: 窗口下端，$0 \le \text{low} \le \text{high} \le 1$。
        high: 窗口上端。

    Returns:
        形状 `(P,)` 的布尔张量，`True` 表示留下这道题。

    Raises:
        ValueError: `correct` 不是一维整数张量或超出 `0..n`；`low`、`high` 不在 $[0, 1]$ 内或 `low > high`。

    Examples:
        >>> import torch
        >>> pass_rate_window(torch.tensor([0, 2, 5, 8, 10]), n=10)
        tensor([False,  True,  True,  True, False])
    """
    check_ndim("correct", correct, 1, "(P,)")
    if correct.is_floating_point() or correct.dtype == torch.bool:
        raise ValueError(f"correct 应是整数张量（正确的个数），实际 dtype 是 {correct.dtype}")
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"窗口应满足 0 ≤ low ≤ high ≤ 1，实际是 low={low}, high={high}")
    for c in correct.tolist():
        pass_at_k(n, int(c), 1)  # 检查 n 与 0 ≤ c ≤ n，报错同第 11 章
    return torch.tensor([low <= c / n <= high for c in correct.tolist()], dtype=torch.bool)


# --8<-- [end:pass_rate_window]
