"""rlhf_toy：中文 RLHF 教材的配套代码。

损失与优势函数是逐 token 张量上的纯函数（形状同 TRL：`logps (B, T)`、`mask (B, T)`、`advantages (B,)`），
查表策略（T = 1）与序列模型（T > 1）共用同一份实现。
"""

# 必须在任何张量计算之前：固定 ATen、MKL、oneDNN 的指令集与线程数（见 rlhf_toy.numerics）。
from rlhf_toy.numerics import pin_numerics

pin_numerics()

from rlhf_toy.estimators.advantages import gae_advantages, group_advantages, rloo_advantages, whiten
from rlhf_toy.estimators.dynamic_sampling import dynamic_sampling_mask
from rlhf_toy.estimators.entropy import entropy_from_logits
from rlhf_toy.estimators.kl import importance_corrected_k3, kl_estimate
from rlhf_toy.estimators.overlong import soft_overlong_punishment
from rlhf_toy.estimators.rewards import kl_penalized_rewards
from rlhf_toy.losses import (
    aggregate_loss,
    bradley_terry_loss,
    dpo_loss,
    entropy_bonus,
    grpo_loss,
    masked_mean,
    ppo_policy_loss,
    ppo_value_loss,
    reinforce_loss,
    sequence_log_ratio,
)
from rlhf_toy.models import TableRewardModel, TableValueModel
from rlhf_toy.policies import Policy, TablePolicy
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train import (
    DPOConfig,
    GRPOConfig,
    PPOConfig,
    ReinforceConfig,
    RewardConfig,
    RLOOConfig,
    train_dpo,
    train_grpo,
    train_ppo,
    train_reinforce,
    train_reward_model,
    train_rloo,
)

__version__ = "0.1.0"

__all__ = [
    "BanditTask",
    "DPOConfig",
    "GRPOConfig",
    "Policy",
    "TablePolicy",
    "aggregate_loss",
    "dpo_loss",
    "group_advantages",
    "grpo_loss",
    "kl_estimate",
    "masked_mean",
    "train_dpo",
    "train_grpo",
]
__all__ += [
    "PPOConfig",
    "RLOOConfig",
    "ReinforceConfig",
    "RewardConfig",
    "TableRewardModel",
    "TableValueModel",
    "bradley_terry_loss",
    "entropy_bonus",
    "entropy_from_logits",
    "gae_advantages",
    "kl_penalized_rewards",
    "ppo_policy_loss",
    "ppo_value_loss",
    "reinforce_loss",
    "rloo_advantages",
    "train_ppo",
    "train_reinforce",
    "train_reward_model",
    "train_rloo",
    "whiten",
]
__all__ += ["dynamic_sampling_mask", "sequence_log_ratio", "soft_overlong_punishment"]
__all__ += ["importance_corrected_k3"]
