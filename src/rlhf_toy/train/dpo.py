r"""DPO 训练循环：离线偏好对上的全批梯度下降，不采样、不需要奖励模型。"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf_toy.losses.dpo import LENGTH_NORMALIZED_LOSS_TYPES, dpo_loss
from rlhf_toy.policies import Policy

# --8<-- [end:imports]


@dataclass
class DPOConfig:
    """DPO 的超参数。默认值是种子演示的取值。

    `beta`、`learning_rate`、`loss_type`、`label_smoothing` 与 TRL `DPOConfig` 同名（`simpo_gamma` 同 TRL `CPOConfig`），
    但学习率的默认值不同（TRL 是 $10^{-6}$）；`steps` 对应 TRL 的 `max_steps`。

    Attributes:
        beta: KL 系数 $\\beta$。
        learning_rate: Adam 学习率。
        steps: 全批梯度步数。
        loss_type: 逐对损失，`rlhf_toy.losses.dpo.DPO_LOSS_TYPES` 之一；默认 `"sigmoid"` 即 DPO。
            一个字符串（TRL 1.16.0 的 `loss_type` 是列表，可配合 `loss_weights` 组合多个损失）。
        label_smoothing: 标签翻转概率 $\\epsilon$（`sigmoid` 时即 cDPO，`robust` 时是鲁棒 DPO 的 $\\epsilon$）。
        simpo_gamma: SimPO 的目标奖励间隔 $\\gamma$，只用于 `loss_type="simpo"`。
    """

    beta: float = 0.1
    learning_rate: float = 0.5
    steps: int = 200
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0
    simpo_gamma: float = 0.5


def sequence_logps(policy: Policy, prompts: Tensor, completions: Tensor, mask: Tensor | None = None) -> Tensor:
    """整条回答的对数概率：逐 token 对数概率在掩码内求和（TRL `DPOTrainer` 的做法）。

    Args:
        policy: 策略。
        prompts: 提示词，第 0 维长 `B`。
        completions: 回答，形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`；`None` 表示全部是真实 token。

    Returns:
        形状 `(B,)`。
    """
    logps = policy.logps(prompts, completions)
    return logps.sum(-1) if mask is None else (logps * mask).sum(-1)


# --8<-- [start:train_dpo]
def train_dpo(
    policy: Policy,
    pairs: tuple[Tensor, Tensor, Tensor],
    config: DPOConfig,
    ref_policy: Policy | None = None,
    evaluate: Callable | None = None,
) -> list[dict[str, float]]:
    """用 DPO 训练 `policy`，返回每一步的指标字典（键名同 TRL 日志）。

    Args:
        policy: 实现 `logps` 的策略（会被原地更新）。
        pairs: `(prompts, chosen, rejected)`，如 `BanditTask.preference_pairs()` 的返回值。
        config: 超参数。
        ref_policy: 参考模型；`None` 时取训练开始时 `policy` 的冻结副本。
        evaluate: 可选，`evaluate(policy) -> dict`，每步更新后调用，结果并入该步指标。

    Returns:
        长度为 `config.steps` 的列表；每项含 `step`、`loss`、`rewards/chosen`、`rewards/rejected`、
        `rewards/margins`、`rewards/accuracies` 以及 `evaluate` 返回的键。
    """
    ref_policy = policy.frozen_copy() if ref_policy is None else ref_policy
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
    prompts, chosen, rejected = pairs
    ref_chosen = ref_rejected = None  # simpo 不用参考模型
    if config.loss_type != "simpo":
        with torch.no_grad():  # 参考模型的对数概率只算一次
            ref_chosen = sequence_logps(ref_policy, prompts, chosen)
            ref_rejected = sequence_logps(ref_policy, prompts, rejected)
    lengths = {}  # 只有按长度归一化的 loss_type 用得到；没有掩码，每条回答都是 T 个 token
    if config.loss_type in LENGTH_NORMALIZED_LOSS_TYPES:
        lengths = {
            "chosen_lengths": torch.full(chosen.shape[:1], float(chosen.shape[1])),
            "rejected_lengths": torch.full(rejected.shape[:1], float(rejected.shape[1])),
        }
    history = []
    for step in range(1, config.steps + 1):
        loss, metrics = dpo_loss(
            sequence_logps(policy, prompts, chosen),
            sequence_logps(policy, prompts, rejected),
            ref_chosen,
            ref_rejected,
            beta=config.beta,
            loss_type=config.loss_type,
            label_smoothing=config.label_smoothing,
            simpo_gamma=config.simpo_gamma,
            **lengths,
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record = {"step": step, "loss": loss.item(), **metrics}
        history.append({**record, **(evaluate(policy) if evaluate else {})})
    return history


# --8<-- [end:train_dpo]
