r"""把逐 token 损失 $\ell_{i,t}$ 汇总成一个标量：GRPO 各变体真正的区别之一。

四种方式与 TRL `GRPOTrainer._compute_loss` 的 `loss_type` 一一对应（单进程、无梯度累积时）：

| `loss_type` | 公式 | 出处 |
|---|---|---|
| `grpo` | $\frac1B\sum_i \frac{\sum_t m_{i,t}\ell_{i,t}}{\max(\sum_t m_{i,t},1)}$ | DeepSeekMath 式 (3) |
| `bnpo` | $\frac{\sum_{i,t} m_{i,t}\ell_{i,t}}{\max(\sum_{i,t} m_{i,t},1)}$ | TRL 早期版本的默认（版本历史见第 6 章的脚注） |
| `dr_grpo` | $\frac{\sum_{i,t} m_{i,t}\ell_{i,t}}{B\,L}$，$L$ 为最大生成长度 | Dr. GRPO（arXiv 2503.20783） |
| `dapo` | 与 `bnpo` 同式，但分母由整个生成批次的 token 数折算到一个优化步 | TRL `loss_type="dapo"`（TRL 1.16.0 的默认） |

单进程、一次处理整批时 `dapo` 与 `bnpo` 数值相同。
`dapo` 的名字来自 DAPO（arXiv 2503.14476），但论文的分母不是这个：
论文按每个提示词的 $G$ 条回答的 token 数归一，再在提示词之间平均。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_finite_inside, check_mask, check_ndim, check_not_empty

# --8<-- [end:imports]

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    r"""带掩码的平均 $\sum m x / \max(\sum m, 1)$；掩码全为 0 时结果为 0 而不是 NaN。

    掩码为 0 的位置是**选掉**的（`torch.where`），不是乘以 0：那里即使是 NaN 或 inf 也不影响结果，
    梯度也恰为 0（`NaN * 0` 仍是 NaN，相乘的写法会让一个填充位置毁掉整个损失）。

    Args:
        x: 任意形状的浮点张量。
        mask: 与 `x` 同形状的 0/1 掩码。
        dim: 沿哪一维平均；`None` 表示对全部元素平均。

    Returns:
        平均值；`dim` 给定时少一维。

    Raises:
        ValueError: `mask` 形状与 `x` 不同或含 0/1 以外的值，或 `x` 在掩码为 1 的位置含 NaN / ±inf。

    Examples:
        >>> import torch
        >>> masked_mean(torch.tensor([[1.0, 3.0]]), torch.tensor([[1.0, 0.0]])).item()
        1.0
    """
    check_mask("mask", mask, x.shape, like="x")
    check_finite_inside("x", x, mask)
    selected = torch.where(mask.bool(), x, 0.0)  # 选取而不是相乘：填充处的 NaN 进不了结果和梯度
    if dim is None:
        return selected.sum() / mask.sum().clamp(min=1)
    return selected.sum(dim) / mask.sum(dim).clamp(min=1)


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
        掩码为 0 的位置被选掉而不是乘以 0，那里的值（哪怕是 NaN）不影响损失与梯度。

    Raises:
        ValueError: 形状不符、空批次（`B = 0`，四种汇总里有的给 NaN、有的给 0，都没有意义）、`mask` 不是 0/1、
            掩码为 1 的位置含 NaN / ±inf、`loss_type` 未知，或 `dr_grpo` 的 `max_completion_length` 小于 1
            或小于某条回答的真实长度（那样的常数分母不再是“最大长度”）。
    """
    check_ndim("per_token_loss", per_token_loss, 2, "(B, T)")
    check_not_empty("per_token_loss", per_token_loss)
    check_mask("mask", mask, per_token_loss.shape, like="per_token_loss")
    check_finite_inside("per_token_loss", per_token_loss, mask)
    check_choice("loss_type", loss_type, LOSS_TYPES)
    masked = torch.where(mask.bool(), per_token_loss, 0.0)  # 选取，不相乘（NaN · 0 仍是 NaN）
    if loss_type == "grpo":  # 先在每条回答内平均，再在回答间平均
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if loss_type == "dr_grpo":  # 除以常数 B·L，与长度无关
        length = per_token_loss.shape[1] if max_completion_length is None else max_completion_length
        if length < 1:
            raise ValueError(f"max_completion_length 应 ≥ 1，实际是 {length}")
        if length < mask.sum(-1).max():
            raise ValueError(
                f"max_completion_length={length} 小于最长回答的真实长度 {int(mask.sum(-1).max())}："
                "dr_grpo 的分母应是生成时的长度上限"
            )
        return masked.sum() / (per_token_loss.shape[0] * length)
    return masked.sum() / mask.sum().clamp(min=1)  # bnpo / dapo：全部 token 平均


# --8<-- [end:aggregate]
