"""第 3 章（reward-model.md）：Bradley–Terry 的 σ(Δ) 与梯度权重，学到的奖励表。"""

from __future__ import annotations

from pathlib import Path

import torch

from figs.base import GREY, WIDTH, Figure, save


def reward_model_sigmoid(path: Path) -> None:
    """Bradley–Terry：偏好概率 σ(Δ) 与梯度权重 σ(−Δ)（由 bradley_terry_loss 与 autograd 得到）。"""
    import matplotlib.pyplot as plt

    from rlhf_toy import bradley_terry_loss

    deltas = torch.linspace(-6, 6, 241)
    probs, weights = [], []
    for d in deltas:
        chosen = d.clone().reshape(1).requires_grad_(True)
        loss, _ = bradley_terry_loss(chosen, torch.zeros(1))
        loss.backward()
        probs.append(torch.exp(-loss).item())  # 损失 = −log σ(Δ)
        weights.append(-chosen.grad.item())  # −∂L/∂r_w = σ(−Δ)
    fig, ax = plt.subplots(figsize=(WIDTH, 2.6), layout="constrained")
    ax.plot(deltas, probs, color="#1f77b4", label="偏好概率 σ(Δ)")
    ax.plot(deltas, weights, color="#d95f02", ls="--", label="梯度权重 σ(−Δ)")
    ax.axvline(0, color=GREY, lw=0.8)
    ax.set(xlabel="间隔 Δ = r(y_w) − r(y_l)", ylim=(-0.02, 1.02))
    ax.legend(loc="center left")
    ax.annotate(
        "排得越对，推力越小，\n但永远不为 0",
        xy=(4.0, 0.02),
        xytext=(1.9, 0.38),
        fontsize=9,
        arrowprops={"arrowstyle": "->", "color": GREY},
    )
    save(fig, path)


def reward_model_table(path: Path) -> None:
    """标签噪声 0.2 下学到的 20 × 8 奖励表，方框标出正确回答。"""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from rlhf_toy import BanditTask
    from rlhf_toy.demos.rlhf import build_reward_model

    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    reward_model, _, _ = build_reward_model(task, label_noise=0.2)
    table = reward_model.table.detach()
    lim = table.abs().max().item()
    fig, ax = plt.subplots(figsize=(WIDTH, 2.9), layout="constrained")
    image = ax.imshow(table.T, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    for x, y in enumerate(task.correct.tolist()):
        ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, ec="black", lw=1.4))
    ax.set_xticks(range(0, 20, 2))
    ax.set_yticks(range(8))
    ax.set(xlabel="提示词 x（方框：正确回答）", ylabel="回答 y")
    ax.grid(False)
    fig.colorbar(image, ax=ax, label="奖励 r(x, y)", shrink=0.9, pad=0.02)
    save(fig, path)


FIGURES = [
    Figure("reward-model-sigmoid", reward_model_sigmoid, "reward-model.md"),
    Figure("reward-model-table", reward_model_table, "reward-model.md"),
]
