"""第 9 章的计时：从 SFT 热启动的极小 Transformer 出发，GRPO 在 10 / 30 / 60 秒时的留出集正确率。

    python benchmarks/tiny_lm.py                 # 3 个种子，完整版（每个种子：SFT + 60 秒 GRPO）
    python benchmarks/tiny_lm.py --seeds 0 --quick-only
    python benchmarks/tiny_lm.py --uniform       # 对照：训练题均匀地抽（不按题型均衡）
    python benchmarks/tiny_lm.py --length-lesson # 长度一课（ramble=0.2，40 步）：三种 loss_type，每个种子

只计 GRPO 阶段的墙钟时间（不含评估）；同时记录 SFT 用时、快速版（100 步）用时、进程的峰值内存，以及每次计时时
`os.getloadavg()` 的负载——机器被别的进程占用时，计时会被拉长，请把负载和时间一起读。结果也写到
`benchmarks/results/tiny_lm.json`（不进仓库也可以）。
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import time
from pathlib import Path

import torch

from rlhf_toy.demos.tiny_lm import (
    errors_by_shape,
    format_errors_by_shape,
    grpo_config,
    grpo_for_seconds,
    length_lesson,
    single_thread,
    warm_start,
)
from rlhf_toy.train.grpo import train_grpo

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--marks", type=float, nargs="+", default=[10.0, 30.0, 60.0])
    ap.add_argument("--quick-only", action="store_true", help="只测快速版")
    ap.add_argument("--lr", type=float, default=None, help="覆盖 GRPO 学习率")
    ap.add_argument(
        "--target", type=float, default=0.5, help="完整版热启动的停止正确率（warm_start 的 target_accuracy）"
    )
    ap.add_argument("--uniform", action="store_true", help="训练题均匀地抽（不按题型均衡），对照用")
    ap.add_argument("--length-lesson", action="store_true", help="只跑长度一课（每个种子三种 loss_type）")
    args = ap.parse_args()
    if args.length_lesson:
        for seed in args.seeds:
            t0, l0 = time.perf_counter(), load()
            runs = length_lesson(seed=seed, steps=40, every=5, ramble=0.2)
            print(
                f"seed {seed}: {time.perf_counter() - t0:.0f} s (load {l0}); wrong-answer length / truncated fraction"
            )
            for loss_type, rows in runs.items():
                print(f"  {loss_type:>7}: " + "  ".join(f"{r['length_wrong']:5.2f}/{r['truncated']:.2f}" for r in rows))
            print("  steps:   " + "  ".join(f"{r['step']:>10d}" for r in runs["grpo"]), flush=True)
        return 0
    overrides = {} if args.lr is None else {"learning_rate": args.lr}
    results = []
    with single_thread():
        for seed in args.seeds:
            row = {"seed": seed}
            t0, l0 = time.perf_counter(), load()
            task, warm = warm_start(seed, target_accuracy=args.target, balanced=not args.uniform)
            row["sft_s"], row["sft_load"] = time.perf_counter() - t0, l0
            # 快速版：同一个热启动 + 100 步 GRPO（CI 与页面用的设置）
            policy, quick_task = copy.deepcopy(warm), copy.deepcopy(task)
            acc0 = quick_task.evaluate(policy)["accuracy"]
            config = grpo_config(quick=True, max_completion_length=task.max_completion_length, **overrides)
            t0, l0 = time.perf_counter(), load()
            train_grpo(policy, quick_task, config)
            row["quick_grpo_s"], row["quick_grpo_load"] = time.perf_counter() - t0, l0
            row["quick_accuracy"] = (acc0, quick_task.evaluate(policy)["accuracy"])
            print(
                f"seed {seed}: SFT warm start {row['sft_s']:.1f} s (load {row['sft_load']}); "
                f"quick GRPO {config.steps} steps {row['quick_grpo_s']:.1f} s (load {row['quick_grpo_load']}), "
                f"accuracy {acc0:.3f} -> {row['quick_accuracy'][1]:.3f}",
                flush=True,
            )
            if not args.quick_only:
                policy = warm
                config = grpo_config(max_completion_length=task.max_completion_length, **overrides)
                row["grpo"] = grpo_for_seconds(policy, task, config, marks=tuple(args.marks))
                row["grpo_load_end"] = load()
                row["errors_by_shape"] = errors_by_shape(policy, task)
                marks = "  ".join(
                    f"{m['seconds']:.0f}s/step {m['step']}: acc {m['accuracy']:.3f} kl {m['kl']:.3f} "
                    f"ent {m['entropy']:.3f} len {m['completion_length']:.2f}"
                    for m in row["grpo"]
                )
                print(
                    f"seed {seed} full: GRPO {marks} (load at end {row['grpo_load_end']})\n"
                    "  by problem type at the end (greedy wrong / problems, all-wrong groups): "
                    + format_errors_by_shape(row["errors_by_shape"]),
                    flush=True,
                )
            row["peak_mb"] = peak_mb()
            results.append(row)
    if not args.quick_only:
        for i, mark in enumerate([0.0, *args.marks]):
            accs = [r["grpo"][i]["accuracy"] for r in results]
            print(
                f"t = {mark:4.0f} s: accuracy mean {statistics.fmean(accs):.3f}  "
                f"min {min(accs):.3f}  max {max(accs):.3f}  ({len(accs)} seeds)"
            )
    print(
        f"peak RSS {peak_mb():.0f} MB; torch {torch.__version__}, {torch.get_num_threads()} thread(s) outside the runs"
    )
    out = ROOT / "benchmarks" / "results" / "tiny_lm.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
