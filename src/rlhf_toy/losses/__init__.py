"""损失函数：逐 token 张量上的纯函数，表格策略（T = 1）与序列模型（T > 1）共用。"""

from rlhf_toy.losses.aggregate import LOSS_TYPES, aggregate_loss, masked_mean
from rlhf_toy.losses.dpo import dpo_loss
from rlhf_toy.losses.grpo import grpo_loss

__all__ = ["LOSS_TYPES", "aggregate_loss", "dpo_loss", "grpo_loss", "masked_mean"]
