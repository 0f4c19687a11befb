"""第 8 章（comparison.md）：同台对比与奖励过优化的两张图，由 `scripts/run_experiments.py` 从它的缓存
docs/data/comparison.json 画，提交在 docs/data/ 下（不在 docs/figures/）。

    .venv/bin/python scripts/run_experiments.py --plot   # 同样从缓存重画这两张
"""

from __future__ import annotations

import json
from pathlib import Path

import run_experiments

from figs.base import Figure


def _cache() -> dict:
    return json.loads(run_experiments.CACHE.read_text(encoding="utf-8"))


def comparison(path: Path) -> None:
    """各算法的真实奖励与 KL 随用掉的样本数。"""
    run_experiments.plot_comparison(_cache(), path)


def overopt(path: Path) -> None:
    """奖励过优化：代理奖励与真实奖励随 KL。"""
    run_experiments.plot_overopt(_cache(), path)


CACHE = "docs/data/comparison.json"
FIGURES = [
    Figure("comparison", comparison, "comparison.md", cache=CACHE, committed=run_experiments.FIGURES["comparison"]),
    Figure("overopt", overopt, "comparison.md", cache=CACHE, committed=run_experiments.FIGURES["overopt"]),
]
