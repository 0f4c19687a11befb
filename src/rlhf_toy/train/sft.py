r"""监督微调（SFT）：在正确答案上做 token 级交叉熵，作为强化学习之前的“热启动”。

损失是回答 token（含 EOS）上负对数概率的平均，$\mathcal L_{\text{SFT}} = -\frac{\sum_{i,t} m_{i,t}\log\pi_\theta(y_{i,t})}{\sum_{i,t} m_{i,t}}$，
与 TRL `SFTTrainer` 只在回答上计算损失（`completion_only_loss=True`）时相同。
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlhf_toy.losses.aggregate import masked_mean

if TYPE_CHECKING:
    from rlhf_toy.tasks.addition import AdditionTask

# --8<-- [end:imports]


@dataclass
class SFTConfig:
    """SFT 的超参数（名字同 TRL `SFTConfig`）。

    Attributes:
        learning_rate: AdamW 学习率。
        steps: 梯度步数。
        batch_size: 每步的题数（TRL `per_device_train_batch_size`）。
        weight_decay: AdamW 权重衰减。
    """

    learning_rate: float = 3e-3
    steps: int = 300
    batch_size: int = 64
    weight_decay: float = 0.0


# --8<-- [start:train_sft]
def train_sft(
    policy: torch.nn.Module,
    task: AdditionTask,
    config: SFTConfig,
    evaluate: Callable | None = None,
    eval_every: int = 0,
    optimizer: torch.optim.Optimizer | None = None,
) -> list[dict[str, float]]:
    """用监督数据（正确答案）训练 `policy`，返回指标历史。

    Args:
        policy: 有 `logps(prompts, completions, temperature=...)` 的策略（会被原地更新）。
        task: 有 `sft_batch(batch_size) -> (prompts, completions, mask)` 的任务。
        config: 超参数。
        evaluate: 可选，`evaluate(policy) -> dict`，每 `eval_every` 步及最后一步调用。
        eval_every: 评估间隔；0 表示只在最后一步评估。
        optimizer: 可选，沿用已有的优化器（分段调用时保留 AdamW 的状态）；`None` 时新建 AdamW。

    Returns:
        每步一项 `{"step", "loss"}`，评估步另含 `evaluate` 返回的键。
    """
    if optimizer is None:
        optimizer = torch.optim.AdamW(
            policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay, fused=True
        )
    history = []
    for step in range(1, config.steps + 1):
        prompts, completions, mask = task.sft_batch(config.batch_size)
        logps = policy.logps(prompts, completions, temperature=1.0)  # 交叉熵总是在温度 1 下计算
        loss = -masked_mean(logps, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record = {"step": step, "loss": loss.item()}
        if evaluate is not None and (step == config.steps or (eval_every and step % eval_every == 0)):
            record.update(evaluate(policy))
        history.append(record)
    return history


# --8<-- [end:train_sft]
