"""第 14 章（续）的两张图：训练奖励与真实正确率（奖励过优化）、DPO 的 logps/chosen（平局对），都读缓存。

.venv/bin/python scripts/figures.py reading-logs-more    # 重画 docs/figures/reading-logs-more-*.svg
"""

from __future__ import annotations

import json
from pathlib import Path

from figs.base import ROOT, Figure, panels, save

CACHE = ROOT / "docs" / "data" / "symptoms_more.json"


def _runs() -> dict:
    return json.loads(CACHE.read_text(encoding="utf-8"))["results"]


def _curve(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    return [r["step"] for r in history], [r[key] for r in history]


def reading_logs_more_hacking(path: Path) -> None:
    """上：训练日志里的 reward（代理奖励与真实奖励两次运行）；下：精确评估的真实正确率。"""
    runs = _runs()
    fig, axes = panels(2, 2.0, sharex=True)
    for name, color, label in (
        ("hacking_proxy", "#d95f02", "优化代理奖励"),
        ("hacking_true", "#1f77b4", "优化真实奖励"),
    ):
        axes[0].plot(*_curve(runs[name], "reward"), color=color, lw=1.0, label=label)
        axes[1].plot(*_curve(runs[name], "success_prob"), color=color, lw=1.2, label=label)
    axes[0].set(ylabel="训练日志的 reward")
    axes[1].set(xlabel="GRPO 步数（β = 0）", ylabel="真实正确率", ylim=(0, 1.02))
    axes[0].legend(loc="upper left", fontsize=7)
    save(fig, path)


def reading_logs_more_dpo(path: Path) -> None:
    """上：logps/chosen（保留与丢掉平局对）；下：rewards/margins 与真实正确率。"""
    runs = _runs()
    fig, axes = panels(2, 2.0, sharex=True)
    for name, color, label in (("dpo_coin_flip", "#d95f02", "保留平局对"), ("dpo_dropped", "#1f77b4", "丢掉平局对")):
        axes[0].plot(*_curve(runs[name], "logps/chosen"), color=color, lw=1.2, label=label)
        axes[1].plot(*_curve(runs[name], "rewards/margins"), color=color, lw=1.0, ls="--", label=f"{label}：间隔")
        axes[1].plot(*_curve(runs[name], "success_prob"), color=color, lw=1.2, label=f"{label}：真实正确率")
    axes[0].set(ylabel="logps/chosen（nat）")
    axes[1].set(xlabel="DPO 步数", ylabel="间隔 / 正确率")
    axes[0].legend(loc="lower left", fontsize=7)
    axes[1].legend(loc="upper left", fontsize=6)
    save(fig, path)


CACHE_NAME = "docs/data/symptoms_more.json"
FIGURES = [
    Figure("reading-logs-more-hacking", reading_logs_more_hacking, "reading-logs-more.md", cache=CACHE_NAME),
    Figure("reading-logs-more-dpo", reading_logs_more_dpo, "reading-logs-more.md", cache=CACHE_NAME),
]
