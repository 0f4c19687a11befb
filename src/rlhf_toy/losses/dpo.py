r"""DPO（Rafailov et al., 2023, arXiv 2305.18290）的损失与隐式奖励指标。

输入是**整条回答**的对数概率（逐 token 对数概率在掩码内求和），与 TRL `DPOTrainer` 相同。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from rlhf_toy._checks import check_finite, check_ndim, check_nonnegative, check_shape

# --8<-- [end:imports]


def _check_dpo_inputs(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta) -> None:
    check_ndim("chosen_logps", chosen_logps, 1, "(B,)")
    for name, x in (
        ("chosen_logps", chosen_logps),
        ("rejected_logps", rejected_logps),
        ("ref_chosen_logps", ref_chosen_logps),
        ("ref_rejected_logps", ref_rejected_logps),
    ):
        check_shape(name, x, chosen_logps.shape, like="chosen_logps")
        check_finite(name, x)
    check_nonnegative("beta", beta)


# --8<-- [start:dpo_loss]
def dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
) -> tuple[Tensor, dict[str, float]]:
    r"""DPO 的 sigmoid 损失 $-\log\sigma(\beta\Delta)$ 及 TRL 记录的隐式奖励指标。

    $$\Delta = \Big[\log\pi_\theta(y_w) - \log\pi_{ref}(y_w)\Big] - \Big[\log\pi_\theta(y_l) - \log\pi_{ref}(y_l)\Big]$$

    即论文式 (7)；TRL `DPOTrainer` 的 `loss_type="sigmoid"`（当前版本不含标签平滑）。

    Args:
        chosen_logps: 策略对被选回答 $y_w$（chosen）的序列对数概率，形状 `(B,)`，浮点，带梯度。
        rejected_logps: 策略对被拒回答 $y_l$（rejected）的序列对数概率，形状 `(B,)`。
        ref_chosen_logps: 参考模型对 $y_w$ 的序列对数概率，形状 `(B,)`，不带梯度。
        ref_rejected_logps: 参考模型对 $y_l$ 的序列对数概率，形状 `(B,)`。
        beta: 温度 $\beta \ge 0$（TRL `beta`，默认 0.1）；越小越允许偏离参考模型。

    Returns:
        `(loss, metrics)`：批平均的标量损失；`metrics` 与 TRL 同名同义：
        `rewards/chosen` $=\overline{\beta(\log\pi_\theta(y_w)-\log\pi_{ref}(y_w))}$、`rewards/rejected`、
        `rewards/margins`（两者之差的平均）、`rewards/accuracies`（严格大于的比例，第 0 步为 0.0）。

    Raises:
        ValueError: 四个输入不是同形状的一维张量、含非有限值，或 `beta < 0`。

    Examples:
        >>> import torch
        >>> z = torch.zeros(2)
        >>> loss, m = dpo_loss(z, z, z, z, beta=0.1)
        >>> round(loss.item(), 4), m["rewards/accuracies"]
        (0.6931, 0.0)
    """
    _check_dpo_inputs(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)
    chosen_logratios = chosen_logps - ref_chosen_logps
    rejected_logratios = rejected_logps - ref_rejected_logps
    loss = -F.logsigmoid(beta * (chosen_logratios - rejected_logratios)).mean()
    chosen_rewards = beta * chosen_logratios.detach()
    rejected_rewards = beta * rejected_logratios.detach()
    metrics = {
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
    }
    return loss, metrics


# --8<-- [end:dpo_loss]
