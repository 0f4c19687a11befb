"""第 6 章（续二）（ratio-shaping.md）：GRPO 家族各个损失的梯度系数随比率 w 的变化。

每条曲线都由 autograd 对本书的损失函数求导得到，不是手写的公式：一批 n 个单 token 的回答（B = n，T = 1），
第 j 个的比率是 w_j（log π_old = 0，log π_θ = log w_j），优势都是 A；系数 ψ(w) 定义为
梯度 ∂L/∂log π_θ = −ψ(w)·A/n（n 抵消汇总时的平均），同策略的 GRPO 在 w = 1 处 ψ = 1。
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from figs.base import GREY, Figure, panels, save


def coefficient(loss_fn, w: torch.Tensor, advantage: float) -> torch.Tensor:
    """ψ(w)：`loss_fn(logps, old_logps, advantages, mask)` 对每个单 token 回答的 log π_θ 求导，除以 −A/n。"""
    logps = w.log().reshape(-1, 1).clone().requires_grad_(True)
    old = torch.zeros_like(logps)
    advantages = torch.full((len(w),), advantage, dtype=w.dtype)
    loss = loss_fn(logps, old, advantages, torch.ones_like(logps))
    (grad,) = torch.autograd.grad(loss, logps)
    return -grad[:, 0] * len(w) / advantage


def losses() -> dict[str, tuple]:
    """名字 → (损失函数, 颜色, 线型, 哪个面板)；面板 0 是硬边界的，面板 1 是软的。默认参数取 TRL / verl 的默认。"""
    from rlhf_toy.losses.clipped_is_weight import clipped_is_weight_loss
    from rlhf_toy.losses.clipped_is_weight_verl import cispo_loss_verl
    from rlhf_toy.losses.divergence_mask import dppo_loss
    from rlhf_toy.losses.gamma_weight import gamma_weight_loss
    from rlhf_toy.losses.geometric_mean_ratio import geometric_mean_ratio_loss
    from rlhf_toy.losses.group_pg import gpg_loss
    from rlhf_toy.losses.grpo import grpo_loss
    from rlhf_toy.losses.log_ratio_penalty import dro_loss
    from rlhf_toy.losses.soft_gate import soft_gate_loss

    return {
        "GRPO（截断 0.8–1.2）": (
            lambda lp, old, a, m: grpo_loss(lp, old, None, a, m, beta=0.0)[0],
            GREY,
            ":",
            (0, 1),
        ),
        "CISPO（TRL，ε_max = 5）": (
            lambda lp, old, a, m: clipped_is_weight_loss(lp, old, None, a, m, epsilon_high=5.0)[0],
            "#1f77b4",
            "-",
            (0,),
        ),
        "CISPO（verl，[0.8, 1.2]）": (
            lambda lp, old, a, m: cispo_loss_verl(lp, old, a, m)[0],
            "#17becf",
            "--",
            (0,),
        ),
        "GMPO（TRL，e^±0.4）": (
            lambda lp, old, a, m: geometric_mean_ratio_loss(lp, old, None, a, m)[0],
            "#9467bd",
            "-.",
            (0,),
        ),
        "DPPO-TV（p_old = 0.5，C = 3）": (
            lambda lp, old, a, m: dppo_loss(lp + math.log(0.5), old + math.log(0.5), a, m, clip_ratio_c=3.0)[0],
            "#8c564b",
            "-",
            (0,),
        ),
        "SAPO（τ = 1.0 / 1.05）": (
            lambda lp, old, a, m: soft_gate_loss(lp, old, None, a, m)[0],
            "#d62728",
            "-",
            (1,),
        ),
        "VESPO（k, λ = 2, 3 / 3, 2）": (
            lambda lp, old, a, m: gamma_weight_loss(lp, old, None, a, m)[0],
            "#ff7f0e",
            "--",
            (1,),
        ),
        "DRO（β = 1）": (
            lambda lp, old, a, m: dro_loss(lp, old, a, m, beta=1.0)[0],
            "#2ca02c",
            "-.",
            (1,),
        ),
        "GPG（无比率）": (
            lambda lp, old, a, m: gpg_loss(lp, a, m)[0],
            "#000000",
            (0, (1, 2)),
            (1,),
        ),
    }


def ratio_shaping_weights(path: Path) -> None:
    """四个面板：硬边界的损失（A = +1、A = −1）与软的损失（A = +1、A = −1）的 ψ(w)，对数横轴。"""
    w = torch.logspace(math.log10(0.2), math.log10(8.0), 481, dtype=torch.float64)
    fig, axes = panels(4, 1.95, sharex=True)
    for row, (group, advantage) in enumerate(((0, 1.0), (0, -1.0), (1, 1.0), (1, -1.0))):
        ax = axes[row]
        for name, (fn, color, ls, groups) in losses().items():
            if group not in groups:
                continue
            x = w[w <= 2.0] if name.startswith("DPPO") else w  # p_old = 0.5：p = 0.5 w ≤ 1
            ax.plot(x, coefficient(fn, x, advantage), color=color, ls=ls, lw=1.4, label=name)
        ax.axvline(1.0, color=GREY, lw=0.6)
        ax.axhline(0.0, color=GREY, lw=0.6)
        kind = "硬边界" if group == 0 else "软的"
        ax.set_title(f"{kind}，A = {advantage:+g}", loc="left")
        ax.set_ylabel("系数 ψ(w)")
        ax.set_ylim(-1.3, 5.6)
    axes[0].legend(loc="upper left", fontsize=7.5)
    axes[2].legend(loc="upper left", fontsize=7.5)
    axes[-1].set_xscale("log")
    ticks = [0.2, 0.5, 0.8, 1.0, 1.2, 2.0, 3.0, 5.0, 8.0]
    axes[-1].set_xticks(ticks, [f"{t:g}" for t in ticks])
    axes[-1].minorticks_off()
    axes[-1].set_xlabel("重要性采样比率 w = π_θ / π_old（对数刻度）")
    save(fig, path)


FIGURES = [Figure("ratio-shaping-weights", ratio_shaping_weights, "ratio-shaping.md")]
