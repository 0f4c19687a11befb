"""训练循环：每个算法一个短小、自上而下可读的函数，返回逐步指标的列表。"""

from rlhf_toy.train.dpo import DPOConfig, train_dpo
from rlhf_toy.train.grpo import GRPOConfig, train_grpo
from rlhf_toy.train.ppo import PPOConfig, train_ppo
from rlhf_toy.train.reinforce import ReinforceConfig, RLOOConfig, train_reinforce, train_rloo
from rlhf_toy.train.reward_model import RewardConfig, train_reward_model

__all__ = ["DPOConfig", "GRPOConfig", "train_dpo", "train_grpo"]
__all__ += ["PPOConfig", "RLOOConfig", "ReinforceConfig", "RewardConfig"]
__all__ += ["train_ppo", "train_reinforce", "train_reward_model", "train_rloo"]
