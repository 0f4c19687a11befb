"""训练循环：每个算法一个短小、自上而下可读的函数，返回逐步指标的列表。"""

from rlhf_toy.train.dpo import DPOConfig, train_dpo
from rlhf_toy.train.grpo import GRPOConfig, train_grpo

__all__ = ["DPOConfig", "GRPOConfig", "train_dpo", "train_grpo"]
