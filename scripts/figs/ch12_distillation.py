"""第 12 章蒸馏一节的两张图，数据读自缓存 docs/data/distillation.json（由 scripts/run_offpolicy.py distillation 写）。

.venv/bin/python scripts/figures.py offpolicy-distillation    # 重画 docs/figures/offpolicy-distillation-*.svg
"""

from __future__ import annotations

import json
from pathlib import Path

from figs.base import ROOT, Figure, panels, save

CACHE = ROOT / "docs" / "data" / "distillation.json"


def _results() -> dict:
    return json.loads(CACHE.read_text())["results"]


def modes(path: Path) -> None:
    """双峰教师（柱）与两个拟合的学生：正向 KL 覆盖两峰，反向 KL 停在大峰上。"""
    res = _results()["modes"]
    fig, axes = panels(1, height=2.6, squeeze=False)
    ax = axes[0, 0]
    x = list(range(len(res["teacher"]["probs"])))
    ax.bar(x, res["teacher"]["probs"], color="0.75", width=1.0, label="教师 $\\pi_T$")
    styles = {
        ("forward", 30.0): ("C0", "-", "正向 KL（众数覆盖）"),
        ("reverse", 30.0): ("C3", "--", "反向 KL（众数寻求）"),
    }
    for f in res["fits"]:
        key = (f["direction"], f["init"][0])
        if key in styles:
            color, ls, label = styles[key]
            ax.plot(x, f["probs"], color=color, linestyle=ls, label=label)
    ax.set_xlabel("回答 $x$")
    ax.set_ylabel("概率")
    ax.legend(frameon=False, fontsize=8)
    save(fig, path)


def tokens(path: Path) -> None:
    """正确率（两个种子的平均）对累计采样 token 数：同策略蒸馏（学生 token）、全词表对照、教师样本 SFT（教师 token）。"""
    res = _results()["distill"]
    seeds = list(res)
    fig, axes = panels(2, height=2.0, sharex=True)
    names = {
        "onpolicy": ("C3", "-", "同策略蒸馏（逐 token 优势）"),
        "onpolicy_full": ("C1", "--", "同策略，全词表反向 KL"),
        "sft": ("C0", "-", "教师样本 SFT"),
    }
    for method, (color, ls, label) in names.items():
        runs = [res[s][method] for s in seeds]
        xs = [sum(r[i]["sampled_tokens"] for r in runs) / len(runs) / 1000 for i in range(len(runs[0]))]
        for ax, key in zip(axes, ("accuracy", "train_accuracy"), strict=True):
            ys = [sum(r[i][key] for r in runs) / len(runs) for i in range(len(runs[0]))]
            ax.plot(xs, ys, color=color, linestyle=ls, label=label)
    axes[0].set_ylabel("留出正确率")
    axes[1].set_ylabel("训练题正确率")
    axes[1].set_xlabel("累计采样 token 数（千）")
    axes[1].legend(frameon=False, fontsize=7)
    save(fig, path)


FIGURES = [
    Figure("offpolicy-distillation-modes", modes, "offpolicy.md", cache="docs/data/distillation.json"),
    Figure("offpolicy-distillation-tokens", tokens, "offpolicy.md", cache="docs/data/distillation.json"),
]
