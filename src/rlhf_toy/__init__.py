"""rlhf_toy：中文 RLHF 教材的配套代码。

损失与优势函数是逐 token 张量上的纯函数（形状同 TRL：`logps (B, T)`、`mask (B, T)`、`advantages (B,)`），
查表策略（T = 1）与序列模型（T > 1）共用同一份实现。
"""

from rlhf_toy.advantages import group_advantages
from rlhf_toy.kl import kl_estimate
from rlhf_toy.losses import aggregate_loss, dpo_loss, grpo_loss, masked_mean
from rlhf_toy.policies import Policy, TablePolicy
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train import DPOConfig, GRPOConfig, train_dpo, train_grpo

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
