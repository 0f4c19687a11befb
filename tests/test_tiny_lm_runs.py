"""docs/data/tiny_lm_runs.json（第 9 章的 DPO、PPO、长度一课与均匀抽题的对照，`scripts/run_tiny_lm.py` 写）来自现在的代码。

页面只读这个缓存；这里检查它的 `code_hash` 与当前代码一致，并重算最便宜的一项（均匀抽题热启动之后的按题型统计，
十几 CPU 秒），要求与缓存逐项相同。
"""

from __future__ import annotations

import json
from pathlib import Path

from _scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "data" / "tiny_lm_runs.json"


def _script():
    return load_script("run_tiny_lm")


def test_cache_comes_from_this_code():
    run_tiny_lm = _script()
    cache = json.loads(CACHE.read_text(encoding="utf-8"))
    assert cache["code_hash"] == run_tiny_lm.code_hash(), "code changed: rerun scripts/run_tiny_lm.py"
    assert set(cache["cpu_seconds"]) == set(run_tiny_lm.PARTS)


def test_cheapest_entry_regenerates_exactly():
    run_tiny_lm = _script()
    cache = json.loads(CACHE.read_text(encoding="utf-8"))
    assert run_tiny_lm.uniform_warm_start_errors(0) == cache["uniform"]["sft"]
