r"""RLHF-PPO 训练循环（TRL v1.12 `PPOTrainer` 的结构，CleanRL 的写法；TRL 1.13 起删除了 PPO）。

每一步：采样 → 奖励模型打分 → 逐 token 奖励（KL 惩罚 + 分数放在最后一个 token）→ GAE 与白化 →
在这批样本上做 `num_ppo_epochs` 轮、每轮 `num_mini_batches` 个小批的截断更新（策略与价值模型一起）。
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from rlhf_toy.estimators.advantages import gae_advantages, whiten
from rlhf_toy.estimators.rewards import kl_penalized_rewards
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.losses.ppo import entropy_bonus, explained_variance, ppo_policy_loss, ppo_value_loss
from rlhf_toy.policies import Policy
from rlhf_toy.tasks import Task

# --8<-- [end:imports]


@dataclass
class PPOConfig:
    """PPO 的超参数；名字与默认值尽量同 TRL v1.12 的 `PPOConfig`（`ent_coef` 是 TRL 没有的）。

    Attributes:
        num_generations: 每个提示词采样的回答数（TRL PPO 每个提示词采 1 个；这里多采几个让批大一点）。
        kl_coef: 逐 token KL 惩罚的系数 $\\beta$（TRL 默认 0.05）。
        kl_estimator: 奖励里的 KL 估计量，`"k1"`（默认）或 `"k3"`。
        gamma: 折扣 $\\gamma$。
        lam: GAE 的 $\\lambda$。
        cliprange: 策略比率的截断范围 $\\epsilon$。
        cliprange_value: 价值的截断范围 $\\epsilon_V$；`None` 表示不截断。
        vf_coef: 价值损失的系数 $c_V$。
        ent_coef: 熵奖励的系数 $c_H$（0 表示不加，同 TRL）。
        num_ppo_epochs: 每批样本上的轮数。
        num_mini_batches: 每轮切成几个小批（TRL 默认 1，这里默认 2）。
        whiten_advantages: 是否白化优势（TRL 总是白化）。
        learning_rate: Adam 学习率（策略与价值模型共用一个优化器，同 TRL）。
        steps: 采样—更新的轮数。
    """

    num_generations: int = 4
    kl_coef: float = 0.05
    kl_estimator: str = "k1"
    gamma: float = 1.0
    lam: float = 0.95
    cliprange: float = 0.2
    cliprange_value: float | None = 0.2
    vf_coef: float = 0.1
    ent_coef: float = 0.0
    num_ppo_epochs: int = 4
    num_mini_batches: int = 2
    whiten_advantages: bool = True
    learning_rate: float = 0.05
    steps: int = 100


# --8<-- [start:train_ppo]
def train_ppo(
    policy: Policy,
    value_model: nn.Module,
    task: Task,
    config: PPOConfig,
    reward_model: object | None = None,
    ref_policy: Policy | None = None,
    evaluate: Callable | None = None,
) -> list[dict[str, float]]:
    """用 PPO 训练 `policy` 与 `value_model`，返回每一步的指标字典（键名尽量同 TRL v1.12 `PPOTrainer` 的日志）。

    Args:
        policy: 实现 `sample` / `logps` / `entropy` 的策略（会被原地更新）。
        value_model: 有 `values(prompts, completions) -> (B, T)` 的价值模型（会被原地更新）。
        task: 提供 `prompts()` 的任务；`reward_model` 为 `None` 时也用它的 `reward` 打分。
        config: 超参数。
        reward_model: 有 `reward(prompts, completions) -> (B,)` 的奖励模型（学到的代理奖励）；
            `None` 表示直接用任务的真实奖励。
        ref_policy: 参考模型；`None` 时取训练开始时 `policy` 的冻结副本。
        evaluate: 可选，`evaluate(policy) -> dict`，每步更新后调用，结果并入该步指标。

    Returns:
        长度为 `config.steps` 的列表；每项含 `step`、`objective/scores`（奖励模型分数的批平均）、
        `objective/kl`（每条回答逐 token KL 之和的批平均）、`objective/non_score_reward`、
        `objective/rlhf_reward`、`val/explained_variance`，以及各小批平均的 `loss/policy_avg`、
        `loss/value_avg`、`policy/clipfrac_avg`、`policy/approxkl_k1`、`policy/approxkl_k3`、
        `val/clipfrac_avg`、`policy/entropy_avg`，再加 `evaluate` 返回的键。`val/explained_variance`、
        `policy/approxkl_k1`、`policy/approxkl_k3` 是本书自己的键（TRL 只记 `policy/approxkl_avg`，即 $k_2$；
        verl 记 `actor/ppo_kl` 与 `critic/vf_explained_var`）。小批指标是各次更新**之前**的值的平均。

    Raises:
        ValueError: `num_ppo_epochs` 或 `num_mini_batches` 小于 1（其余坏输入由各损失函数报告）。
    """
    if config.num_ppo_epochs < 1 or config.num_mini_batches < 1:
        raise ValueError(
            f"num_ppo_epochs 与 num_mini_batches 应 ≥ 1，实际是 {config.num_ppo_epochs}、{config.num_mini_batches}"
        )
    ref_policy = policy.frozen_copy() if ref_policy is None else ref_policy
    scorer = task if reward_model is None else reward_model
    params = list(policy.parameters()) + list(value_model.parameters())
    optimizer = torch.optim.Adam(params, lr=config.learning_rate, fused=True)
    G = config.num_generations
    history = []
    for step in range(1, config.steps + 1):
        # 1. 采样，并在这批样本上算好所有“旧”量：旧策略、参考模型、旧价值、奖励模型分数
        prompts = task.prompts()
        completions, mask = policy.sample(prompts, G)
        group_prompts = prompts.repeat_interleave(G, dim=0)
        with torch.no_grad():
            old_logps = policy.logps(group_prompts, completions)
            ref_logps = ref_policy.logps(group_prompts, completions)
            old_values = value_model.values(group_prompts, completions)
            scores = scorer.reward(group_prompts, completions)
        # 2. 逐 token 奖励：每个 token 扣 β·KL，分数加在最后一个真实 token 上
        rewards, kl = kl_penalized_rewards(scores, old_logps, ref_logps, mask, config.kl_coef, config.kl_estimator)
        # 3. GAE 给出优势与回报；优势在整批上白化
        advantages, returns = gae_advantages(rewards, old_values, mask, config.gamma, config.lam)
        if config.whiten_advantages:
            advantages = whiten(advantages, mask)
        # 4. 多轮、小批的截断更新
        stats = []
        for _ in range(config.num_ppo_epochs):
            for idx in torch.randperm(len(completions)).chunk(config.num_mini_batches):
                mb_prompts, mb_completions, mb_mask = group_prompts[idx], completions[idx], mask[idx]
                logps = policy.logps(mb_prompts, mb_completions)
                values = value_model.values(mb_prompts, mb_completions)
                entropy = policy.entropy(mb_prompts, mb_completions)
                pg_loss, pg_stats = ppo_policy_loss(logps, old_logps[idx], advantages[idx], mb_mask, config.cliprange)
                vf_loss, vf_stats = ppo_value_loss(
                    values, old_values[idx], returns[idx], mb_mask, config.cliprange_value
                )
                loss = pg_loss + config.vf_coef * vf_loss + entropy_bonus(entropy, mb_mask, config.ent_coef)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                stats.append(
                    {
                        "loss/policy_avg": pg_loss.item(),
                        "loss/value_avg": vf_loss.item(),
                        "policy/entropy_avg": masked_mean(entropy.detach(), mb_mask).item(),
                        **pg_stats,
                        **vf_stats,
                    }
                )
        kl_sum = kl.sum(1).mean().item()
        record = {
            "step": step,
            "objective/scores": scores.mean().item(),
            "objective/kl": kl_sum,
            "objective/non_score_reward": -config.kl_coef * kl_sum,
            "objective/rlhf_reward": scores.mean().item() - config.kl_coef * kl_sum,
            "val/explained_variance": explained_variance(old_values, returns, mask),
            **{key: sum(s[key] for s in stats) / len(stats) for key in stats[0]},
        }
        history.append({**record, **(evaluate(policy) if evaluate else {})})
    return history


# --8<-- [end:train_ppo]
