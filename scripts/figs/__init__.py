"""章节页上的图，一章（或第 12 章的一部分）一个模块：`chNN_<章>.py` 各有一张 `FIGURES` 列表（`base.Figure`：
名字、画图函数、嵌着它的章节页、它读的缓存），`registry.py` 把它们按章排成登记表并负责画；命令行是
`scripts/figures.py`。本文件不导入任何子模块：`scripts/run_experiments.py` 导入 `figs.base` 时不会连带
导入登记表（登记表经 `ch08_comparison` 导入 run_experiments，那样就成了环）。
"""
