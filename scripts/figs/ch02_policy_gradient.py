"""第 2 章（policy-gradient.md）：单批梯度估计在真实梯度周围的散布。"""

from __future__ import annotations

from pathlib import Path

import torch

from figs.base import Figure, bandit, panels, save


def policy_gradient_estimates(path: Path) -> None:
    """单批梯度估计 ĝ 在真实梯度 g 周围的散布：无基线与 RLOO，奖励加 0 与加 1。"""
    from rlhf_toy import reinforce_loss
    from rlhf_toy.studies.gradient_variance import expected_reward
    from rlhf_toy.train.reinforce import reinforce_advantages

    task, policy = bandit()
    (g,) = torch.autograd.grad(-expected_reward(policy, task), policy.logits)
    g = g.flatten()
    k, n_batches = 4, 300
    prompts = task.prompts()
    group_prompts = prompts.repeat_interleave(k)

    def estimates(baseline: str, offset: float) -> torch.Tensor:
        out = []
        for _ in range(n_batches):
            completions, mask = policy.sample(prompts, k)
            rewards = task.reward(group_prompts, completions) + offset
            advantages = reinforce_advantages(rewards, k, baseline)
            loss, _ = reinforce_loss(policy.logps(group_prompts, completions), advantages, mask)
            (grad,) = torch.autograd.grad(loss, policy.logits)
            out.append(grad.flatten())
        return torch.stack(out)

    torch.manual_seed(1)
    runs = {(b, o): estimates(b, o) for o in (0.0, 1.0) for b in ("none", "rloo")}
    u = g / g.norm()
    resid = runs[("none", 1.0)] - runs[("none", 1.0)] @ u[:, None] * u  # 与 g 正交的部分
    v = torch.linalg.svd(resid - resid.mean(0), full_matrices=False).Vh[0]  # 它散得最开的方向
    fig, axes = panels(2, 2.4, sharex=True, sharey=True)
    names = {"none": "无基线", "rloo": "RLOO"}
    colors = {"none": "#9e9e9e", "rloo": "#d95f02"}
    for ax, offset in zip(axes, (0.0, 1.0), strict=True):
        for baseline in ("none", "rloo"):
            est = runs[(baseline, offset)] / g.norm()
            ax.scatter(est @ u, est @ v, s=6, alpha=0.55, lw=0, color=colors[baseline], label=names[baseline])
        ax.plot([1.0], [0.0], marker="*", ms=12, color="black", ls="none", label="真实梯度 g")
        ax.set_title(f"每个奖励加 {offset:g}（真实梯度不变）", loc="left")
        ax.set_ylabel("与 g 垂直的分量 / |g|")
    axes[1].set_xlabel("沿 g 方向的分量 / |g|（无偏时平均为 1）")
    legend = axes[0].legend(loc="lower right", ncol=3, handletextpad=0.2)
    for handle in legend.legend_handles[:2]:
        handle.set_sizes([30])
    save(axes[0].figure, path)


FIGURES = [
    Figure("policy-gradient-estimates", policy_gradient_estimates, "policy-gradient.md"),
]
