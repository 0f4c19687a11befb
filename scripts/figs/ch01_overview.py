"""第 1 章（overview.md）：RLHF 的流程图，一个提示词上 π_ref 与闭式最优解 π*。"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from figs.base import WIDTH, Figure, bandit, save


def overview_pipeline(path: Path) -> None:
    """SFT → 奖励模型 → RL 的流程图，DPO 从 SFT 直接到策略。"""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(WIDTH, 2.5), layout="constrained")
    ax.set(xlim=(0, 10.2), ylim=(0.2, 5.3))
    ax.axis("off")
    boxes = {
        "sft": (0.1, 2.5, "SFT\n模仿示范", "#dbe7f5"),
        "rm": (2.7, 2.5, "奖励模型\n学偏好打分", "#fbe3cc"),
        "rl": (5.3, 2.5, "RL\nPPO / GRPO", "#d9efd9"),
        "pi": (7.9, 2.5, "策略 $\\pi_\\theta$\n对齐后", "#ececec"),
    }
    w, h = 2.0, 1.5
    for x, y, text, color in boxes.values():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05,rounding_size=0.2", fc=color, ec="#444"))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9.5, linespacing=1.4)
    arrow = {"arrowstyle": "-|>", "color": "#444", "lw": 1.3, "mutation_scale": 12}
    for a, b in (("sft", "rm"), ("rm", "rl"), ("rl", "pi")):
        ax.annotate("", xy=(boxes[b][0], 3.25), xytext=(boxes[a][0] + w, 3.25), arrowprops=arrow)
    # 参考模型：SFT 模型的冻结副本，拴住 RL
    ax.annotate(
        "",
        xy=(boxes["rl"][0] + w / 2, 4.0),
        xytext=(boxes["sft"][0] + w / 2, 4.0),
        arrowprops={**arrow, "ls": "--", "connectionstyle": "arc3,rad=-0.25"},
    )
    ax.text(3.4, 5.0, "冻结副本 = 参考模型 $\\pi_{\\mathrm{ref}}$（KL 惩罚的锚点）", ha="center", fontsize=9)
    # DPO：不训练奖励模型、不采样
    ax.annotate(
        "",
        xy=(boxes["pi"][0] + w / 2, 2.5),
        xytext=(boxes["sft"][0] + w / 2, 2.5),
        arrowprops={**arrow, "color": "#b0413e", "connectionstyle": "arc3,rad=0.22"},
    )
    ax.text(5.0, 0.75, "DPO：直接在偏好对上训练（不要奖励模型，不采样）", ha="center", fontsize=9, color="#b0413e")
    save(fig, path)


def overview_optimum(path: Path) -> None:
    """一个提示词上的 π_ref 与几个 β 下的闭式最优解 π* ∝ π_ref·exp(r/β)。"""
    import matplotlib.pyplot as plt

    from rlhf_toy.studies.kl_estimators import reverse_kl_optimum

    task, policy = bandit()
    ref_logps = F.log_softmax(policy.frozen_copy().logits[0], -1).double()  # 提示词 0
    rewards = F.one_hot(task.correct[0], 8).double()
    series = [("$\\pi_{\\mathrm{ref}}$", ref_logps.exp())]
    series += [(f"$\\pi^*$，β = {b:g}", reverse_kl_optimum(ref_logps, rewards, b).exp()) for b in (1.0, 0.5, 0.2)]
    fig, ax = plt.subplots(figsize=(WIDTH, 2.7), layout="constrained")
    width = 0.2
    colors = ["#999999", "#9ecae1", "#4292c6", "#08519c"]
    for i, ((label, probs), color) in enumerate(zip(series, colors, strict=True)):
        ax.bar(torch.arange(8) + (i - 1.5) * width, probs.tolist(), width, label=label, color=color)
    c = task.correct[0].item()
    ax.set_xticks(range(8), [f"{y}{' ✓' if y == c else ''}" for y in range(8)])
    ax.set(xlabel="回答 y（✓ 是正确回答，奖励 1；其余为 0）", ylabel="概率", ylim=(0, 1.0))
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper left", ncol=2)
    save(fig, path)


FIGURES = [
    Figure("overview-pipeline", overview_pipeline, "overview.md"),
    Figure("overview-optimum", overview_optimum, "overview.md"),
]
