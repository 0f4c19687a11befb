"""第 13 章（续）的难度筛选实验：每个种子一个热启动，筛选、不筛选与两个对照各跑同样多步的 GRPO，写缓存。

    nice -n 10 .venv/bin/python scripts/run_settings.py   # 写 docs/data/your_run_settings.json

页面与 notebook 只读缓存。缓存记着它来自哪份代码（`code_hash`：`rlhf_toy.studies.difficulty.SOURCES` 里源文件
去掉文档字符串与注释之后的 SHA-256），`tests/test_your_run_settings.py` 检查它与当前代码一致。
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy._code_hash import sources_hash  # noqa: E402
from rlhf_toy.studies.difficulty import SOURCES, difficulty_run  # noqa: E402

CACHE = ROOT / "docs" / "data" / "your_run_settings.json"
SEEDS = (0, 1, 2)
SETTINGS = {
    "steps": 40,
    "pool_size": 256,
    "n": 16,
    "window": [0.2, 0.8],
    "sft_steps": 300,
    "control_window": [0.0, 0.8],
}


def r4(x: object) -> object:
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: r4(v) for k, v in x.items()}
    if isinstance(x, list):
        return [r4(v) for v in x]
    return x


def main() -> int:
    runs, cpu = {}, {}
    for seed in SEEDS:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
        wall = time.perf_counter()
        runs[str(seed)] = r4(
            difficulty_run(
                seed=seed,
                **{
                    **SETTINGS,
                    "window": tuple(SETTINGS["window"]),
                    "control_window": tuple(SETTINGS["control_window"]),
                },
            )
        )
        cpu[str(seed)] = round(resource.getrusage(resource.RUSAGE_SELF).ru_utime - before, 1)
        print(f"seed {seed}: {time.perf_counter() - wall:.1f} s wall, {cpu[str(seed)]} s CPU: {runs[str(seed)]}")
    payload = {
        "generated_by": "scripts/run_settings.py",
        "code_hash": sources_hash(SOURCES),
        "settings": SETTINGS,
        "runs": runs,
        "cpu_seconds": cpu,
    }
    CACHE.write_text(json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)} ({CACHE.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
