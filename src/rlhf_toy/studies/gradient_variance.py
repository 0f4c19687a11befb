r"""量一量策略梯度估计的偏差与方差：查表任务上真实梯度可以精确算出，所以能直接比较。

真实目标 $J(\theta) = \frac1N\sum_x\sum_y \pi_\theta(y\mid x)\,r(x, y)$ 对查表策略是有限和，
autograd 给出精确的 $\nabla_\theta J$；每一批样本的 REINFORCE 损失给出一个随机估计 $\hat g$。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy.losses.pg import reinforce_loss
from rlhf_toy.policies import TablePolicy
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train.reinforce import reinforce_advantages

# --8<-- [end:imports]


def expected_reward(policy: TablePolicy, task: BanditTask) -> Tensor:
    r"""精确的期望奖励 $J(\theta) = \frac1N\sum_x\sum_y\pi_\theta(y\mid x)\,r(x, y)$，带梯度。

    Args:
        policy: 查表策略（有 `probs()`）。
        task: 查表任务（有 `reward`、`n_answers`）。

    Returns:
        0 维张量。
    """
    prompts = task.prompts()
    n_prompts, n_answers = prompts.shape[0], task.n_answers
    answers = torch.arange(n_answers).repeat(n_prompts).unsqueeze(1)  # (N·V, 1)
    rewards = task.reward(prompts.repeat_interleave(n_answers), answers).view(n_prompts, n_answers)
    return (policy.probs()[prompts] * rewards).sum(-1).mean()


# --8<-- [start:policy_gradient_stats]
def policy_gradient_stats(
    policy: TablePolicy,
    task: BanditTask,
    baseline: str,
    num_generations: int,
    n_batches: int = 200,
    reward_offset: float = 0.0,
) -> dict[str, float]:
    r"""在当前策略处抽 `n_batches` 批样本，比较 REINFORCE 梯度估计 $\hat g$ 与精确梯度 $g$。

    $\hat g$ 是 `reinforce_loss` 对 logits 的梯度，$g = -\nabla_\theta J$（损失 = −目标）。

    Args:
        policy: 查表策略（不会被修改）。
        task: 查表任务。
        baseline: `"none"`、`"mean"` 或 `"rloo"`（见 `reinforce_advantages`）。
        num_generations: 每个提示词的回答数 $G$。
        n_batches: 独立的批数（消耗全局随机数生成器）。
        reward_offset: 给每个奖励加上的常数 $c$。$\sum_y\pi(y\mid x)\,c$ 与 $\theta$ 无关，
            所以真实梯度不变；变的只是估计的方差（有基线时连方差也不变）。

    Returns:
        `{"grad_norm": ‖g‖, "scale": ⟨E ĝ, g⟩/‖g‖², "bias": ‖E ĝ − g‖, "variance": E‖ĝ − E ĝ‖²}`：
        期望用 `n_batches` 批的平均估计。`scale` 是平均估计在真实梯度方向上的系数，无偏时约为 1
        （它的蒙特卡洛误差远小于 `bias`，后者含约 $\sqrt{\text{variance}/n_{\text{batches}}}$ 的抽样误差）；
        `variance` 是协方差矩阵的迹（各分量方差之和）。

    Raises:
        ValueError: `n_batches < 2`，或 `baseline` / `num_generations` 不合法。
    """
    if n_batches < 2:
        raise ValueError(f"n_batches 应 ≥ 2，实际是 {n_batches}")
    (true_grad,) = torch.autograd.grad(-expected_reward(policy, task), policy.logits)
    prompts = task.prompts()
    group_prompts = prompts.repeat_interleave(num_generations)
    estimates = []
    for _ in range(n_batches):
        completions, mask = policy.sample(prompts, num_generations)
        rewards = task.reward(group_prompts, completions) + reward_offset
        advantages = reinforce_advantages(rewards, num_generations, baseline)
        loss, _ = reinforce_loss(policy.logps(group_prompts, completions), advantages, mask)
        (grad,) = torch.autograd.grad(loss, policy.logits)
        estimates.append(grad.flatten())
    estimates = torch.stack(estimates)  # (n_batches, n_params)
    mean = estimates.mean(0)
    return {
        "grad_norm": true_grad.norm().item(),
        "scale": (mean @ true_grad.flatten() / true_grad.norm() ** 2).item(),
        "bias": (mean - true_grad.flatten()).norm().item(),
        "variance": ((estimates - mean) ** 2).sum(1).mean().item(),
    }


# --8<-- [end:policy_gradient_stats]
