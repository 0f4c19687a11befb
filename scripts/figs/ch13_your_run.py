"""第 13 章的两张图：LoRA 与全参数微调的训练奖励曲线（your-run.md），Qwen2.5 四个尺寸的训练内存分项（your-run-settings.md）。

    .venv/bin/python scripts/figures.py your-run    # 重画 docs/figures/your-run-*.svg

奖励曲线读缓存 docs/data/lora.json（`scripts/run_lora.py`）；内存分项由 `rlhf_toy.models.memory` 现算（闭式，毫秒级）。
"""

from __future__ import annotations

import json
from pathlib import Path

from figs.base import ROOT, WIDTH, Figure, save

LORA_CACHE = ROOT / "docs" / "data" / "lora.json"
LORA_LABELS = {"full": "全参数（lr 5e-4）", "lora": "LoRA（lr 5e-4）", "lora_lr10": "LoRA（lr 5e-3）"}
LORA_COLORS = {"full": "#1f77b4", "lora": "#d95f02", "lora_lr10": "#7570b3"}
WINDOW = 10  # 滑动平均的窗口（步）


def _moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def lora_rewards(path: Path) -> None:
    """三次 GRPO 运行（全参数、LoRA、LoRA 学习率 ×10）每步的训练批平均奖励：细线是每步的值，粗线是 10 步滑动平均。"""
    import matplotlib.pyplot as plt

    runs = json.loads(LORA_CACHE.read_text(encoding="utf-8"))["runs"]
    fig, ax = plt.subplots(figsize=(WIDTH, 2.6), layout="constrained")
    for name, label in LORA_LABELS.items():
        rewards = runs[name]["rewards"]
        steps = list(range(1, len(rewards) + 1))
        ax.plot(steps, rewards, color=LORA_COLORS[name], lw=0.6, alpha=0.35)
        ax.plot(steps, _moving_average(rewards, WINDOW), color=LORA_COLORS[name], lw=1.6, label=label)
    ax.set(xlabel="GRPO 步数", ylabel="训练批平均奖励")
    ax.legend(loc="lower right", fontsize=8)
    save(fig, path)


MEMORY_KEYS = ("weights", "gradients", "master_weights", "optimizer_states", "activations")
MEMORY_LABELS = {"weights": "权重（bf16）", "gradients": "梯度（bf16）", "master_weights": "fp32 主权重",
                 "optimizer_states": "AdamW 的 m、v", "activations": "激活（1 × 2048 token）"}  # fmt: skip
MEMORY_COLORS = {"weights": "#1f77b4", "gradients": "#ff7f0e", "master_weights": "#2ca02c",
                 "optimizer_states": "#d62728", "activations": "#9467bd"}  # fmt: skip


def memory_breakdown(path: Path) -> None:
    """Qwen2.5 四个尺寸单卡全参数训练的五项内存（ZeRO 的布局：bf16 模型加 fp32 主权重，一个微批次 1 条 × 2048 个
    token），横向堆叠的条；每条的总长就是页面表里的“合计”列。"""
    import matplotlib.pyplot as plt

    from rlhf_toy.models.memory import QWEN25, training_memory

    gib = 2**30
    names = list(QWEN25)
    fig, ax = plt.subplots(figsize=(WIDTH, 2.6), layout="constrained")
    for row, name in enumerate(names):
        m = training_memory(QWEN25[name], batch_size=1, seq_len=2048)
        left = 0.0
        for key in MEMORY_KEYS:
            width = m[key] / gib
            ax.barh(row, width, left=left, color=MEMORY_COLORS[key], label=MEMORY_LABELS[key] if row == 0 else None)
            left += width
        ax.text(left + 5, row, f"{left:.0f} GiB", va="center", fontsize=8)
    ax.axvline(80 * 10**9 / gib, color="#777777", lw=0.8, ls="--")
    ax.text(80 * 10**9 / gib + 4, -0.55, "一张 80 GB 的卡", fontsize=8, color="#777777")
    ax.set(
        yticks=range(len(names)),
        yticklabels=names,
        xlabel="单卡内存（GiB）",
        xlim=(0, 620),
        ylim=(len(names) - 0.5, -0.8),
    )
    ax.grid(axis="y", visible=False)
    ax.legend(loc="upper right", fontsize=7)
    save(fig, path)


FIGURES = [
    Figure("your-run-lora-rewards", lora_rewards, "your-run.md", cache="docs/data/lora.json"),
    Figure("your-run-settings-memory", memory_breakdown, "your-run-settings.md"),
]
