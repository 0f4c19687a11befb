"""章节页上的图：每张图一个短函数，数据由 rlhf_toy 自己的函数算出，写成 docs/figures/<章>-<内容>.svg。

    .venv/bin/python scripts/figures.py                 # 重画全部（make figures），含第 8 章的两张（读它的缓存）
    .venv/bin/python scripts/figures.py ppo-clip        # 只画名字里含 ppo-clip 的图
    .venv/bin/python scripts/figures.py --refresh-cache # 重跑第 9 章的训练（几分钟），写 docs/data/tiny_lm_figures.json

画图函数在 scripts/figs/ 里，一章（第 12 章是一部分）一个模块 `chNN_<章>.py`；每个模块的 `FIGURES` 列出它的图
（名字、画图函数、嵌着它的章节页、它读的缓存），`figs/registry.py` 按章把它们排成登记表 `REGISTRY` 并画出来。
本文件只是命令行，另外把测试与别的脚本用到的名字（`draw`、`FIGURES`、`OUT`、`WIDTH`、`tiny_lm_code_hash` 等）
从那里转出来。

绝大多数图是闭式或几毫秒的查表训练，每次重算；要训练极小 Transformer 的两张（第 9 章）读缓存
`docs/data/tiny_lm_figures.json`，缓存记着它来自哪份代码（`code_hash`）。`tests/test_figures.py` 把每张图重画到
临时目录并与提交的文件逐字节比较。输出是确定的：Agg 后端、文字写成 SVG 的 <text>（`svg.fonttype: none`）、
固定的 `svg.hashsalt`、元数据里没有日期和版本；版面按 Noto Sans CJK SC 的字宽排（没有这个字体就报错）。
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

# figs.base 先 import rlhf_toy（固定数值设置），再导入 torch
from figs.base import OUT, SVG_METADATA, WIDTH, Figure, panels, save, setup  # noqa: E402
from figs.ch09_tiny_lm import TINY_LM_CACHE, refresh_cache, tiny_lm_code_hash, tiny_lm_runs  # noqa: E402
from figs.registry import REGISTRY, draw  # noqa: E402

# 名字 → 画图函数（全部登记的图，按章排）
FIGURES = {name: figure.draw for name, figure in REGISTRY.items()}

__all__ = [
    "FIGURES",
    "OUT",
    "REGISTRY",
    "ROOT",
    "SVG_METADATA",
    "TINY_LM_CACHE",
    "WIDTH",
    "Figure",
    "draw",
    "main",
    "panels",
    "save",
    "setup",
    "tiny_lm_code_hash",
    "tiny_lm_runs",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="只画名字含这些字符串的图")
    parser.add_argument("--refresh-cache", action="store_true", help="重跑第 9 章的训练，重写 tiny_lm_figures.json")
    args = parser.parse_args(argv)
    if args.refresh_cache:
        refresh_cache()
    for path in draw(only=args.only):
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
