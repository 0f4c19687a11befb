"""第 2–4 章演示的计时：`python -m rlhf_toy {reinforce,rloo,reward-model,ppo} [--quick]`。

    python benchmarks/demos.py              # 每个演示、快速版与完整版各跑 3 次
    python benchmarks/demos.py --repeat 1   # 只跑 1 次

两种时间：
* `wall`：子进程的墙钟时间（含启动 Python、`import torch` 与第一次构造优化器时 torch 的延迟导入），即读者在命令行里等的时间；
* `in-process`：同一进程里、预热之后只调用演示函数本身的时间（目标：快速版 ≤ 3 s，完整版 ≤ 15 s）。

每次计时都记下 `os.getloadavg()`：机器被别的进程占用时时间会被拉长，请把负载和时间一起读。
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import time

DEMOS = ("reinforce", "rloo", "reward-model", "ppo")


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def wall(demo: str, quick: bool) -> float:
    cmd = [sys.executable, "-m", "rlhf_toy", demo] + (["--quick"] if quick else [])
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def in_process(demo: str, quick: bool) -> float:
    from rlhf_toy.demos import DEMOS as FUNCTIONS

    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        FUNCTIONS[demo](seed=0, quick=quick)
        return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    in_process("rloo", quick=True)  # 预热：import 与 torch 的延迟导入
    print(f"{'demo':>12}  {'mode':>5}  {'wall median (min–max) s':>24}  {'in-process median s':>19}  load")
    startup = []
    for _ in range(args.repeat):  # 基线：只启动、import torch，不跑任何演示
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rlhf_toy", "--help"], check=True, stdout=subprocess.DEVNULL)
        startup.append(time.perf_counter() - start)
    spread = f"{statistics.median(startup):6.2f} ({min(startup):.2f}–{max(startup):.2f})"
    print(f"{'(startup)':>12}  {'--help':>5}  {spread:>24}  {'—':>19}  {load()}", flush=True)
    for demo in DEMOS:
        for quick in (True, False):
            walls = [wall(demo, quick) for _ in range(args.repeat)]
            insides = [in_process(demo, quick) for _ in range(args.repeat)]
            mode = "quick" if quick else "full"
            spread = f"{statistics.median(walls):6.2f} ({min(walls):.2f}–{max(walls):.2f})"
            print(f"{demo:>12}  {mode:>5}  {spread:>24}  {statistics.median(insides):19.2f}  {load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
