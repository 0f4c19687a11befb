"""第 14 章“读懂训练日志：GRPO 的曲线”的运行：写缓存 docs/data/symptoms.json。

    nice -n 10 .venv/bin/python scripts/run_symptoms.py     # 约 1.5 分钟 CPU：两个 SFT 热启动、十次 40 步的 GRPO

页面、图与 notebook 只读缓存。缓存记着它来自哪份代码（`code_hash`：HASHED 里源文件去掉文档字符串与注释之后的
SHA-256，`tests/test_cache_keys.py` 检查这份清单含运行导入的每个模块）；`tests/test_symptoms.py` 检查哈希。
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy.demos.reading_logs import CACHE  # noqa: E402
from rlhf_toy.demos.symptoms import HASHED, symptom_runs  # noqa: E402


def r4(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 4)


def main() -> None:
    from rlhf_toy._code_hash import sources_hash

    t0 = time.process_time()
    runs = symptom_runs()
    cpu = time.process_time() - t0
    out = {
        "code_hash": sources_hash(HASHED),
        "cpu_seconds": round(cpu, 1),
        "runs": {
            name: [{k: r4(v) if isinstance(v, float) else v for k, v in row.items()} for row in h]
            for name, h in runs.items()
        },
    }
    CACHE.write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{len(runs)} 次运行，CPU {cpu:.1f} 秒 → {CACHE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
