"""第 12 章（异策略部分）的两张图：偏差随 k 与 C 的变化（精确计算），学习曲线随 k 的变化（读缓存）。

.venv/bin/python scripts/figures.py offpolicy-offpolicy    # 重画 docs/figures/offpolicy-offpolicy-*.svg
"""

from __future__ import annotations

import json
from pathlib import Path

from figs.base import ROOT, Figure, panels, save

CACHE = ROOT / "docs" / "data" / "offpolicy.json"
COLORS = {"none": "#d95f02", "tis": "#1f77b4", "mis": "#7570b3", "is": "#777777"}
LABELS = {"none": "不修正", "tis": "TIS（C = 3）", "mis": "MIS（C = 3）", "is": "完整重要性采样"}


def offpolicy_bias(path: Path) -> None:
    """上：相对偏差随采样器落后的步数 k；下：k = 16 时 TIS / MIS 的偏差与单样本方差随 C。"""
    from rlhf_toy.demos.offpolicy import bias_vs_cap, bias_vs_staleness

    by_k, by_cap = bias_vs_staleness(), bias_vs_cap()
    fig, axes = panels(2, 2.1)
    for c in ("none", "tis", "mis", "is"):
        axes[0].plot(by_k["staleness"], by_k[c], color=COLORS[c], label=LABELS[c])
    axes[0].set(xlabel="采样器落后的步数 k", ylabel="相对偏差", xscale="symlog")
    axes[0].set_xticks(by_k["staleness"], [str(k) for k in by_k["staleness"]])
    axes[0].legend(loc="upper left", fontsize=7)
    caps = by_cap["cap"]
    for c in ("tis", "mis"):
        axes[1].plot(caps, by_cap[c], color=COLORS[c], label=f"{c.upper()} 偏差")
        axes[1].plot(caps, by_cap[f"{c}_variance"], ls=":", color=COLORS[c], label=f"{c.upper()} 方差")
    axes[1].set(xlabel="上界 C（k = 16）", ylabel="相对偏差 / 方差", xscale="log")
    axes[1].legend(loc="center left", fontsize=7, ncol=2)
    save(fig, path)


def offpolicy_staleness(path: Path) -> None:
    """上：查表策略的精确学习曲线（k = 0、4、16，不修正与 TIS）；下：极小 Transformer 的留出集正确率（缓存）。"""
    results = json.loads(CACHE.read_text(encoding="utf-8"))["results"]
    fig, axes = panels(2, 2.2)
    curves = results["bandit_curves"]
    steps = range(0, len(curves["k=0/none"]), 2)  # 每隔一步画一个点（图小一些）
    axes[0].plot(steps, curves["k=0/none"][::2], color="black", lw=1.2, label="k = 0")
    for k, ls in ((4, "--"), (16, "-")):
        for c in ("none", "tis"):
            axes[0].plot(steps, curves[f"k={k}/{c}"][::2], color=COLORS[c], ls=ls, lw=1.0, label=f"k = {k}，{c}")
    axes[0].set(xlabel="步数（精确期望更新，η = 2）", ylabel="期望奖励", ylim=(0, 1.02))
    axes[0].legend(loc="lower right", fontsize=6, ncol=2)
    styles = {"none": COLORS["none"], "sequence_mask": COLORS["mis"], "token_truncate": COLORS["tis"]}
    for name, history in results["transformer"].items():
        if "temperature" in name or "clip" in name:
            continue
        k, mode = name.split("/")[:2]
        rows = [r for r in history if "accuracy" in r]
        color = "black" if k == "k=0" else styles[mode]
        ls = "-" if k in ("k=0", "k=16") else "--"
        axes[1].plot([r["step"] for r in rows], [r["accuracy"] for r in rows], color=color, ls=ls, lw=1.0, label=name)
    axes[1].set(xlabel="GRPO 步数（极小 Transformer，种子 0）", ylabel="留出集正确率")
    axes[1].legend(loc="lower left", fontsize=6, ncol=2)
    save(fig, path)


FIGURES = [
    Figure("offpolicy-offpolicy-bias", offpolicy_bias, "offpolicy.md"),
    Figure("offpolicy-offpolicy-staleness", offpolicy_staleness, "offpolicy.md", cache="docs/data/offpolicy.json"),
]
