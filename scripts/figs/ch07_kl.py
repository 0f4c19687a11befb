"""第 7 章（kl.md）：k1、k2、k3 的偏差与标准差，反向与正向 KL 的最优解。"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from figs.base import GREY, WIDTH, Figure, bandit, panels, save


def kl_estimators(path: Path) -> None:
    """k1、k2、k3 的偏差与标准差（相对真值）随两个分布的距离变化：老虎机第 0 个提示词，精确求和。"""
    from rlhf_toy.studies.kl_estimators import estimator_stats, exact_kl

    task, policy = bandit()
    ref_logps = policy.logits[0].detach().double().log_softmax(-1)
    correct = task.correct[0]
    shifts = torch.linspace(0.1, 10, 100, dtype=torch.float64)
    stats = {name: {"bias": [], "std": []} for name in ("k1", "k2", "k3")}
    for shift in shifts:
        logits = ref_logps.clone()
        logits[correct] += shift
        logps = logits.log_softmax(-1)
        true_kl = exact_kl(logps, ref_logps).item()
        for name, s in estimator_stats(ref_logps - logps, weights=logps.exp()).items():
            stats[name]["bias"].append((s.mean - true_kl) / true_kl)
            stats[name]["std"].append(s.std / true_kl)
    fig, axes = panels(2, 2.2, sharex=True)
    colors = {"k1": "#1f77b4", "k2": "#2ca02c", "k3": "#d95f02"}
    for name, s in stats.items():
        axes[0].plot(shifts, s["std"], color=colors[name], label=name)
        axes[1].plot(shifts, s["bias"], color=colors[name], label=name)
    axes[0].set(yscale="log", ylabel="标准差 / 真值")
    axes[1].set(ylabel="偏差 / 真值", xlabel="正确回答的 logit 抬高量（0.5：接近的一对；8：训练后期）")
    for ax in axes:
        for x in (0.5, 8.0):
            ax.axvline(x, color=GREY, lw=0.8, ls="--")
    axes[0].legend(loc="upper center", ncol=3)
    save(axes[0].figure, path)


def kl_optima(path: Path) -> None:
    """两种最优解给正确回答的概率随 β 变化：π*（反向 KL）与 π†（正向 KL，k3 进损失）。"""
    import matplotlib.pyplot as plt

    from rlhf_toy.studies.kl_estimators import forward_kl_optimum, reverse_kl_optimum

    task, policy = bandit()
    ref_logps = policy.logits[0].detach().double().log_softmax(-1)
    c = task.correct[0]
    rewards = F.one_hot(c, 8).double()
    betas = torch.logspace(-2, 1, 61, dtype=torch.float64).tolist()
    rev = [reverse_kl_optimum(ref_logps, rewards, b).exp()[c].item() for b in betas]
    fwd = [forward_kl_optimum(ref_logps, rewards, b).exp()[c].item() for b in betas]
    fig, ax = plt.subplots(figsize=(WIDTH, 2.7), layout="constrained")
    ax.plot(betas, rev, color="#1f77b4", label="π*：反向 KL（k1 进奖励、修正 k3）")
    ax.plot(betas, fwd, color="#d95f02", ls="--", label="π†：正向 KL（k3 进损失）")
    ax.axhline(ref_logps.exp()[c].item(), color=GREY, ls=":", lw=1.2, label="参考模型")
    ax.set(xscale="log", xlabel="β", ylabel="P(正确回答)", ylim=(0, 1.03))
    ax.legend(loc="lower left")
    save(fig, path)


FIGURES = [
    Figure("kl-estimators", kl_estimators, "kl.md"),
    Figure("kl-optima", kl_optima, "kl.md"),
]
