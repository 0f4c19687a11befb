r"""异策略 GRPO（第 12 章）：回答由 `staleness` 步之前的策略快照、用可能不同的采样器生成，训练器用 TRL 的权重公式修正。

旧策略的对数概率用当前参数重算，PPO 比率恒为 1，过时全由权重承担：相当于 verl 的解耦模式。

与第 9 章的 `train_grpo` 相比只多了三件事（那个文件一行没改）：

1. 一个快照队列（`state_dict` 的 `deque`），采样用队首，即 $k$ 步之前的参数；
2. 采样器可以是温度 / top-k（`rlhf_toy.rollout.samplers`），采样时记下它给出的对数概率 `sampler_logps`；
3. 训练器**重新算**旧策略的对数概率 `old_logps`（当前参数，不带梯度，同 TRL 的 `old_per_token_logps`），
   用 `importance_weights(old_logps, sampler_logps, mask, mode)` 得到权重，乘在逐 token 损失上（TRL 1.16
   `grpo_trainer.py` 的 `per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]`）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf_toy.estimators.advantages import group_advantages
from rlhf_toy.estimators.importance import IS_MODES, effective_sample_size, importance_metrics, importance_weights
from rlhf_toy.losses.aggregate import aggregate_loss
from rlhf_toy.losses.grpo import clipped_surrogate
from rlhf_toy.policies.transformer import TinyTransformerPolicy, completion_mask
from rlhf_toy.rollout.samplers import temperature_logps, top_k_logps
from rlhf_toy.tasks.addition import AdditionTask

# --8<-- [end:imports]


@dataclass
class OffPolicyGRPOConfig:
    """异策略 GRPO 的超参数；`vllm_importance_sampling_*` 的含义同 TRL 1.16 的同名字段。

    Attributes:
        num_generations: 每个提示词的回答数 $G$。
        learning_rate: AdamW 学习率。
        steps: 采样—更新的轮数（每轮一次优化步，`num_iterations = 1`）。
        staleness: 采样用的参数落后几个优化步 $k$（0 即同策略）。
        sampler_temperature: 采样器的温度（训练器总用策略自己的温度 1.0）。
        sampler_top_k: 采样器的 top-k；`None` 表示不过滤。
        vllm_importance_sampling_correction: 是否乘重要性权重。
        vllm_importance_sampling_mode: 见 `IS_MODES`。
        vllm_importance_sampling_clip_max: 上界 $C_{max}$。
        vllm_importance_sampling_clip_min: 下界 $C_{min}$。
        loss_type: 见 `aggregate_loss`（第 9 章用 `"dapo"`）。
    """

    num_generations: int = 8
    learning_rate: float = 5e-4
    steps: int = 60
    staleness: int = 0
    sampler_temperature: float = 1.0
    sampler_top_k: int | None = None
    vllm_importance_sampling_correction: bool = True
    vllm_importance_sampling_mode: str = "sequence_mask"
    vllm_importance_sampling_clip_max: float | None = 3.0
    vllm_importance_sampling_clip_min: float | None = None
    loss_type: str = "dapo"


# --8<-- [start:sample_with]
@torch.no_grad()
def sample_with(
    policy: TinyTransformerPolicy, prompts: Tensor, num_generations: int, temperature: float, top_k: int | None
) -> tuple[Tensor, Tensor, Tensor]:
    r"""用采样器 $\mu$（温度，可选 top-k）自回归生成，返回回答、掩码与采样时的 $\log\mu$（同 vLLM 的 `logprobs`）。

    为了可读，每步对整段前缀重新做一次前向（回答只有几个 token），不用 KV 缓存。

    Args:
        policy: 采样用的模型（例如 $k$ 步之前的快照）。
        prompts: 提示词，形状 `(P, Lp)`。
        num_generations: 每个提示词的回答数 $G$（组内相邻）。
        temperature: 采样温度 $\tau$。
        top_k: top-k；`None` 表示不过滤。

    Returns:
        `(completions, mask, sampler_logps)`，形状均为 `(P * G, T)`；EOS 之后填 `pad_id`，那里的 `sampler_logps` 为 0。
    """
    prompts = prompts.repeat_interleave(num_generations, dim=0)
    B = prompts.shape[0]
    completions = torch.empty(B, 0, dtype=torch.long)
    logps, done = [], torch.zeros(B, dtype=torch.bool)
    for _ in range(policy.max_completion_length):
        placeholder = torch.full((B, 1), policy.pad_id, dtype=torch.long)
        logits = policy.completion_logits(prompts, torch.cat([completions, placeholder], dim=1))[:, -1]
        if top_k is None:
            log_mu = temperature_logps(logits, temperature)
        else:
            log_mu = top_k_logps(logits, top_k, temperature)
        token = torch.multinomial(log_mu.exp(), 1).squeeze(1).masked_fill(done, policy.pad_id)
        logps.append(log_mu.gather(1, token[:, None]).squeeze(1).masked_fill(done, 0.0))
        completions = torch.cat([completions, token[:, None]], dim=1)
        done = done | (token == policy.eos_id)
        if done.all():
            break
    return completions, completion_mask(completions, policy.eos_id), torch.stack(logps, dim=1)


# --8<-- [end:sample_with]


# --8<-- [start:train_offpolicy_grpo]
def train_offpolicy_grpo(
    policy: TinyTransformerPolicy,
    task: AdditionTask,
    config: OffPolicyGRPOConfig,
    evaluate: Callable | None = None,
    eval_every: int = 10,
) -> list[dict[str, float]]:
    """异策略 GRPO，返回每步的指标（`reward` 与 TRL 的 `sampling/*` 指标，另有 `ess`；评估步并入 `evaluate` 的键）。

    `ess/<模式>` 是同一批样本上按四种模式（同样的界）算出的权重的 ESS，只记录、不影响训练。

    Args:
        policy: 要训练的极小 Transformer（原地更新）。
        task: 加法任务（`prompts()`、`reward()`）。
        config: 超参数。
        evaluate: 可选，`evaluate(policy) -> dict`，每 `eval_every` 步（及第 0 步、最后一步）调用。
        eval_every: 评估间隔。

    Returns:
        长 `config.steps + 1` 的列表，第 0 项只有 `step` 与评估结果。
    """
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate, fused=True)
    sampler = copy.deepcopy(policy).requires_grad_(False)
    snapshots = deque([copy.deepcopy(policy.state_dict())] * (config.staleness + 1), maxlen=config.staleness + 1)
    G = config.num_generations
    history = [{"step": 0, **(evaluate(policy) if evaluate else {})}]
    for step in range(1, config.steps + 1):
        # 1. 采样：k 步之前的快照 + 采样器，记下采样时的 log μ
        sampler.load_state_dict(snapshots[0])
        prompts = task.prompts()
        completions, mask, sampler_logps = sample_with(
            sampler, prompts, G, config.sampler_temperature, config.sampler_top_k
        )
        group_prompts = prompts.repeat_interleave(G, dim=0)
        rewards = task.reward(group_prompts, completions)
        advantages = group_advantages(rewards, G, "group")
        # 2. 训练器重新算 old_logps（当前参数），权重 ρ = π_old / μ 是单独的乘子
        with torch.no_grad():
            old_logps = policy.logps(group_prompts, completions)
        logged = {"reward": rewards.mean().item()}
        weights = None
        if config.vllm_importance_sampling_correction:
            weights = importance_weights(
                old_logps,
                sampler_logps,
                mask,
                config.vllm_importance_sampling_mode,
                config.vllm_importance_sampling_clip_max,
                config.vllm_importance_sampling_clip_min,
            )
            logged |= importance_metrics(old_logps, sampler_logps, mask, weights)
            logged["ess"] = effective_sample_size(weights, mask)
        bounds = (config.vllm_importance_sampling_clip_max, config.vllm_importance_sampling_clip_min)
        for mode in IS_MODES:  # 同一批样本上四种模式的 ESS（对照用）
            logged[f"ess/{mode}"] = effective_sample_size(
                importance_weights(old_logps, sampler_logps, mask, mode, *bounds), mask
            )
        # 3. 一步更新：num_iterations = 1，π_θ / π_old 的值为 1，截断不起作用
        logps = policy.logps(group_prompts, completions)
        per_token_loss, _ = clipped_surrogate(logps, old_logps, advantages[:, None])
        if weights is not None:
            per_token_loss = per_token_loss * weights
        loss = aggregate_loss(per_token_loss, mask, config.loss_type)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        snapshots.append(copy.deepcopy(policy.state_dict()))
        due = evaluate is not None and (step % eval_every == 0 or step == config.steps)
        history.append({"step": step, "loss": loss.item(), **logged, **(evaluate(policy) if due else {})})
    return history


# --8<-- [end:train_offpolicy_grpo]
