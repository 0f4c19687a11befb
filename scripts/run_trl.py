"""第 10 章的完整运行：TRL 的 SFT 热启动一次，之后一个进程与两个进程的 GRPO、DPO，以及速度对照；写缓存。

    .venv/bin/python scripts/run_trl.py      # 空闲的两核机器上几分钟，忙时可达二十分钟；写 docs/data/trl.json

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
    "src/rlhf_toy/estimators/advantages.py",
    "src/rlhf_toy/estimators/dynamic_sampling.py",
    "src/rlhf_toy/estimators/entropy.py",
    "src/rlhf_toy/estimators/kl.py",
    "src/rlhf_toy/estimators/rewards.py",
    "src/rlhf_toy/losses/aggregate.py",
    "src/rlhf_toy/losses/dpo.py",
    "src/rlhf_toy/losses/grpo.py",
    "src/rlhf_toy/losses/ppo.py",
    "src/rlhf_toy/policies/table.py",
    "src/rlhf_toy/policies/transformer.py",
    "src/rlhf_toy/tasks/bandit.py",
    "src/rlhf_toy/train/dpo.py",
    "src/rlhf_toy/train/ppo.py",
    "src/rlhf_toy/train/sft.py",
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
        "isa_rounds": ISA_ROUNDS,
        "unpinned_isa": UNPINNED_ISA,
        "process_control": {"rounds": PROCESS_ROUNDS, "steps": PROCESS_STEPS},
    }


# 去掉本书的指令集限制（numerics.env 把 ATen 与 oneDNN 限于 AVX2）：只用于 bf16 的对照，不用于任何训练
UNPINNED_ISA = {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "ALL"}
ISA_ROUNDS = 3  # 两种设置各起 3 个子进程，交替进行
PROCESS_ROUNDS, PROCESS_STEPS = 3, 20  # 1 个与 2 个进程交替启动 3 轮，每次 GRPO 20 步（第一步不计）


def launch_grpo(processes: int, init_from: str, out: str, steps: int | None = None) -> dict:
    """用 `accelerate launch` 在 `processes` 个进程里跑 GRPO，返回 0 号进程的结果（另记启动前后的负载）。"""
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    load = list(os.getloadavg())
    subprocess.run(
        [
            accelerate,
            "launch",
            *(["--multi_gpu"] if processes > 1 else ["--cpu"]),
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            __file__,
            "--two-process-part",
            init_from,
            out,
            str(steps or ""),
        ],
        check=True,
    )
    result = json.loads(Path(out).read_text(encoding="utf-8"))
    result["loadavg_before"], result["loadavg_after"] = load, list(os.getloadavg())
    return result


def process_control(init_from: str, work: str) -> dict:
    """1 个与 2 个进程交替启动，各跑 `PROCESS_STEPS` 步 GRPO；每次的第一步不计，其余各步合起来取平均数。"""
    seconds: dict[str, list[float]] = {"1": [], "2": []}
    load = list(os.getloadavg())
    for r in range(PROCESS_ROUNDS):
        for n in seconds:
            out = os.path.join(work, f"processes{n}_round{r}.json")
            seconds[n] += launch_grpo(int(n), init_from, out, PROCESS_STEPS)["step_seconds"][1:]
    return {
        "means": {n: sum(v) / len(v) for n, v in seconds.items()},
        "samples": {n: len(v) for n, v in seconds.items()},
        "loadavg_before": load,
        "loadavg_after": list(os.getloadavg()),
    }


def isa_control() -> dict:
    """bf16 与 float32 的前向加反向传播：本书的 AVX2 设置与去掉限制，各在子进程里交替计时（见 `bf16_instruction_set_control`）。"""
    code = "import json; from rlhf_toy.demos.trl import bf16_instruction_set_control as f; print(json.dumps(f()))"
    runs: dict[str, list[dict]] = {"pinned": [], "unpinned": []}
    load = list(os.getloadavg())
    for _ in range(ISA_ROUNDS):
        for name in runs:
            env = {**os.environ, **(UNPINNED_ISA if name == "unpinned" else {})}
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    result = {}
    for name, values in runs.items():
        result[name] = {
            "capability": values[0]["capability"],
            "float32": sum(v["float32"] for v in values) / len(values),
            "bf16": sum(v["bf16"] for v in values) / len(values),
            "samples": sum(v["samples"] for v in values),
        }
    result["loadavg_before"], result["loadavg_after"] = load, list(os.getloadavg())
    result["cpu_flags"] = sorted(set(_cpu_flags()) & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    return result


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            return line.split(":", 1)[1].split()
    return []


def two_process_part(init_from: str, out: str, steps: str = "") -> None:
    """在 `accelerate launch` 启动的进程里跑 GRPO（`steps` 为空时是完整的 300 步）；0 号进程把结果写到 `out`。"""
    from rlhf_toy.demos.trl import run_trl_grpo, world

    result = run_trl_grpo(init_from=init_from, steps=int(steps) if steps else None)
    if world()[0] == 0:
        Path(out).write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--two-process-part", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.two_process_part:
        two_process_part(*args.two_process_part)
        return 0

    import torch

    from rlhf_toy.demos.trl import (
        SPEED_CONTROL,
        run_trl_dpo,
        run_trl_grpo,
        sampling_and_balance,
        sft_warm_start,
        speed_control,
    )
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
    with torch.random.fork_rng():  # 不改变后面各次运行的全局随机数
        torch.manual_seed(0)
        start = sampling_and_balance(model, tokenizer, task)
    print(f"GRPO start: {start}", flush=True)
    load = list(os.getloadavg())
    grpo1 = run_trl_grpo(init_from=work)
    grpo1["loadavg_before"], grpo1["loadavg_after"] = load, list(os.getloadavg())
    grpo2 = launch_grpo(2, work, os.path.join(work, "grpo2.json"))
    dpo = run_trl_dpo(init_from=work)
    control = speed_control(work, **SPEED_CONTROL)
    print(f"speed control: {control}", flush=True)
    isa = isa_control()
    print(f"bf16 / instruction set: {isa}", flush=True)
    processes = process_control(work, work)
    print(f"1 vs 2 processes: {processes}", flush=True)
    payload = {
        "generated_by": "scripts/run_trl.py",
        "config": config(),
        "code_hash": code_hash(),
        "sft": sft,
        "grpo": {"1": grpo1, "2": grpo2},
        "dpo": dpo,
        "speed_control": control,
        "grpo_start": start,
        "bf16_isa": isa,
        "process_control": processes,
        "wall_seconds": time.perf_counter() - t0,
    }
    CACHE.write_text(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)} in {payload['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
