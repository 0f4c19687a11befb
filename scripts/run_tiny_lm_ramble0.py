"""第 9 章长度一课的对照：热启动不带“想个没完”的坏习惯（`ramble=0`），写缓存 docs/data/tiny_lm_ramble0.json。

    nice -n 10 .venv/bin/python scripts/run_tiny_lm_ramble0.py     # 写缓存（单线程，一两分钟 CPU 时间）

只有种子 0，其余设置与页面上的长度一课（`length_lesson(seed=0, steps=40, every=5, ramble=0.2)`，在图的缓存
docs/data/tiny_lm_figures.json 里）相同，只把 `ramble` 换成 0。这里只调用 `rlhf_toy.demos.tiny_lm.length_lesson`，
不改它。缓存记着它来自哪份代码（`code_hash`：scripts/run_tiny_lm.py 的 HASHED 列出的源文件与本脚本，去掉文档字符串
与注释之后的 SHA-256）；`tests/claims/test_tiny_lm_page.py` 检查哈希，并对着缓存检查页面上关于这次对照的句子。
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from run_tiny_lm import HASHED, r4  # noqa: E402 - 同一组源文件：rlhf_toy.demos.tiny_lm 导入的全部模块

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy._code_hash import script_hash  # noqa: E402
from rlhf_toy.demos.tiny_lm import length_lesson  # noqa: E402

CACHE = ROOT / "docs" / "data" / "tiny_lm_ramble0.json"
SEED, STEPS, EVERY, RAMBLE = 0, 40, 5, 0.0
KEYS = ("step", "length_wrong", "length_correct", "truncated", "accuracy")


def code_hash() -> str:
    """HASHED 里的源文件与本脚本去掉文档字符串与注释之后的 SHA-256。"""
    return script_hash(HASHED, __file__)


def main() -> int:
    start = time.process_time()
    runs = length_lesson(seed=SEED, steps=STEPS, every=EVERY, ramble=RAMBLE)
    seconds = round(time.process_time() - start, 1)
    out = {
        "code_hash": code_hash(),
        "seed": SEED,
        "ramble": RAMBLE,
        "cpu_seconds": seconds,
        "runs": {
            k: [{"step": r["step"], **{key: r4(r[key]) for key in KEYS[1:]}} for r in rows] for k, rows in runs.items()
        },
    }
    CACHE.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)} in {seconds} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
