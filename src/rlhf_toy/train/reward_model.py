r"""奖励模型的训练循环：偏好对上的全批梯度下降，最小化 Bradley–Terry 损失。"""

# --8<-- [start:imports]
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf_toy.losses.reward_model import bradley_terry_loss
from rlhf_toy.models import TableRewardModel

# --8<-- [end:imports]


@dataclass
class RewardConfig:
    """奖励模型的超参数。

    `learning_rate`、`center_rewards_coefficient` 与 TRL `RewardConfig` 同名，但学习率的默认值不同（TRL 是 $10^{-4}$）；
    `steps` 对应 TRL 的 `max_steps`。

    Attributes:
        learning_rate: Adam 学习率。
        steps: 全批梯度步数。
        center_rewards_coefficient: 居中系数 $c$；`None` 表示不加居中项（TRL 默认）。
    """

    learning_rate: float = 0.1
    steps: int = 100
    center_rewards_coefficient: float | None = None


def preference_accuracy(reward_model: TableRewardModel, pairs: tuple[Tensor, Tensor, Tensor]) -> float:
    """偏好准确率：奖励模型给被选回答的分数严格高于被拒回答的比例（平局算错）。

    Args:
        reward_model: 有 `reward(prompts, completions)` 的奖励模型。
        pairs: `(prompts, chosen, rejected)`。

    Returns:
        0 到 1 之间的浮点数。
    """
    prompts, chosen, rejected = pairs
    return (reward_model.reward(prompts, chosen) > reward_model.reward(prompts, rejected)).float().mean().item()


# --8<-- [start:train_reward_model]
def train_reward_model(
    reward_model: TableRewardModel,
    pairs: tuple[Tensor, Tensor, Tensor],
    config: RewardConfig,
    eval_pairs: tuple[Tensor, Tensor, Tensor] | None = None,
    margin: Tensor | None = None,
) -> list[dict[str, float]]:
    """在偏好对上训练奖励模型，返回每一步的指标字典（键名同 TRL `RewardTrainer` 日志）。

    Args:
        reward_model: 带梯度的 `reward_model(prompts, completions)`（会被原地更新）。
        pairs: 训练用的 `(prompts, chosen, rejected)`，如 `BanditTask.noisy_preference_pairs()`。
        config: 超参数。
        eval_pairs: 可选的留出偏好对；给出时每步记录 `eval_accuracy`。
        margin: 可选的每对间隔，形状 `(N,)`。

    Returns:
        长度为 `config.steps` 的列表；每项含 `step`、`loss`、`accuracy`、`margin`、`min_reward`、
        `mean_reward`、`max_reward`（均在训练对上，更新前），以及 `eval_accuracy`（更新后）。
    """
    optimizer = torch.optim.Adam(reward_model.parameters(), lr=config.learning_rate, fused=True)
    prompts, chosen, rejected = pairs
    history = []
    for step in range(1, config.steps + 1):
        loss, metrics = bradley_terry_loss(
            reward_model(prompts, chosen),
            reward_model(prompts, rejected),
            margin=margin,
            center_rewards_coefficient=config.center_rewards_coefficient,
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record = {"step": step, "loss": loss.item(), **metrics}
        if eval_pairs is not None:
            record["eval_accuracy"] = preference_accuracy(reward_model, eval_pairs)
        history.append(record)
    return history


# --8<-- [end:train_reward_model]
