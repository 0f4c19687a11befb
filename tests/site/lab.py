"""A tiny throwaway site built with the project's own settings (INHERIT: mkdocs.yml), for two purposes:

* show that the checkers catch what must fail CI: a broken formula, an off-site <script>, a broken anchor,
  and the Chinese notebook-heading anchors that mkdocs-jupyter breaks by default (notebooks/lab_raw.ipynb
  opts out of hooks/notebook_heading_ids.py);
* pin behaviour the chapters rely on even before a chapter uses it: equation numbers and \\eqref, math in
  notebook Markdown cells, prose dollar signs that stay prose.

The pages are written into a temporary directory at test time (not kept under tests/, where
pytest-codeblocks and nbmake would collect them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sitecheck import ROOT

PAGES = {
    "index.md": "# 实验页\n\n见 [公式](good.md)。\n",
    "good.md": r"""# 公式

DPO 的损失：

\begin{equation}
\mathcal L = -\log\sigma(\beta\Delta) \label{eq:lab-loss}
\end{equation}

式 $\eqref{eq:lab-loss}$ 里的 $\beta$ 是温度，$\piref$ 是参考模型，$\KL$ 是宏。

定价 $5，捐赠 $10：这两个美元符号是正文，不是公式。

## 优势函数 { #adv }

行内公式 $\hat A_i = r_i - \bar r$。
""",
    "bad_math.md": r"""# 坏公式

$$
\frac{1}{2
$$

未定义的宏：$\notamacro x$。

站点只带 AMS 字体的子集（hooks/vendor_mathjax.py）：$a \lesssim b$ 要用子集之外的字形。
""",
    "offsite.md": """# 站外脚本

<script src="https://cdn.example.com/lib.js"></script>

正文。
""",
    "bad_anchor.md": """# 坏锚点

<a href="../good/#no-such-anchor">不存在的锚点</a>
""",
}

NOTEBOOK_CELLS = [
    ("markdown", "# 实验笔记本\n\n费用 \\$5 或 \\$10 是正文。"),
    ("markdown", "## 优势函数\n\n组内相对优势 $\\hat A_i = (r_i - \\mu)/\\sigma$，且\n\n$$\\sum_i \\hat A_i = 0.$$"),
    ("code", "print(1 + 1)"),
    ("markdown", "## 组内标准化\n\n见上。"),
]

NAV = """nav:
  - 首页: index.md
  - 公式: good.md
  - 坏公式: bad_math.md
  - 站外脚本: offsite.md
  - 坏锚点: bad_anchor.md
  - 笔记本: notebooks/lab.ipynb
  - 笔记本（原始标题锚点）: notebooks/lab_raw.ipynb
  - 术语表: glossary.md
"""

HOOKS = ["vendor_mathjax", "notebook_slim", "search_exclude_math", "notebook_heading_ids", "glossary", "page_meta"]


def _notebook(raw_heading_ids: bool = False) -> dict:
    cells = []
    for i, (kind, src) in enumerate(NOTEBOOK_CELLS):
        cell = {"cell_type": kind, "id": f"cell-{i:03d}", "metadata": {}, "source": src}
        if kind == "code":
            cell.update(execution_count=1, outputs=[{"name": "stdout", "output_type": "stream", "text": "2\n"}])
        cells.append(cell)
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "rlhf_toy": {"raw_heading_ids": raw_heading_ids},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def write_lab(root: Path) -> Path:
    """Write the lab docs and config under root; return the config file."""
    docs = root / "docs"
    (docs / "notebooks").mkdir(parents=True)
    for name, text in PAGES.items():
        (docs / name).write_text(text, encoding="utf-8")
    for name, raw in (("lab", False), ("lab_raw", True)):
        nb = json.dumps(_notebook(raw), ensure_ascii=False)
        (docs / "notebooks" / f"{name}.ipynb").write_text(nb, encoding="utf-8")
    for sub in ("javascripts", "stylesheets", "assets"):
        shutil.copytree(ROOT / "docs" / sub, docs / sub)
    for name in ("terms.yml", "jieba_userdict.txt", "references.bib"):
        shutil.copy(ROOT / "docs" / name, docs / name)
    (root / "overrides").mkdir()
    shutil.copy(ROOT / "overrides" / "print_cover.tpl", root / "overrides" / "print_cover.tpl")  # print-site's cover
    hook_lines = "".join(f"  - {ROOT / 'hooks' / (h + '.py')}\n" for h in HOOKS)
    text = (
        f"INHERIT: {ROOT / 'mkdocs.yml'}\n"
        f"site_name: lab\n"
        f"docs_dir: {docs}\n"
        f"theme:\n  custom_dir: {ROOT / 'overrides'}\n"
        f"hooks:\n{hook_lines}"
        f"watch: []\n"
        f"{NAV}"
    )
    cfg = root / "lab.yml"
    cfg.write_text(text, encoding="utf-8")
    return cfg
