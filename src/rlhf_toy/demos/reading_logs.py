r"""第 14 章页面读缓存用的两个小函数：`load_runs` 读 `docs/data/symptoms.json`，`show` 把几个指标印成一张小表。

缓存由 `scripts/run_symptoms.py` 用 `rlhf_toy.demos.symptoms.symptom_runs` 写；这两个函数不进缓存键，改它们不必重跑。
"""

# --8<-- [start:imports]
from __future__ import annotations

import json
from pathlib import Path

# --8<-- [end:imports]

CACHE = Path(__file__).resolve().parents[3] / "docs" / "data" / "symptoms.json"
"""缓存文件（`scripts/run_symptoms.py` 写）。"""


# --8<-- [start:load]
def load_runs() -> dict[str, list[dict]]:
    """读缓存 `docs/data/symptoms.json`：运行名 → 指标历史（数值保留四位小数）。"""
    return json.loads(CACHE.read_text(encoding="utf-8"))["runs"]


def show(history: list[dict], keys: tuple[str, ...], steps: tuple[int, ...] = (1, 5, 10, 20, 40)) -> None:
    """打印一次运行在几个步上的几个指标：每行一步，列名取指标名最后一段（日志里没有的印作 `-`）。"""
    names = [k.split("/")[-1] for k in keys]
    widths = [max(10, len(n) + 2) for n in names]
    print("step" + "".join(f"{n:>{w}s}" for n, w in zip(names, widths, strict=True)))
    at = {row["step"]: row for row in history}
    for s in steps:
        values = (at[s].get(k) for k in keys)  # + 0.0 把 -0.0 印成 0
        cells = (f"{v + 0.0:{w}.4g}" if v is not None else f"{'-':>{w}s}" for v, w in zip(values, widths, strict=True))
        print(f"{s:4d}" + "".join(cells))


# --8<-- [end:load]
