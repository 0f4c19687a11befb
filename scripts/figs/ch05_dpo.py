"""第 5 章（dpo.md 与续篇 dpo-variants.md）：DPO 的损失与梯度权重、概率质量，七种 loss_type，DPO 与 IPO。"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from figs.base import GREY, WIDTH, Figure, bandit, panels, save


def pair_curves(deltas: torch.Tensor, beta: float, loss_type: str, label_smoothing: float = 0.0):
    """一条曲线：逐对损失 ℓ(Δ) 与梯度权重 w = −(1/β)∂ℓ/∂Δ（dpo_pair_losses 与 autograd）。"""
    from rlhf_toy.losses.dpo import dpo_pair_losses

    margins = deltas.clone().requires_grad_(True)
    losses = dpo_pair_losses(margins, beta=beta, loss_type=loss_type, label_smoothing=label_smoothing)
    (grad,) = torch.autograd.grad(losses.sum(), margins)
    return losses.detach(), -grad / beta


def dpo_weight(path: Path) -> None:
    """DPO 的逐对损失 −log σ(βΔ) 与梯度权重 σ(−βΔ)，横轴 βΔ。"""
    import matplotlib.pyplot as plt

    x = torch.linspace(-4, 6, 201, dtype=torch.float64)
    loss, weight = pair_curves(x, 1.0, "sigmoid")  # β = 1：横轴就是 βΔ
    fig, ax = plt.subplots(figsize=(WIDTH, 2.6), layout="constrained")
    ax.plot(x, loss, color="#1f77b4", label="损失 ℓ = −log σ(βΔ)")
    ax.plot(x, weight, color="#d95f02", ls="--", label="梯度权重 σ(−βΔ)")
    ax.axvline(0, color=GREY, lw=0.8)
    ax.plot([0, 0], [weight[80].item(), loss[80].item()], "o", color="black", ms=4)
    ax.text(0.15, 0.72, "起点 Δ = 0：log 2 与 1/2", fontsize=9)
    ax.set(xlabel="βΔ（隐式奖励间隔）", ylim=(-0.05, 3))
    ax.legend(loc="upper right")
    save(fig, path)


def dpo_mass(path: Path) -> None:
    """DPO 训练 50 步：被选、被拒、没出现过的回答的概率质量（第 5 章运行结果的设置）。"""
    import matplotlib.pyplot as plt

    from rlhf_toy import DPOConfig, train_dpo

    task, policy = bandit()
    ref = policy.frozen_copy()
    prompts, chosen, rejected = pairs = task.preference_pairs()
    y_w, y_l = chosen[:, 0], rejected[:, 0]

    def mass(p):
        probs = p.probs().detach()
        return {"p_chosen": probs[prompts, y_w].mean().item(), "p_rejected": probs[prompts, y_l].mean().item()}

    start = mass(policy)
    history = [{"step": 0, **start}] + train_dpo(
        policy, pairs, DPOConfig(beta=0.1, steps=50), ref_policy=ref, evaluate=mass
    )
    steps = [h["step"] for h in history]
    chosen_mass = [h["p_chosen"] for h in history]
    rejected_mass = [h["p_rejected"] for h in history]
    unseen_mass = [1 - a - b for a, b in zip(chosen_mass, rejected_mass, strict=True)]
    fig, ax = plt.subplots(figsize=(WIDTH, 2.6), layout="constrained")
    ax.stackplot(
        steps,
        chosen_mass,
        rejected_mass,
        unseen_mass,
        colors=["#4c9f50", "#d62728", "#bdbdbd"],
        labels=["被选回答 y_w", "被拒回答 y_l", "6 个没出现过的回答"],
        alpha=0.85,
    )
    ax.set(xlabel="训练步数（β = 0.1，Adam 学习率 0.5）", ylabel="平均概率质量", xlim=(0, 50), ylim=(0, 1))
    ax.legend(loc="center right")
    save(fig, path)


def dpo_variants_losses(path: Path) -> None:
    """七种 loss_type 里五条不同的曲线：损失与梯度权重随 Δ 的变化（β = 1、ε = 0.1，同页面的表）。"""
    deltas = torch.linspace(-2, 6, 321, dtype=torch.float64)
    variants = [
        ("sigmoid", "sigmoid", 0.0, "#1f77b4", "-"),
        ("cDPO ε=0.1", "sigmoid", 0.1, "#17becf", "--"),
        ("robust ε=0.1", "robust", 0.1, "#9467bd", "-."),
        ("hinge", "hinge", 0.0, "#d95f02", "-"),
        ("ipo", "ipo", 0.0, "#2ca02c", "-"),
    ]
    fig, axes = panels(2, 2.3, sharex=True)
    for name, loss_type, eps, color, ls in variants:
        loss, weight = pair_curves(deltas, 1.0, loss_type, eps)
        axes[0].plot(deltas, loss, color=color, ls=ls, label=name)
        axes[1].plot(deltas, weight, color=color, ls=ls, label=name)
    axes[0].set(ylabel="逐对损失 ℓ", ylim=(-1, 3.2))
    axes[1].set(ylabel="梯度权重 w", ylim=(-1.2, 1.3), xlabel="间隔 Δ（β = 1）")
    axes[1].axhline(0, color=GREY, lw=0.8)
    axes[0].legend(loc="upper right", ncol=2)
    save(axes[0].figure, path)


def dpo_variants_ipo(path: Path) -> None:
    """DPO 与 IPO 在老虎机上训练 100 步：平均间隔 Δ 与精确的 KL(π_θ‖π_ref)。"""
    from rlhf_toy import DPOConfig, train_dpo
    from rlhf_toy.policies.table import exact_kl

    beta = 0.1
    runs = {}
    for loss_type in ("sigmoid", "ipo"):
        task, policy = bandit()
        ref = policy.frozen_copy()
        prompts, chosen, rejected = pairs = task.preference_pairs()
        y_w, y_l = chosen[:, 0], rejected[:, 0]
        log_ref = F.log_softmax(ref.logits, -1)

        def drift(p, prompts=prompts, y_w=y_w, y_l=y_l, log_ref=log_ref, ref=ref):
            ratio = F.log_softmax(p.logits, -1).detach() - log_ref
            return {"delta": (ratio[prompts, y_w] - ratio[prompts, y_l]).mean().item(), "exact_kl": exact_kl(p, ref)}

        config = DPOConfig(beta=beta, steps=100, loss_type=loss_type)
        runs[loss_type] = train_dpo(policy, pairs, config, ref_policy=ref, evaluate=drift)
    fig, axes = panels(2, 2.2, sharex=True)
    for loss_type, color in (("sigmoid", "#1f77b4"), ("ipo", "#2ca02c")):
        h = runs[loss_type]
        steps = [r["step"] for r in h]
        label = "DPO（sigmoid）" if loss_type == "sigmoid" else "IPO"
        axes[0].plot(steps, [r["delta"] for r in h], color=color, label=label)
        axes[1].plot(steps, [r["exact_kl"] for r in h], color=color, label=label)
    axes[0].axhline(1 / (2 * beta), color=GREY, ls="--", lw=1)
    axes[0].text(100, 1 / (2 * beta) + 1.5, "IPO 的目标间隔 1/(2β) = 5", ha="right", fontsize=9, color=GREY)
    axes[0].set(ylabel="平均间隔 Δ")
    axes[1].set(ylabel="精确 KL(π_θ‖π_ref)", xlabel="训练步数（β = 0.1，Adam 学习率 0.5）", xlim=(0, 100))
    axes[0].legend(loc="upper left")
    save(axes[0].figure, path)


FIGURES = [
    Figure("dpo-weight", dpo_weight, "dpo.md"),
    Figure("dpo-mass", dpo_mass, "dpo.md"),
    Figure("dpo-variants-losses", dpo_variants_losses, "dpo-variants.md"),
    Figure("dpo-variants-ipo", dpo_variants_ipo, "dpo-variants.md"),
]
