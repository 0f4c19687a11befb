"""第 10 章的完整运行：TRL 的 SFT 热启动一次，之后一个进程与两个进程的 GRPO、DPO，以及速度对照；写缓存。

    .venv/bin/python scripts/run_trl.py      # 约三分钟（两核机器）；写 docs/data/trl.json

每段计时前后记下 `os.getloadavg()`（机器上可能同时有别的任务，计时有噪声）。

页面与 notebook 只读缓存；`tests/test_trl_chapter.py` 检查缓存的配置与代码摘要和当前代码一致，并在 CI 里
用快速版真的跑 TRL（一个进程和两个进程）。改了下面 `SOURCES` 里的代码之后重跑本脚本，提交 JSON。
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "data" / "trl.json"
SOURCES = [
    "src/rlhf_toy/integrations/trl.py",
    "src/rlhf_toy/demos/trl.py",
    "src/rlhf_toy/tasks/addition.py",
    "src/rlhf_toy/demos/tiny_lm.py",
    "src/rlhf_toy/train/grpo.py",
    "scripts/run_trl.py",
]


def code_hash() -> str:
    """`SOURCES` 去掉文档字符串与注释之后的 SHA-256（前 16 位）：缓存来自哪份代码。

    只改文档字符串、注释或排版不改变它（`rlhf_toy._code_hash.code_text`，Python 3.10–3.13 给出相同的文本）。
    """
    from rlhf_toy._code_hash import code_text

    h = hashlib.sha256()
    for path in SOURCES:
        h.update(code_text(ROOT / path).encode("utf-8"))
    return h.hexdigest()[:16]


def config() -> dict:
    """缓存对应的配置（改了这些数，缓存就过期）。"""
    from rlhf_toy.demos import trl

    return {
        "sft": trl.SFT_FULL,
        "dpo": trl.DPO_FULL,
        "seed": 0,
        "processes": [1, 2],
        "speed_control": trl.SPEED_CONTROL,
    }


def two_process_part(init_from: str, out: str) -> None:
    """在 `accelerate launch` 启动的两个进程里跑 GRPO；0 号进程把结果写到 `out`。"""
    from rlhf_toy.demos.trl import run_trl_grpo, world

    result = run_trl_grpo(init_from=init_from)
    if world()[0] == 0:
        Path(out).write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--two-process-part", nargs=2, metavar=("INIT_FROM", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.two_process_part:
        two_process_part(*args.two_process_part)
        return 0

    from rlhf_toy.demos.trl import SPEED_CONTROL, run_trl_dpo, run_trl_grpo, sft_warm_start, speed_control
    from rlhf_toy.integrations.trl import greedy_accuracy
    from rlhf_toy.tasks.addition import AdditionTask

    t0 = time.perf_counter()
    work = tempfile.mkdtemp(prefix="rlhf_toy_trl_")
    task = AdditionTask(seed=0, balanced=True)
    model, tokenizer, sft = sft_warm_start(task, seed=0)
    sft["accuracy"] = greedy_accuracy(model, tokenizer, task)
    model.save_pretrained(work)
    (Path(work) / "sft.json").write_text(json.dumps(sft), encoding="utf-8")
    print(f"SFT: {sft['steps']} steps, {sft['seconds']:.0f} s, held-out {sft['accuracy']:.3f}", flush=True)
    load = list(os.getloadavg())
    grpo1 = run_trl_grpo(init_from=work)
    grpo1["loadavg_before"], grpo1["loadavg_after"] = load, list(os.getloadavg())
    out = os.path.join(work, "grpo2.json")
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    load = list(os.getloadavg())
    subprocess.run(
        [
            accelerate,
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            __file__,
            "--two-process-part",
            work,
            out,
        ],
        check=True,
    )
    grpo2 = json.loads(Path(out).read_text(encoding="utf-8"))
    grpo2["loadavg_before"], grpo2["loadavg_after"] = load, list(os.getloadavg())
    dpo = run_trl_dpo(init_from=work)
    control = speed_control(work, **SPEED_CONTROL)
    print(f"speed control: {control}", flush=True)
    payload = {
        "generated_by": "scripts/run_trl.py",
        "config": config(),
        "code_hash": code_hash(),
        "sft": sft,
        "grpo": {"1": grpo1, "2": grpo2},
        "dpo": dpo,
        "speed_control": control,
        "wall_seconds": time.perf_counter() - t0,
    }
    CACHE.write_text(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)} in {payload['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
