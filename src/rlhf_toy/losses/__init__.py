"""损失函数：逐 token 张量上的纯函数，表格策略（T = 1）与序列模型（T > 1）共用。"""

from rlhf_toy.losses.aggregate import LOSS_TYPES, aggregate_loss, masked_mean
from rlhf_toy.losses.clipped_is_weight import clipped_is_weight_loss
from rlhf_toy.losses.dpo import dpo_loss
from rlhf_toy.losses.gamma_weight import gamma_weight_loss
from rlhf_toy.losses.geometric_mean_ratio import geometric_mean_ratio_loss
from rlhf_toy.losses.grpo import grpo_loss, sequence_log_ratio
from rlhf_toy.losses.length_weighted_sequence import length_weighted_sequence_loss
from rlhf_toy.losses.pg import reinforce_loss
from rlhf_toy.losses.ppo import entropy_bonus, explained_variance, ppo_policy_loss, ppo_value_loss
from rlhf_toy.losses.reward_model import bradley_terry_loss
from rlhf_toy.losses.soft_gate import soft_gate_loss

__all__ = ["LOSS_TYPES", "aggregate_loss", "dpo_loss", "grpo_loss", "masked_mean"]
__all__ += ["bradley_terry_loss", "entropy_bonus", "explained_variance", "ppo_policy_loss", "ppo_value_loss"]
__all__ += ["reinforce_loss"]
__all__ += ["sequence_log_ratio"]
__all__ += [  # TRL 1.16 的 cispo、vespo、experimental GMPO、luspo、sapo，各一个模块，按做法命名
    "clipped_is_weight_loss",
    "gamma_weight_loss",
    "geometric_mean_ratio_loss",
    "length_weighted_sequence_loss",
    "soft_gate_loss",
]
