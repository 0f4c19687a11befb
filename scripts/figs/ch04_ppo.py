"""第 4 章（ppo.md）：截断代理目标 L^CLIP，逐 token 奖励条带（本书与 TRL 的填充设置）。"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from figs.base import GREY, WIDTH, Figure, panels, save


def ppo_clip(path: Path) -> None:
    """截断代理目标 L^CLIP 随比率 w 的变化，A > 0 与 A < 0；灰色区域里 autograd 给出的梯度恰为 0。"""
    from rlhf_toy.losses.grpo import clipped_surrogate

    epsilon = 0.2
    w = torch.linspace(0.5, 1.5, 401, dtype=torch.float64)
    fig, axes = panels(2, 2.2, sharex=True)
    for ax, advantage in zip(axes, (1.0, -1.0), strict=True):
        logps = w.log().reshape(-1, 1).requires_grad_(True)
        per_token_loss, _ = clipped_surrogate(
            logps, torch.zeros_like(logps), torch.full_like(logps, advantage), epsilon
        )
        (grad,) = torch.autograd.grad(per_token_loss.sum(), logps)
        objective = -per_token_loss.detach()[:, 0]  # 损失 = −目标
        zero = (grad[:, 0] == 0).numpy()
        ax.fill_between(w, 0, 1, where=zero, transform=ax.get_xaxis_transform(), color=GREY, alpha=0.25, lw=0)
        ax.plot(w, w * advantage, color=GREY, ls=":", lw=1.2, label="不截断：w·A")
        ax.plot(w, objective, color="#1f77b4" if advantage > 0 else "#d62728", label="$L^{\\mathrm{CLIP}}$")
        for x in (1 - epsilon, 1 + epsilon):
            ax.axvline(x, color=GREY, lw=0.8, ls="--")
        side = "w > 1+ε\n已经涨够了" if advantage > 0 else "w < 1−ε\n已经降够了"
        ax.text(
            1.35 if advantage > 0 else 0.65,
            0.42 if advantage > 0 else 0.5,
            f"梯度为 0\n{side}",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize=9,
        )
        ax.set_title(f"A = {advantage:+g}（{'好' if advantage > 0 else '坏'} token）", loc="left")
        ax.set_ylabel("目标（= −损失）")
        ax.grid(False)
    axes[0].legend(loc="upper left")
    axes[1].legend(loc="upper right")
    axes[1].set_xticks([0.5, 0.8, 1.0, 1.2, 1.5], ["0.5", "1−ε\n0.8", "1", "1+ε\n1.2", "1.5"])
    axes[1].set_xlabel("重要性采样比率 w = π_θ / π_old")
    save(axes[0].figure, path)


def ppo_token_strip(path: Path) -> None:
    """一批补齐到 T = 4 的回答：逐 token 奖励里 −βk_t、分数 s 与掩码的位置；本书 vs TRL 的两种填充设置。"""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from rlhf_toy import kl_penalized_rewards

    # 与第 4 章“用法：T > 1 的逐 token 奖励与 GAE”相同的两条回答
    logps = torch.log(torch.tensor([[0.5, 0.6, 0.9, 0.8], [0.3, 0.7, 0.5, 0.5]]))
    ref_logps = torch.log(torch.tensor([[0.4, 0.6, 0.6, 0.9], [0.3, 0.35, 0.5, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    scores = torch.tensor([1.0, -1.0])
    beta = 0.1
    ours, _ = kl_penalized_rewards(scores, logps, ref_logps, mask, kl_coef=beta)
    kl_only, _ = kl_penalized_rewards(torch.zeros(2), logps, ref_logps, mask, kl_coef=beta)
    # TRL，填充符 ≠ EOS：分数落在 EOS 之后的第一个填充位置（掩码为 0），那里没有 KL 项
    trl_pad = kl_only[1].clone()
    trl_pad[int(mask[1].sum())] += scores[1]
    # TRL，填充符 = EOS：EOS 本身算第一个填充位置，它的对数概率不进损失，分数落在它上面
    eos_mask = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    trl_eos, _ = kl_penalized_rewards(torch.zeros(1), logps[1:], ref_logps[1:], eos_mask, kl_coef=beta)
    trl_eos = trl_eos[0].clone()
    trl_eos[1] += scores[1]
    rows = [
        ("本书：回答 1", ours[0], kl_only[0], mask[0], 3, 3),
        ("本书：回答 2", ours[1], kl_only[1], mask[1], 1, 1),
        ("TRL，填充符 ≠ EOS", trl_pad, kl_only[1], mask[1], 2, 1),
        ("TRL，填充符 = EOS", trl_eos, trl_eos * (1 - F.one_hot(torch.tensor(1), 4)), eos_mask[0], 1, 1),
    ]
    tokens = [
        ["y₁", "y₂", "y₃", "EOS"],
        ["y₁", "EOS", "PAD", "PAD"],
        ["y₁", "EOS", "PAD", "PAD"],
        ["y₁", "EOS", "EOS", "EOS"],
    ]
    fig, ax = plt.subplots(figsize=(WIDTH, 3.3), layout="constrained")
    ax.set(xlim=(-2.35, 4.02), ylim=(len(rows) + 0.05, -0.55))
    ax.axis("off")
    for t in range(4):
        ax.text(t + 0.5, -0.3, f"t = {t}", ha="center", fontsize=9)
    for i, ((label, r, kl_part, m, score_at, _eos), toks) in enumerate(zip(rows, tokens, strict=True)):
        ax.text(-0.1, i + 0.5, label, ha="right", va="center", fontsize=9)
        for t in range(4):
            real = m[t] > 0
            ax.add_patch(
                Rectangle(
                    (t + 0.04, i + 0.06),
                    0.92,
                    0.88,
                    fc="#dbe7f5" if real else "#eeeeee",
                    ec="#d95f02" if t == score_at else "#999999",
                    lw=2.2 if t == score_at else 0.8,
                    hatch=None if real else "///",
                )
            )
            ax.text(t + 0.5, i + 0.27, toks[t], ha="center", va="center", fontsize=9, color="#555555")
            k = kl_part[t].item() + 0.0
            text = f"{r[t].item():+.3f}" if (real or t == score_at) else "0"
            ax.text(
                t + 0.5,
                i + 0.62,
                text,
                ha="center",
                va="center",
                fontsize=9.5,
                weight="bold" if t == score_at else "normal",
            )
            del k
    ax.text(
        -2.3,
        len(rows) - 0.02,
        "格内数字：r_t = −βk_t（+ 分数 s，橙框）；斜线格：掩码为 0，不进策略损失",
        fontsize=8.6,
        va="top",
    )
    save(fig, path)


FIGURES = [
    Figure("ppo-clip", ppo_clip, "ppo.md"),
    Figure("ppo-token-strip", ppo_token_strip, "ppo.md"),
]
