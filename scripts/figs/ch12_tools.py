"""第 12 章（工具部分）的两张图：一条工具回答的 token 条带（谁写的、进不进损失），遮与不遮工具输出的训练曲线。

    .venv/bin/python scripts/figures.py offpolicy-tools    # 重画 docs/figures/offpolicy-tools-*.svg

数据都读缓存 docs/data/tools.json（`scripts/run_offpolicy.py tools`）。
"""

from __future__ import annotations

import json
from pathlib import Path

from figs.base import ROOT, WIDTH, Figure, panels, save

CACHE = ROOT / "docs" / "data" / "tools.json"
POLICY, TOOL = "#dbe7f5", "#fde0c5"
COLORS = {"masked": "#1f77b4", "unmasked": "#d95f02", "shuffled": "#7570b3"}
LABELS = {"masked": "遮住工具输出", "unmasked": "不遮（反例）", "shuffled": "不遮，工具 token 用打乱的优势（对照）"}


def _results() -> dict:
    return json.loads(CACHE.read_text(encoding="utf-8"))["results"]


def tools_strip(path: Path) -> None:
    """缓存里第一条调用了工具的回答：每个 token 谁写的（策略 / 环境），以及两种设置下的损失掩码。"""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    example = next(e for e in _results()["examples"] if "<call>" in e["tokens"])
    tokens, tool_mask = example["tokens"], example["tool_mask"]
    short = {"<call>": "call", "<res>": "res", "</res>": "/res", "<eos>": "eos"}
    rows = [("tool_mask", tool_mask), ("损失掩码（遮）", tool_mask), ("损失掩码（不遮）", [1] * len(tokens))]
    n = len(tokens)
    fig, ax = plt.subplots(figsize=(WIDTH, 2.0), layout="constrained")
    ax.set(xlim=(-3.6, n + 0.05), ylim=(len(rows) + 1.7, -0.35))
    ax.axis("off")
    ax.text(-0.1, 0.5, f"{example['prompt']}", ha="right", va="center", fontsize=8.5)
    for t, (tok, m) in enumerate(zip(tokens, tool_mask, strict=True)):
        ax.add_patch(Rectangle((t + 0.04, 0.06), 0.92, 0.88, fc=POLICY if m else TOOL, ec="#999999", lw=0.6))
        ax.text(t + 0.5, 0.5, short.get(tok, tok), ha="center", va="center", fontsize=7 if tok in short else 8.5)
    for i, (label, values) in enumerate(rows, start=1):
        ax.text(-0.1, i + 0.5, label, ha="right", va="center", fontsize=8)
        for t, v in enumerate(values):
            if not v:  # 只给不进损失的格子画底纹
                ax.add_patch(
                    Rectangle((t + 0.04, i + 0.06), 0.92, 0.88, fc="#eeeeee", ec="#bbbbbb", lw=0.5, hatch="///")
                )
            ax.text(t + 0.5, i + 0.5, str(v), ha="center", va="center", fontsize=8)
    ax.text(-3.55, len(rows) + 1.45, "浅蓝：策略采样的 token；浅橙：环境插入的工具输出；斜线格：不进损失", fontsize=7.8)
    save(fig, path)


def _mean_curve(runs: list[list[dict]], key: str) -> tuple[list[int], list[float]]:
    steps = [row["step"] for row in runs[0] if key in row]
    by_step = [[next(r[key] for r in run if r["step"] == s) for run in runs] for s in steps]
    return steps, [sum(v) / len(v) for v in by_step]


def tools_training(path: Path) -> None:
    """三种设置的训练曲线（三个采样种子的平均）。上：留出集贪心正确率（实线）与训练批的调用率（虚线）；
    下：策略给工具输出 token 的平均对数概率。"""
    from matplotlib.ticker import MaxNLocator

    results = _results()
    start = results["warm_start"]
    fig, axes = panels(2, 2.0, sharex=True)
    for name, runs in results["runs"].items():
        steps, values = _mean_curve(runs, "accuracy")
        axes[0].plot(
            [0, *steps], [start["accuracy"], *values], color=COLORS[name], marker="o", ms=2.5, label=LABELS[name]
        )
        axes[0].plot(*_mean_curve(runs, "call_rate"), color=COLORS[name], lw=0.8, ls="--")
        axes[1].plot(*_mean_curve(runs, "tool_logp"), color=COLORS[name], lw=1.0)
    axes[0].set(ylabel="正确率 / 调用率", ylim=(-0.02, 1.02))
    axes[0].legend(loc="lower right", fontsize=6.5)
    axes[1].set(xlabel="强化学习步数", ylabel="工具输出的 log π")
    for ax in axes:
        ax.yaxis.set_major_locator(MaxNLocator(5))
    save(fig, path)


FIGURES = [
    Figure("offpolicy-tools-strip", tools_strip, "offpolicy.md", cache="docs/data/tools.json"),
    Figure("offpolicy-tools-training", tools_training, "offpolicy.md", cache="docs/data/tools.json"),
]
