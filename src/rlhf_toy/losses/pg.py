r"""REINFORCE 的损失（Williams, 1992）：对数导数技巧（log-derivative trick）的代理损失。

约定：**损失 = −目标**。最小化 $-\hat A\log\pi_\theta(y)$ 的梯度，正是策略梯度
$\mathbb E[\hat A\,\nabla_\theta\log\pi_\theta(y)]$ 的相反数。
"""

# --8<-- [start:imports]
from __future__ import annotations

from torch import Tensor

from rlhf_toy._checks import check_finite, check_mask, check_ndim, check_shape

# --8<-- [end:imports]


# --8<-- [start:reinforce_loss]
def reinforce_loss(logps: Tensor, advantages: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    r"""REINFORCE 代理损失 $\mathcal L = -\frac1B\sum_i \hat A_i \sum_t m_{i,t}\log\pi_\theta(y_{i,t})$。

    整条回答的对数概率是逐 token 对数概率之和，所以对序列级奖励，按回答求和（而不是按 token 平均）
    才给出无偏的策略梯度；这也是 TRL `RLOOTrainer` 对序列对数概率的用法（那里再套一层截断比率，
    同策略、只更新一次时梯度与这里相同）。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        advantages: 优势，形状 `(B,)`（每条回答一个）或 `(B, T)`（逐 token），不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`。

    Returns:
        `(loss, metrics)`：标量损失与 `{"advantage_mean": 优势的平均}`。整行掩码为 0 的回答贡献 0，
        但仍计入分母 $B$。

    Raises:
        ValueError: 形状不符、含非有限值，或 `mask` 不是 0/1。

    Examples:
        >>> import torch
        >>> logps = torch.log(torch.tensor([[0.5], [0.25]]))
        >>> loss, _ = reinforce_loss(logps, torch.tensor([1.0, -1.0]), torch.ones(2, 1))
        >>> round(loss.item(), 4)  # -(log 0.5 - log 0.25) / 2
        -0.3466
    """
    check_ndim("logps", logps, 2, "(B, T)")
    check_finite("logps", logps)
    check_mask("mask", mask, logps.shape, like="logps")
    if advantages.dim() == 1:
        check_shape("advantages", advantages, logps.shape[:1], like="logps 的第 0 维")
        advantages = advantages.unsqueeze(-1)
    else:
        check_shape("advantages", advantages, logps.shape, like="logps")
    check_finite("advantages", advantages)
    advantages = advantages.detach()
    loss = -(advantages * logps * mask).sum() / logps.shape[0]
    return loss, {"advantage_mean": advantages.mean().item()}


# --8<-- [end:reinforce_loss]
