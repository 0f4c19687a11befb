"""第 10 章（trl.md）：TRL 完整运行的曲线，读 docs/data/trl.json（`scripts/run_trl.py` 写）。"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from figs.base import ROOT, Figure, panels, save

TRL_CACHE = ROOT / "docs" / "data" / "trl.json"


def trl_curves(path: Path) -> None:
    """TRL 完整运行：GRPOTrainer 每步的平均奖励（1 个与 2 个进程），DPOTrainer 日志里的 logps/chosen 与 logps/rejected。"""
    cache = json.loads(TRL_CACHE.read_text(encoding="utf-8"))
    fig, axes = panels(2, 2.2)
    window = 20
    for key, color in (("1", "#1f77b4"), ("2", "#d95f02")):
        rewards = torch.tensor(cache["grpo"][key]["rewards"])
        smooth = rewards.unfold(0, window, 1).mean(-1)
        steps = torch.arange(window, len(rewards) + 1)
        axes[0].plot(steps, smooth, color=color, label=f"{key} 个进程")
    axes[0].set(ylabel=f"平均奖励（{window} 步滑动平均）", xlabel="GRPOTrainer 步数")
    axes[0].legend(loc="lower right")
    logs = cache["dpo"]["logs"]
    steps = [log["step"] for log in logs]
    axes[1].plot(steps, [log["logps/chosen"] for log in logs], color="#4c9f50", marker="o", ms=3, label="logps/chosen")
    axes[1].plot(
        steps, [log["logps/rejected"] for log in logs], color="#d62728", marker="o", ms=3, label="logps/rejected"
    )
    axes[1].set(ylabel="整条回答的对数概率（批平均）", xlabel="DPOTrainer 步数")
    axes[1].legend(loc="lower left")
    save(axes[0].figure, path)


FIGURES = [
    Figure("trl-curves", trl_curves, "trl.md", cache="docs/data/trl.json"),
]
