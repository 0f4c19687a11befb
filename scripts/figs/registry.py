"""登记表：各章模块的 `FIGURES` 按章排在一起（名字 → `Figure`），以及把它们画出来的 `draw`。

加一张图：在它那一章的模块里写画图函数 `f(path)`，在该模块的 `FIGURES` 里加一条
`Figure("<章>-<内容>", f, "<章节页>.md", cache=...)`；新的一章就新建 `chNN_<章>.py` 并加进下面的 `CHAPTERS`。
`tests/test_scripts.py` 检查每张登记的图都嵌在它登记的章节页上、登记的缓存存在。
"""

from __future__ import annotations

from pathlib import Path

from figs import (
    ch01_overview,
    ch02_policy_gradient,
    ch03_reward_model,
    ch04_ppo,
    ch05_dpo,
    ch06_grpo,
    ch07_kl,
    ch08_comparison,
    ch09_tiny_lm,
    ch10_trl,
    ch12_distillation,
    ch12_offpolicy,
    ch12_tools,
    ch13_your_run,
    ch14_reading_logs,
    ch14_reading_logs_more,
    ratio_shaping,
)
from figs.base import OUT, Figure, setup

# 第 11 章的三张图由 scripts/run_reasoning.py --plot 画（它自己的版式，不用 base.STYLE），不在这里。
CHAPTERS = (
    ch01_overview,
    ch02_policy_gradient,
    ch03_reward_model,
    ch04_ppo,
    ch05_dpo,
    ch06_grpo,
    ratio_shaping,
    ch07_kl,
    ch08_comparison,
    ch09_tiny_lm,
    ch10_trl,
    ch12_offpolicy,
    ch12_distillation,
    ch12_tools,
    ch13_your_run,
    ch14_reading_logs,
    ch14_reading_logs_more,
)
REGISTRY: dict[str, Figure] = {figure.name: figure for chapter in CHAPTERS for figure in chapter.FIGURES}
assert len(REGISTRY) == sum(len(chapter.FIGURES) for chapter in CHAPTERS), "two figures share a name"


def draw(out_dir: Path = OUT, only: list[str] | None = None) -> list[Path]:
    """按章画登记表里的图（`only` 给出时只画名字含其中之一的）；返回写出的文件。

    `out_dir` 是 docs/figures 时每张图写到它提交的位置（第 8 章的两张在 docs/data/），否则都写成 `out_dir/<名字>.svg`
    （`tests/test_figures.py` 画到临时目录，再与提交的文件逐字节比较）。
    """
    import matplotlib

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context():  # 画完恢复调用者的 rcParams（测试进程里还有别的测试）
        setup()
        for figure in REGISTRY.values():
            if only and not any(o in figure.name for o in only):
                continue
            path = figure.path if out_dir == OUT else out_dir / f"{figure.name}.svg"
            figure.draw(path)
            written.append(path)
    return written
