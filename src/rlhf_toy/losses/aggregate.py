r"""把逐 token 损失 $\ell_{i,t}$ 汇总成一个标量：GRPO 各变体真正的区别之一。

四种方式与 TRL `GRPOTrainer._compute_loss` 的 `loss_type` 一一对应（单进程、无梯度累积时）：

| `loss_type` | 公式 | 出处 |
|---|---|---|
| `grpo` | $\frac1B\sum_i \frac{\sum_t m_{i,t}\ell_{i,t}}{\max(\sum_t m_{i,t},1)}$ | DeepSeekMath 式 (3) |
| `bnpo` | $\frac{\sum_{i,t} m_{i,t}\ell_{i,t}}{\max(\sum_{i,t} m_{i,t},1)}$ | TRL v0.17–v0.21 默认 |
| `dr_grpo` | $\frac{\sum_{i,t} m_{i,t}\ell_{i,t}}{B\,L}$，$L$ 为最大生成长度 | Dr. GRPO（arXiv 2503.20783） |
| `dapo` | 与 `bnpo` 同式，但分母是整个生成批次的 token 数 | DAPO（arXiv 2503.14476），TRL 现默认 |

单进程、一次处理整批时 `dapo` 与 `bnpo` 数值相同。
"""

# --8<-- [start:imports]
from __future__ import annotations

from torch import Tensor

from rlhf_toy._checks import check_choice, check_mask, check_ndim

# --8<-- [end:imports]

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    r"""带掩码的平均 $\sum m x / \max(\sum m, 1)$；掩码全为 0 时结果为 0 而不是 NaN。

    Args:
        x: 任意形状的张量。
        mask: 与 `x` 同形状的 0/1 掩码。
        dim: 沿哪一维平均；`None` 表示对全部元素平均。

    Returns:
        平均值；`dim` 给定时少一维。

    Raises:
        ValueError: `mask` 形状与 `x` 不同或含 0/1 以外的值。

    Examples:
        >>> import torch
        >>> masked_mean(torch.tensor([[1.0, 3.0]]), torch.tensor([[1.0, 0.0]])).item()
        1.0
    """
    check_mask("mask", mask, x.shape, like="x")
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


# --8<-- [start:aggregate]
def aggregate_loss(
    per_token_loss: Tensor, mask: Tensor, loss_type: str = "grpo", max_completion_length: int | None = None
) -> Tensor:
    r"""按 `loss_type` 把逐 token 损失汇总为标量（见本模块表格）。

    Args:
        per_token_loss: 逐 token 损失 $\ell_{i,t}$，形状 `(B, T)`，浮点。
        mask: 损失掩码 $m_{i,t}$，形状 `(B, T)`，1 表示回答中的真实 token（含 EOS），0 表示填充。
        loss_type: `"grpo"`、`"bnpo"`、`"dr_grpo"` 或 `"dapo"`。
        max_completion_length: `dr_grpo` 的常数分母 $L$（TRL 的 `max_completion_length`）；默认取 `T`。

    Returns:
        标量损失（0 维张量）。掩码全为 0 的行对 `grpo` 贡献 0；整批掩码全为 0 时损失为 0。

    Raises:
        ValueError: 形状不符、`mask` 不是 0/1、`loss_type` 未知，或 `max_completion_length` 小于 1。
    """
    check_ndim("per_token_loss", per_token_loss, 2, "(B, T)")
    check_mask("mask", mask, per_token_loss.shape, like="per_token_loss")
    check_choice("loss_type", loss_type, LOSS_TYPES)
    masked = per_token_loss * mask
    if loss_type == "grpo":  # 先在每条回答内平均，再在回答间平均
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if loss_type == "dr_grpo":  # 除以常数 B·L，与长度无关
        length = per_token_loss.shape[1] if max_completion_length is None else max_completion_length
        if length < 1:
            raise ValueError(f"max_completion_length 应 ≥ 1，实际是 {length}")
        return masked.sum() / (per_token_loss.shape[0] * length)
    return masked.sum() / mask.sum().clamp(min=1)  # bnpo / dapo：全部 token 平均


# --8<-- [end:aggregate]
