r"""GRPO 训练循环：采样一组回答 → 组内相对优势 → 在同一批上做 `num_iterations` 步截断更新。"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlhf_toy.estimators.advantages import group_advantages
from rlhf_toy.estimators.dynamic_sampling import dynamic_sampling_mask
from rlhf_toy.losses.grpo import grpo_loss
from rlhf_toy.policies import Policy
from rlhf_toy.tasks import Task

# --8<-- [end:imports]


@dataclass
class GRPOConfig:
    """GRPO 的超参数；除 `steps`、`dynamic_sampling`、`log_clip_sides` 外，名字与 TRL `GRPOConfig` 相同。默认值是种子演示的取值。

    Attributes:
        num_generations: 每个提示词采样的回答数 $G$。
        epsilon: 截断的下侧幅度 $\\epsilon$（下界 $1-\\epsilon$）。
        epsilon_high: 上侧幅度（上界 $1+\\epsilon_{high}$）；`None` 表示等于 `epsilon`。
        beta: KL 系数。
        learning_rate: Adam 学习率。查表策略直接优化 logits，所以可以很大。
        steps: 采样—更新的轮数。
        num_iterations: 每批样本上的优化步数（DeepSeekMath 的 $\\mu$）；旧策略对数概率在这批内冻结。为 1 时不另算旧策略，
            用 `logps.detach()`（同 TRL），比率恒为 1，`clip_ratio` 恒为 0。
        scale_rewards: 优势的缩放方式，见 `group_advantages`。
        loss_type: 损失汇总方式，见 `aggregate_loss`。
        max_completion_length: `dr_grpo` 的常数分母 $L$（TRL `max_completion_length`）；`None` 表示取本批回答的宽度 `T`。
        importance_sampling_level: `"token"` 或 `"sequence"`（GSPO），见 `grpo_loss`。
        dynamic_sampling: `True` 时按 DAPO 在算损失之前丢掉奖励全相同的组（见 `dynamic_sampling_mask`；
            不重新采样补齐；优势仍在整批上算，`scale_rewards="batch"` 的标准差含被丢的组），
            并记录 `frac_reward_zero_std`（被丢掉的组的比例；与 TRL 的同名指标在 `scale_rewards="group"`/`"none"`
            时含义相同，但 TRL 用 `isclose(std, 0)` 判断、每步都记录）与 `effective_batch_size`（进入损失的回答数）。
            一组也不剩的步不更新，`loss`、`clip_ratio` 记为 0，`beta > 0` 时 `kl` 也记为 0（不是策略的 KL）。
        log_clip_sides: `True` 时另记 `clip_ratio/low_mean` 与 `clip_ratio/high_mean`，见 `grpo_loss`。
    """

    num_generations: int = 8
    epsilon: float = 0.2
    epsilon_high: float | None = None
    beta: float = 0.04
    learning_rate: float = 0.5
    steps: int = 60
    num_iterations: int = 2
    scale_rewards: str = "group"
    loss_type: str = "grpo"
    max_completion_length: int | None = None
    importance_sampling_level: str = "token"
    dynamic_sampling: bool = False
    log_clip_sides: bool = False


# --8<-- [start:train_grpo]
def train_grpo(
    policy: Policy,
    task: Task,
    config: GRPOConfig,
    ref_policy: Policy | None = None,
    evaluate: Callable | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    eval_every: int = 1,
) -> list[dict[str, float]]:
    """用 GRPO 训练 `policy`，返回每一步的指标字典（`kl`、`reward`、`frac_reward_zero_std` 与 TRL 同名；`clip_ratio` 对应 TRL 的 `clip_ratio/region_mean`）。

    Args:
        policy: 实现 `sample` / `logps` 的策略（会被原地更新）。
        task: 提供 `prompts()` 与 `reward(prompts, completions)` 的任务。
        config: 超参数。
        ref_policy: 参考模型；`None` 时取训练开始时 `policy` 的冻结副本。
        evaluate: 可选，`evaluate(policy) -> dict`，每步更新后调用，结果并入该步指标。
        optimizer: 可选，沿用已有的优化器（分几段调用本函数时保留 Adam 的状态）；`None` 时新建 Adam。
        eval_every: 每隔几步调用一次 `evaluate`（最后一步总会调用）；默认 1 即每步。

    Returns:
        长度为 `config.steps` 的列表；每项含 `step`、`loss`、`reward`（本批平均奖励）、
        `kl`、`clip_ratio` 以及 `evaluate` 返回的键（另见 `GRPOConfig` 中 `dynamic_sampling`、`log_clip_sides` 加的键）。
    """
    # 参考模型只在 beta > 0 时用到；这里为了简单总复制一份。大模型上 beta = 0 时不要建它，它多占一整份权重
    ref_policy = policy.frozen_copy() if ref_policy is None else ref_policy
    if optimizer is None:
        optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
    G = config.num_generations
    history = []
    for step in range(1, config.steps + 1):
        # 1. 采样：每个提示词 G 个回答，组内相邻
        prompts = task.prompts()
        completions, mask = policy.sample(prompts, G)
        group_prompts = prompts.repeat_interleave(G, dim=0)
        # 2. 打分并计算组内相对优势（不需要价值模型）
        rewards = task.reward(group_prompts, completions)
        advantages = group_advantages(rewards, G, config.scale_rewards)
        logged = {"reward": rewards.mean().item()}  # 整批（丢组之前）的平均奖励
        if config.dynamic_sampling:  # DAPO：丢掉奖励全相同（优势全为 0）的组，不重新采样补齐
            keep = dynamic_sampling_mask(rewards, G).repeat_interleave(G)
            group_prompts, completions, mask, advantages = (
                x[keep] for x in (group_prompts, completions, mask, advantages)
            )
            logged |= {"frac_reward_zero_std": 1 - keep.float().mean().item(), "effective_batch_size": len(advantages)}
        with torch.no_grad():  # 旧策略与参考模型的对数概率：这一批内固定不变
            # 每批只更新一次时，旧策略就是更新前的当前策略：省掉这次前向，old_logps=None 让 grpo_loss
            # 用 logps.detach()（同 TRL）
            old_logps = policy.logps(group_prompts, completions) if config.num_iterations > 1 else None
            ref_logps = ref_policy.logps(group_prompts, completions) if config.beta > 0 else None
        # 3. 在同一批样本上做 num_iterations 步截断更新（动态采样丢光了所有组时不更新）
        loss, metrics = torch.zeros(()), {"clip_ratio": 0.0} | ({"kl": 0.0} if config.beta > 0 else {})
        for _ in range(config.num_iterations if len(advantages) > 0 else 0):
            logps = policy.logps(group_prompts, completions)
            loss, metrics = grpo_loss(
                logps,
                old_logps,
                ref_logps,
                advantages,
                mask,
                epsilon=config.epsilon,
                epsilon_high=config.epsilon_high,
                beta=config.beta,
                loss_type=config.loss_type,
                max_completion_length=config.max_completion_length,
                importance_sampling_level=config.importance_sampling_level,
                log_clip_sides=config.log_clip_sides,
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        record = {"step": step, "loss": loss.item(), **logged, **metrics}
        due = evaluate is not None and (step % eval_every == 0 or step == config.steps)
        history.append({**record, **(evaluate(policy) if due else {})})
    return history


# --8<-- [end:train_grpo]
