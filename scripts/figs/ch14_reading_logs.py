"""第 14 章（读懂训练日志：GRPO 的曲线）的图：健康的运行与各症状的运行，七个指标上下叠放。

    .venv/bin/python scripts/figures.py reading-logs    # 重画 docs/figures/reading-logs-gallery.svg

数据读缓存 docs/data/symptoms.json（`scripts/run_symptoms.py`）。
"""

from __future__ import annotations

from pathlib import Path

from figs.base import Figure, panels, save

HEALTHY, BAD = "#1f77b4", "#d95f02"
# 指标 -> (健康的运行, 出症状的运行, 纵轴标签, 对数轴)
PANELS = (
    ("reward", "healthy", "zero_std", "reward", False),
    ("kl", "healthy", "kl_explodes", "kl (nat)", True),
    ("entropy", "scratch_healthy", "entropy_collapse", "entropy (nat)", False),
    ("frac_reward_zero_std", "healthy", "zero_std", "frac_reward\n_zero_std", False),
    ("completions/mean_length", "scratch_healthy", "length_collapse", "mean_length", False),
    ("completions/clipped_ratio", "scratch_healthy", "truncation", "clipped_ratio", False),
    ("grad_norm", "healthy", "kl_explodes", "grad_norm", False),
)


def gallery(path: Path) -> None:
    """每个面板一个指标：蓝线是健康的运行，橙线是在这个指标上出症状的运行（图例写出运行名）。"""
    from rlhf_toy.demos.reading_logs import load_runs

    runs = load_runs()
    fig, axes = panels(len(PANELS), 1.05, sharex=True)
    for ax, (key, good, bad, label, log) in zip(axes, PANELS, strict=True):
        for name, color in ((good, HEALTHY), (bad, BAD)):
            rows = [r for r in runs[name] if r.get(key) is not None and (not log or r[key] > 0)]
            ax.plot([r["step"] for r in rows], [r[key] for r in rows], color=color, lw=1.1, label=name)
        ax.set_ylabel(label, fontsize=7)
        ax.tick_params(labelsize=6.5)
        if log:
            ax.set_yscale("log")
        ax.legend(loc="best", fontsize=5.5, frameon=False)
    axes[-1].set_xlabel("step", fontsize=7)
    save(fig, path)


FIGURES = [
    Figure("reading-logs-gallery", gallery, "reading-logs.md", cache="docs/data/symptoms.json"),
]
