r"""拒绝采样微调（rejection-sampling fine-tuning，RFT；又叫专家迭代；STaR 是它的一个变体）：采样 → 验证器筛出答对的 → 在它们上做 SFT。

每一轮与 GRPO 一样从 `task.prompts()` 抽提示词、每个采 $G$ 个回答，所以“用掉的采样回答数”可以一对一比较；
区别只在更新：GRPO 用组内相对优势给每条回答加权（答错的被压低），RFT 只在奖励达到 `threshold` 的回答上
最小化平均负对数概率（式同 SFT，温度 1），答错的回答直接丢掉。
STaR：Zelikman et al., 2022，[arXiv 2203.14465](https://arxiv.org/abs/2203.14465)；
专家迭代：Anthony et al., 2017，[arXiv 1705.08439](https://arxiv.org/abs/1705.08439)。
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.policies import Policy
from rlhf_toy.tasks import Task

# --8<-- [end:imports]


@dataclass
class RFTConfig:
    r"""拒绝采样微调的超参数。

    Attributes:
        num_generations: 每个提示词采样的回答数 $G$（与 GRPO 相同才能按样本数比较）。
        learning_rate: Adam 学习率。
        steps: 采样—筛选—更新的轮数。
        threshold: 奖励 $\ge$ `threshold` 的回答才留下（0/1 奖励取 1，即“验证通过”）。
    """

    num_generations: int = 8
    learning_rate: float = 5e-4
    steps: int = 100
    threshold: float = 1.0


# --8<-- [start:train_rft]
def train_rft(
    policy: Policy,
    task: Task,
    config: RFTConfig,
    evaluate: Callable | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    eval_every: int = 1,
) -> list[dict[str, float]]:
    """在线拒绝采样微调：每轮采样、只留下验证通过的回答、在它们上做一步 SFT，返回指标历史。

    Args:
        policy: 实现 `sample` / `logps` 的策略（会被原地更新）。
        task: 提供 `prompts()` 与 `reward(prompts, completions)` 的任务。
        config: 超参数。
        evaluate: 可选，`evaluate(policy) -> dict`，每 `eval_every` 步及最后一步调用。
        optimizer: 可选，沿用已有的优化器；`None` 时新建 Adam。
        eval_every: 评估间隔。

    Returns:
        每步一项：`step`、`loss`（留下的回答上的平均负对数概率；一条也没留下时为 0，且不更新）、
        `reward`（本批平均奖励）、`kept`（留下的回答数）与 `evaluate` 返回的键。
    """
    if optimizer is None:
        optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
    history = []
    for step in range(1, config.steps + 1):
        prompts = task.prompts()
        completions, mask = policy.sample(prompts, config.num_generations)
        group_prompts = prompts.repeat_interleave(config.num_generations, dim=0)
        rewards = task.reward(group_prompts, completions)
        keep = rewards >= config.threshold  # 验证器筛选：答错的直接丢掉
        loss = torch.zeros(())
        if keep.any():
            logps = policy.logps(group_prompts[keep], completions[keep], temperature=1.0)
            loss = -masked_mean(logps, mask[keep])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        record = {"step": step, "loss": loss.item(), "reward": rewards.mean().item(), "kept": int(keep.sum())}
        if evaluate is not None and (step % eval_every == 0 or step == config.steps):
            record.update(evaluate(policy))
        history.append(record)
    return history


# --8<-- [end:train_rft]
