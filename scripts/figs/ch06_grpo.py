"""第 6 章（grpo.md 与续篇 grpo-variants.md）：num_iterations = 1 与 2，四种 loss_type 的推力随长度。"""

from __future__ import annotations

from pathlib import Path

import torch

from figs.base import Figure, bandit, panels, save


def grpo_iterations(path: Path) -> None:
    """GRPO 默认配置跑 40 步，num_iterations = 1 与 2：正确概率、记录的 k3 与精确 KL、clip_ratio。"""
    from rlhf_toy import GRPOConfig, train_grpo
    from rlhf_toy.policies.table import exact_kl

    runs = {}
    for mu in (1, 2):
        task, policy = bandit()
        ref = policy.frozen_copy()

        def evaluate(p, task=task, ref=ref):
            return {**task.evaluate(p), "exact_kl": exact_kl(p, ref)}

        runs[mu] = train_grpo(policy, task, GRPOConfig(steps=40, num_iterations=mu), ref_policy=ref, evaluate=evaluate)
    fig, axes = panels(3, 1.85, sharex=True)
    colors = {1: "#1f77b4", 2: "#d95f02"}
    for mu, h in runs.items():
        steps = [r["step"] for r in h]
        label = f"num_iterations = {mu}"
        axes[0].plot(steps, [r["success_prob"] for r in h], color=colors[mu], label=label)
        axes[1].plot(steps, [r["exact_kl"] for r in h], color=colors[mu], label="精确 KL" if mu == 1 else None)
        axes[1].plot(
            steps,
            [r["kl"] for r in h],
            color=colors[mu],
            ls=":",
            lw=1.3,
            label="日志里的 kl（k3）" if mu == 1 else None,
        )
        axes[2].plot(steps, [r["clip_ratio"] for r in h], color=colors[mu], label=label)
    axes[0].set(ylabel="正确回答的概率", ylim=(0, 1.02))
    axes[1].set(ylabel="KL(π_θ‖π_ref)", ylim=(0, 5))
    axes[2].set(ylabel="clip_ratio", xlabel="训练步数（G = 8，β = 0.04，Adam 学习率 0.5）", xlim=(1, 40))
    axes[0].legend(loc="lower right")
    axes[1].legend(loc="upper right", ncol=2)
    save(axes[0].figure, path)


def grpo_variants_length(path: Path) -> None:
    """四种 loss_type 给一条答对回答的梯度，随它的长度变化（组内另三条长 6、2、6，奖励 [1, 1, 0, 0]）。"""
    from rlhf_toy import group_advantages, grpo_loss

    advantages = group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), num_generations=4)
    lengths = list(range(1, 9))
    styles = {
        "grpo": ("#1f77b4", "-"),
        "bnpo": ("#2ca02c", "-"),
        "dapo": ("#d95f02", ":"),
        "dr_grpo": ("#9467bd", "--"),
    }
    per_token = {k: [] for k in styles}
    per_answer = {k: [] for k in styles}
    for n in lengths:
        mask = (torch.arange(8) < torch.tensor([n, 6, 2, 6])[:, None]).float()
        for loss_type in styles:
            logps = torch.full((4, 8), -1.0, requires_grad=True)
            loss, _ = grpo_loss(
                logps, None, None, advantages, mask, beta=0.0, loss_type=loss_type, max_completion_length=8
            )
            (grad,) = torch.autograd.grad(loss, logps)
            per_token[loss_type].append(-grad[0, 0].item())  # 梯度下降抬高这个 token 的推力
            per_answer[loss_type].append(-grad[0].sum().item())
    fig, axes = panels(2, 2.2, sharex=True)
    for loss_type, (color, ls) in styles.items():
        axes[0].plot(lengths, per_token[loss_type], color=color, ls=ls, marker="o", ms=3.5, label=loss_type)
        axes[1].plot(lengths, per_answer[loss_type], color=color, ls=ls, marker="o", ms=3.5, label=loss_type)
    axes[0].set(ylabel="每个 token 的推力", ylim=(0, None))
    axes[1].set(ylabel="整条回答的推力", xlabel="这条答对回答的长度 |y|（L = 8）", ylim=(0, None))
    axes[0].legend(loc="upper right", ncol=2)
    save(axes[0].figure, path)


FIGURES = [
    Figure("grpo-iterations", grpo_iterations, "grpo.md"),
    Figure("grpo-variants-length", grpo_variants_length, "grpo-variants.md"),
]
