r"""带工具调用的 GRPO：多轮生成 → 组内相对优势 → 只在策略自己写的 token 上求损失（或者，作为反例，连工具输出一起）。

轨迹的概率是策略 token 与环境 token 的乘积，$p_\theta(\tau) = \prod_{t:\,c_t=1}\pi_\theta(y_t\mid h_t)\prod_{t:\,c_t=0}P_{env}(y_t\mid h_t)$，
$c_t$ 是 `tool_mask`。环境不含 $\theta$，所以 $\nabla_\theta\log p_\theta(\tau) = \sum_t c_t\nabla_\theta\log\pi_\theta(y_t\mid h_t)$：
策略梯度只对策略采样的 token 求和。`mask_tool_outputs=False` 把工具输出也算进去，梯度里多出
$\sum_t (1-c_t)\,\hat A\,\nabla_\theta\log\pi_\theta(y_t\mid h_t)$ 这一项：它把策略对环境输出的“预测”当成了动作。

为了把“多了工具 token 的梯度”与“分母变了”分开，损失默认用 `loss_type="dr_grpo"`（分母是常数 $B\cdot L$）：
两种掩码的损失分母相同，差别只在工具 token 的那一项。`"dapo"`（TRL 1.16 的默认）的分母是损失掩码里的 token 数。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rlhf_toy._checks import check_choice, check_mask, check_ndim
from rlhf_toy.estimators.advantages import group_advantages
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.losses.grpo import grpo_loss
from rlhf_toy.policies.transformer import TinyTransformerPolicy
from rlhf_toy.rollout.multi_turn import tool_rollout
from rlhf_toy.tasks.calculator import CalculatorTask

# --8<-- [end:imports]

LOSS_TYPES = ("dr_grpo", "dapo")


# --8<-- [start:tool_loss_mask]
def tool_loss_mask(mask: torch.Tensor, tool_mask: torch.Tensor, mask_tool_outputs: bool = True) -> torch.Tensor:
    """损失掩码：`mask * tool_mask`（只留策略写的 token，同 TRL 1.16 与 verl 0.9.1），或 `mask` 本身（反例）。

    Args:
        mask: 回答掩码，形状 `(B, T)`，0/1 浮点。
        tool_mask: 形状 `(B, T)`，环境插入的 token 为 0，其余为 1。
        mask_tool_outputs: `True` 时去掉工具输出。

    Returns:
        形状 `(B, T)` 的 0/1 浮点掩码。

    Raises:
        ValueError: 形状不是 `(B, T)`、两者形状不同或含 0/1 以外的值。

    Examples:
        >>> tool_loss_mask(torch.tensor([[1.0, 1.0, 1.0, 0.0]]), torch.tensor([[1.0, 0.0, 1.0, 1.0]]))
        tensor([[1., 0., 1., 0.]])
    """
    check_ndim("mask", mask, 2, "(B, T)")
    check_mask("mask", mask, mask.shape, like="mask")
    check_mask("tool_mask", tool_mask, mask.shape, like="mask")
    return mask * tool_mask if mask_tool_outputs else mask.clone()


# --8<-- [end:tool_loss_mask]


@dataclass
class ToolGRPOConfig:
    """带工具的 GRPO 的超参数（除 `steps`、`mask_tool_outputs`、`seed` 外名字同 TRL `GRPOConfig`）。

    Attributes:
        num_generations: 每个提示词的回答数 $G$。
        beta: KL 系数（对参考模型的 $k_3$）。
        learning_rate: Adam 学习率。
        steps: 采样—更新的轮数（每批只更新一次，比率恒为 1）。
        scale_rewards: 见 `group_advantages`。
        loss_type: `"dr_grpo"`（默认，分母为常数 $B\\cdot L$）或 `"dapo"`（分母为损失掩码的 token 数）。
        mask_tool_outputs: `True` 时损失掩码为 `mask * tool_mask`；`False` 时工具输出也进入损失（反例）。
        seed: 采样用的随机种子（`torch.Generator`，不影响全局随机数）。
        shuffle_tool_advantages: 对照实验用：工具 token 那部分损失改用本批优势的一个随机排列（大小分布相同，
            但与这条回答自己的奖励无关）；只在 `mask_tool_outputs=False` 时影响更新。
    """

    num_generations: int = 8
    beta: float = 0.0
    learning_rate: float = 5e-4
    steps: int = 40
    scale_rewards: str = "group"
    loss_type: str = "dr_grpo"
    mask_tool_outputs: bool = True
    seed: int = 0
    shuffle_tool_advantages: bool = False


# --8<-- [start:train_tool_grpo]
def train_tool_grpo(
    policy: TinyTransformerPolicy,
    task: CalculatorTask,
    config: ToolGRPOConfig,
    ref_policy: TinyTransformerPolicy | None = None,
    evaluate: Callable | None = None,
    *,
    eval_every: int = 10,
) -> list[dict[str, float]]:
    r"""用 GRPO 训练会调用工具的 `policy`，返回每步的指标。

    每步的梯度拆成两部分：策略 token 上的 $g_{policy}$ 与工具 token 上的 $g_{tool}$（同一个截断代理损失，
    只是掩码不同；两部分之和就是不遮工具输出时的梯度）。`mask_tool_outputs=True` 时只用 $g_{policy}$ 更新。
    两种设置都记下两部分的范数，便于比较。

    Args:
        policy: 策略（原地更新）。
        task: 提供 `prompts()`、`reward`、`called` 与工具的任务。
        config: 超参数。
        ref_policy: 参考模型；`None` 时取训练开始时 `policy` 的冻结副本（`beta = 0` 时也用来记录 KL）。
        evaluate: 可选，`evaluate(policy) -> dict`，每 `eval_every` 步与最后一步调用。
        eval_every: 评估间隔。

    Returns:
        每步一项：`step`、`loss`、`reward`、`call_rate`（本批调用工具的比例）、`tool_token_share`（回答 token 里
        工具输出的比例）、`tool_logp`（策略给工具输出 token 的平均对数概率）、`entropy`（策略 token 的平均熵）、
        `entropy/tool`（工具 token 位置上的平均熵）、`kl`（策略 token 上 $k_3$ 的平均）、`kl/tool`（工具 token 上
        $k_3$ 的平均）、`kl/tool_exact`（工具 token 位置上精确的 $\mathrm{KL}(\pi_\theta\Vert\pi_{ref})$ 的平均）、
        `grad_norm/policy`、`grad_norm/tool`；评估步另含 `evaluate` 的键。

    Raises:
        ValueError: `loss_type` 不是 `"dr_grpo"` 或 `"dapo"`。
    """
    check_choice("loss_type", config.loss_type, LOSS_TYPES)
    ref_policy = policy.frozen_copy() if ref_policy is None else ref_policy
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
    params = [p for p in policy.parameters() if p.requires_grad]
    generator = torch.Generator().manual_seed(config.seed)
    G, L = config.num_generations, task.max_completion_length
    history = []
    for step in range(1, config.steps + 1):
        # 1. 多轮采样：策略写、环境插入工具输出、策略接着写
        prompts = task.prompts()
        rollout = tool_rollout(policy, prompts, task, G, generator=generator)
        group_prompts, completions = prompts.repeat_interleave(G, dim=0), rollout.completions
        rewards = task.reward(group_prompts, completions)
        advantages = group_advantages(rewards, G, config.scale_rewards)
        # 2. 两个掩码：策略写的 token，与环境写的 token
        policy_mask = tool_loss_mask(rollout.mask, rollout.tool_mask, True)
        tool_tokens = rollout.mask - policy_mask
        loss_mask = tool_loss_mask(rollout.mask, rollout.tool_mask, config.mask_tool_outputs)
        logits = policy.completion_logits(group_prompts, completions) / policy.temperature
        log_probs = F.log_softmax(logits, dim=-1)
        logps = log_probs.gather(-1, completions.unsqueeze(-1)).squeeze(-1) * rollout.mask
        with torch.no_grad():
            ref_log_probs = F.log_softmax(
                ref_policy.completion_logits(group_prompts, completions) / policy.temperature, -1
            )
            ref_logps = ref_log_probs.gather(-1, completions.unsqueeze(-1)).squeeze(-1) * rollout.mask
        # 3. 同一个代理损失分别在两个掩码上求和；分母相同（dr_grpo：B·L；dapo：损失掩码的 token 数）
        scale = len(advantages) * L / loss_mask.sum().clamp(min=1).item() if config.loss_type == "dapo" else 1.0
        shuffled = advantages[torch.randperm(len(advantages), generator=generator)]
        tool_advantages = shuffled if config.shuffle_tool_advantages else advantages
        parts = {}
        for name, m, adv in (("policy", policy_mask, advantages), ("tool", tool_tokens, tool_advantages)):
            part, _ = grpo_loss(
                logps, None, ref_logps if config.beta > 0 else None, adv, m,
                beta=config.beta, loss_type="dr_grpo", max_completion_length=L,
            )  # fmt: skip
            parts[name] = part * scale
        grads = {name: torch.autograd.grad(part, params, retain_graph=True) for name, part in parts.items()}
        used = ("policy",) if config.mask_tool_outputs else ("policy", "tool")
        optimizer.zero_grad()
        for i, p in enumerate(params):
            p.grad = sum(grads[name][i] for name in used)
        optimizer.step()
        # 4. 诊断：工具 token 上的对数概率、熵、KL（k3 估计与精确值）
        with torch.no_grad():
            probs = log_probs.exp()
            entropies = -(probs * log_probs).sum(-1)
            exact_kl = (probs * (log_probs - ref_log_probs)).sum(-1)
            k3 = kl_estimate(logps.detach(), ref_logps, "k3")
            record = {
                "step": step,
                "loss": sum(parts[name] for name in used).item(),
                "reward": rewards.mean().item(),
                "call_rate": task.called(completions).mean().item(),
                "tool_token_share": (tool_tokens.sum() / rollout.mask.sum()).item(),
                "tool_logp": masked_mean(logps.detach(), tool_tokens).item(),
                "entropy": masked_mean(entropies, policy_mask).item(),
                "entropy/tool": masked_mean(entropies, tool_tokens).item(),
                "kl": masked_mean(k3, policy_mask).item(),
                "kl/tool": masked_mean(k3, tool_tokens).item(),
                "kl/tool_exact": masked_mean(exact_kl, tool_tokens).item(),
                **{f"grad_norm/{n}": math.sqrt(sum((g**2).sum() for g in grads[n]).item()) for n in grads},
            }
        if evaluate is not None and (step % eval_every == 0 or step == config.steps):
            record.update(evaluate(policy))
        history.append(record)
    return history


# --8<-- [end:train_tool_grpo]
