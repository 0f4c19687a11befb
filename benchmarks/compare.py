"""Benchmark: chapter 8's experiment in quick and full mode (wall and CPU time, with the machine's load).

    .venv/bin/python benchmarks/compare.py [--full]

Quick mode is what CI runs (targets: <= 30 s); full mode writes nothing here (target: <= 5 min; the cache is written
by scripts/run_experiments.py). Each mode runs in a fresh process, so the torch import is included. The load average
is printed before and after, because the 2 cores of the development machine are shared. Nothing here asserts speed.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = """
import sys
sys.argv = ["run_experiments.py"] + sys.argv[1:]
sys.path.insert(0, {scripts!r})
import run_experiments
spec = run_experiments.QUICK if "--quick" in sys.argv else run_experiments.FULL
data = run_experiments.run(spec)
print(data["timings"])
"""


def timed(mode: str) -> None:
    load_before = os.getloadavg()
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    args = [sys.executable, "-c", CODE.format(scripts=str(ROOT / "scripts"))] + (["--quick"] if mode == "quick" else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT).stdout.strip().splitlines()[-1]
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime - usage_before.ru_utime + usage.ru_stime - usage_before.ru_stime
    load_after = os.getloadavg()
    print(
        f"{mode:>5}: {wall:6.1f} s wall, {cpu:6.1f} s CPU; parts {out}; "
        f"load (1 min) {load_before[0]:.2f} -> {load_after[0]:.2f} on {os.cpu_count()} cores"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also time full mode (a few minutes)")
    args = parser.parse_args()
    timed("quick")
    if args.full:
        timed("full")
    return 0


if __name__ == "__main__":
    sys.exit(main())
