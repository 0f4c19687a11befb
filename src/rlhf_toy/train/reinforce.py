r"""REINFORCE 与 RLOO 的训练循环：采样 → 打分 → 减基线 → 一步策略梯度。

三种基线（baseline）共用一个循环，区别只在优势怎么算（`reinforce_advantages`）：

* `"none"`：$\hat A_i = r_i$，即基线 $b = 0$ 的 REINFORCE（Williams 1992 的原式 $(r - b)\nabla\log\pi$ 本身带基线）；
* `"mean"`：$\hat A_i = r_i - \bar r$，减去组内平均（含自己，Dr. GRPO 的优势）；
* `"rloo"`：$\hat A_i = \frac{G}{G-1}(r_i - \bar r)$，留一法基线（RLOO，arXiv 2402.14740）。
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice
from rlhf_toy.estimators.advantages import group_advantages, rloo_advantages
from rlhf_toy.losses.pg import reinforce_loss
from rlhf_toy.policies import Policy
from rlhf_toy.tasks import Task

# --8<-- [end:imports]

BASELINES = ("none", "mean", "rloo")


# --8<-- [start:reinforce_advantages]
def reinforce_advantages(rewards: Tensor, num_generations: int, baseline: str = "rloo") -> Tensor:
    r"""按所选基线计算优势（见本模块说明）。

    Args:
        rewards: 每条回答的奖励，形状 `(B,)`；同一提示词的 `num_generations` 个回答相邻。
        num_generations: 组大小 $G$。
        baseline: `"none"`、`"mean"` 或 `"rloo"`。

    Returns:
        形状 `(B,)` 的优势。

    Raises:
        ValueError: `baseline` 未知，或 `rewards` / `num_generations` 不合法（见 `rloo_advantages`）。
    """
    check_choice("baseline", baseline, BASELINES)
    loo = rloo_advantages(rewards, num_generations)  # 也负责检查输入
    if baseline == "rloo":
        return loo
    if baseline == "mean":
        return group_advantages(rewards, num_generations, scale_rewards="none")
    return rewards.clone()


# --8<-- [end:reinforce_advantages]


@dataclass
class ReinforceConfig:
    r"""REINFORCE 的超参数。

    Attributes:
        num_generations: 每个提示词采样的回答数 $G$（TRL 的 `num_generations`）。
        baseline: `"none"`、`"mean"` 或 `"rloo"`。
        beta: KL 系数 $\beta$：把 $\beta\sum_t(\log\pi_{old} - \log\pi_{ref})$ 从奖励里扣掉（TRL `RLOOTrainer`）。
        learning_rate: Adam 学习率（查表策略直接优化 logits，可以很大）。
        steps: 采样—更新的轮数，每轮一步梯度。
        reward_offset: 给每个奖励加上的常数（只用来演示基线的作用：真实梯度不变，无基线时方差变大）。
    """

    num_generations: int = 4
    baseline: str = "none"
    beta: float = 0.0
    learning_rate: float = 0.1
    steps: int = 100
    reward_offset: float = 0.0


@dataclass
class RLOOConfig(ReinforceConfig):
    """RLOO 的超参数：`ReinforceConfig` 取 `baseline="rloo"`，KL 系数默认同 TRL `RLOOConfig`（0.05）。

    Attributes:
        baseline: 固定为 `"rloo"`。
        beta: KL 系数，默认 0.05。
    """

    baseline: str = "rloo"
    beta: float = 0.05


# --8<-- [start:train_reinforce]
def train_reinforce(
    policy: Policy,
    task: Task,
    config: ReinforceConfig,
    ref_policy: Policy | None = None,
    evaluate: Callable | None = None,
) -> list[dict[str, float]]:
    r"""用 REINFORCE（可选基线）训练 `policy`，返回每一步的指标字典。

    Args:
        policy: 实现 `sample` / `logps` 的策略（会被原地更新）。
        task: 提供 `prompts()` 与 `reward(prompts, completions)` 的任务。
        config: 超参数。
        ref_policy: 参考模型（只在 `config.beta > 0` 时用）；`None` 时取训练开始时 `policy` 的冻结副本。
        evaluate: 可选，`evaluate(policy) -> dict`，每步更新后调用，结果并入该步指标。

    Returns:
        长度为 `config.steps` 的列表；每项含 `step`、`loss`、`reward`（本批平均奖励，含 `reward_offset`）、
        `kl`（每条回答的 $\sum_t(\log\pi_{old} - \log\pi_{ref})$ 的平均，即按序列求和的 $k_1$；TRL `RLOOTrainer`
        记的 `kl` 是按 token 的平均，只在 $T = 1$ 时相同）以及 `evaluate` 返回的键。
    """
    ref_policy = policy.frozen_copy() if ref_policy is None else ref_policy
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
    k = config.num_generations
    history = []
    for step in range(1, config.steps + 1):
        # 1. 采样：每个提示词 k 个回答，组内相邻
        prompts = task.prompts()
        completions, mask = policy.sample(prompts, k)
        group_prompts = prompts.repeat_interleave(k, dim=0)
        # 2. 打分；KL 惩罚按序列求和后从奖励里扣掉（TRL RLOOTrainer 的做法）
        rewards = task.reward(group_prompts, completions) + config.reward_offset
        with torch.no_grad():
            old_logps = policy.logps(group_prompts, completions)
            ref_logps = ref_policy.logps(group_prompts, completions)
        kl = ((old_logps - ref_logps) * mask).sum(-1)
        advantages = reinforce_advantages(rewards - config.beta * kl, k, config.baseline)
        # 3. 一步策略梯度（同策略：样本刚由当前策略采出）
        loss, _ = reinforce_loss(policy.logps(group_prompts, completions), advantages, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record = {"step": step, "loss": loss.item(), "reward": rewards.mean().item(), "kl": kl.mean().item()}
        history.append({**record, **(evaluate(policy) if evaluate else {})})
    return history


# --8<-- [end:train_reinforce]


def train_rloo(
    policy: Policy,
    task: Task,
    config: RLOOConfig,
    ref_policy: Policy | None = None,
    evaluate: Callable | None = None,
) -> list[dict[str, float]]:
    """RLOO：`train_reinforce` 取留一法基线（`config.baseline` 必须是 `"rloo"`）。

    Args:
        policy: 策略（会被原地更新）。
        task: 任务。
        config: 超参数。
        ref_policy: 参考模型；`None` 时取训练开始时 `policy` 的冻结副本。
        evaluate: 可选的评估函数。

    Returns:
        同 `train_reinforce`。

    Raises:
        ValueError: `config.baseline` 不是 `"rloo"`。
    """
    if config.baseline != "rloo":
        raise ValueError(f"RLOO 的 baseline 应是 'rloo'，实际是 {config.baseline!r}")
    return train_reinforce(policy, task, config, ref_policy, evaluate)
