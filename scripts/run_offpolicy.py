"""第 12 章的完整实验（异策略样本、蒸馏、工具调用），一部分一个缓存文件。

    nice -n 10 .venv/bin/python scripts/run_offpolicy.py offpolicy      # 写 docs/data/offpolicy.json
    nice -n 10 .venv/bin/python scripts/run_offpolicy.py distillation   # 写 docs/data/distillation.json
    nice -n 10 .venv/bin/python scripts/run_offpolicy.py tools          # 写 docs/data/tools.json
    .venv/bin/python scripts/run_offpolicy.py offpolicy --quick         # 快速模式：只打印结果与耗时，不写文件

每一部分是 `rlhf_toy.demos.<部分>` 模块，提供 `SOURCES`（它依赖的源文件，相对 `src/rlhf_toy/`）与
`full_run(quick: bool) -> dict`（可写进 JSON 的结果，浮点数已舍入）。缓存写成
`{"code_hash": sources_hash(SOURCES), "results": ..., "seconds": ...}`；页面与 notebook 只读缓存，
`tests/test_offpolicy.py`、`test_distillation.py`、`test_tools.py` 各自检查本部分缓存的 `code_hash` 与当前代码一致，并重算其中一个数。
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy._code_hash import sources_hash  # noqa: E402

PARTS = ("offpolicy", "distillation", "tools")
DATA = ROOT / "docs" / "data"


def cache_path(part: str) -> Path:
    """一部分的缓存文件：`docs/data/<部分>.json`。"""
    return DATA / f"{part}.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=PARTS)
    ap.add_argument("--quick", action="store_true", help="快速模式：只打印，不写缓存")
    args = ap.parse_args()
    module = importlib.import_module(f"rlhf_toy.demos.{args.part}")
    t0, cpu0 = time.perf_counter(), time.process_time()
    results = module.full_run(quick=args.quick)
    seconds = {"wall": round(time.perf_counter() - t0, 1), "cpu": round(time.process_time() - cpu0, 1)}
    print(json.dumps(seconds))
    if args.quick:
        print(json.dumps(results, ensure_ascii=False)[:2000])
        return 0
    data = {"code_hash": sources_hash(module.SOURCES), "results": results, "seconds": seconds}
    cache_path(args.part).write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {cache_path(args.part).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
