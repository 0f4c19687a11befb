"""各章的图共用的东西：输出目录、版式（宽 4.8 英寸、Noto Sans CJK SC、SVG 里没有日期）、`setup`、`save`、`panels`、
第 1–7 章共用的老虎机起点 `bandit`，以及登记表的条目 `Figure`。

版式：宽 4.8 英寸（浏览器里约 460 px，手机上缩到约 360 px 时 10 pt 的字仍有约 10 px），多个面板上下叠放，
背景透明；深色模式下 docs/stylesheets/extra.css 把图反色（保留色相）。`scripts/run_experiments.py` 画第 8 章的两张
也用这里的版式。
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

# 固定数值设置（rlhf_toy.numerics）：在第一次张量计算之前导入即可，导入 torch 本身不读这些设置
import rlhf_toy  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "figures"
WIDTH = 4.8  # 英寸
FONT = "Noto Sans CJK SC"
STYLE = {
    "font.family": [FONT, "DejaVu Sans"],
    "axes.unicode_minus": False,
    "font.size": 10,
    "axes.labelsize": 10,
    "axes.titlesize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.6,
    "legend.frameon": False,
    "figure.dpi": 72,
    "savefig.transparent": True,
    "svg.hashsalt": "rlhf-toy",
    # 文字写成 SVG 的 <text>（浏览器用系统的中文字体排），不把字形转成路径：图小一半，文字可选中
    "svg.fonttype": "none",
}
# 没有创建日期与 matplotlib 版本：图没变，文件就逐字节相同。
SVG_METADATA = {"Date": None, "Creator": None}
GREY = "#777777"


def setup():
    """Agg 后端与本书的版式；返回 pyplot。"""
    import matplotlib

    matplotlib.use("Agg")  # 脚本不在 notebook 里，可以选后端
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    plt.rcParams.update(STYLE)
    if FONT not in {f.name for f in font_manager.fontManager.ttflist}:
        # matplotlib 的字体缓存建于字体安装之前时找不到它：只在本进程里补上，不改缓存
        for font in font_manager.findSystemFonts():
            if Path(font).name.startswith("NotoSansCJK"):
                font_manager.fontManager.addfont(font)
    if FONT not in {f.name for f in font_manager.fontManager.ttflist}:
        raise RuntimeError(f"图按 {FONT} 的字宽排版，请先安装（Debian：apt-get install fonts-noto-cjk）")
    return plt


def save(fig, path: Path) -> None:
    fig.savefig(path, metadata=SVG_METADATA)
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)


def panels(n: int, height: float = 2.3, **kw):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(n, 1, figsize=(WIDTH, height * n + 0.2), layout="constrained", **kw)
    return fig, axes


def bandit(seed: int = 0):
    """各章共用的起点：种子 0 的老虎机任务与近似均匀的随机查表策略（与页面代码块相同的随机数抽取顺序）。"""
    from rlhf_toy import BanditTask, TablePolicy

    torch.manual_seed(seed)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    policy = TablePolicy.random(20, 8)
    return task, policy


@dataclass(frozen=True)
class Figure:
    """登记表里的一张图：名字、画图函数、嵌着它的章节页、它读的缓存。

    Attributes:
        name: 图的名字；`scripts/figures.py <名字片段>` 按它挑图，临时目录里的文件名是 `<name>.svg`。
        draw: `draw(path)` 把图写到 `path`。
        page: 嵌着它的章节页（`docs/` 下的文件名）。
        cache: 它读的缓存（相对仓库根）；`None` 表示每次现算（闭式或几毫秒的训练）。
        committed: 提交的文件；`None` 表示 `docs/figures/<name>.svg`。
    """

    name: str
    draw: Callable[[Path], None]
    page: str
    cache: str | None = None
    committed: Path | None = None

    @property
    def path(self) -> Path:
        """提交的 SVG 文件。"""
        return self.committed or OUT / f"{self.name}.svg"
