"""Benchmark: the package's seed demo against the seed notebook's own inline code.

    .venv/bin/python benchmarks/seed.py [--repeat 5] [--with-make]

Runs, alternating, `python -m rlhf_toy seed` and `python benchmarks/seed_reference.py` (each a fresh
process, so both pay the same torch import), checks they print the same lines, and reports the wall
time of each (median, min, max) and the ratio package / inline (target: <= 1.0). It also times the
training part alone in one process (import cost excluded). With --with-make it also times
`mkdocs build --strict` and `make test`. This is a benchmark, not a test: nothing here asserts speed.
"""

from __future__ import annotations

import argparse
import os
import runpy
import statistics
import subprocess
import sys
import time
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
COMMANDS = {
    "package": [PY, "-m", "rlhf_toy", "seed"],
    "inline": [PY, str(ROOT / "benchmarks" / "seed_reference.py")],
}


def wall(cmd: list[str], **kwargs) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT, **kwargs).stdout
    return time.perf_counter() - t0, out


def in_process(repeat: int) -> dict[str, list[float]]:
    from rlhf_toy.demos import run_seed

    times: dict[str, list[float]] = {"package": [], "inline": []}
    for _ in range(repeat):
        for name in times:
            t0 = time.perf_counter()
            with redirect_stdout(StringIO()):
                run_seed() if name == "package" else runpy.run_path(str(ROOT / "benchmarks" / "seed_reference.py"))
            times[name].append(time.perf_counter() - t0)
    return times


def summary(name: str, xs: list[float]) -> str:
    return f"{name:>28}: median {statistics.median(xs):6.2f} s   min {min(xs):6.2f}   max {max(xs):6.2f}   (n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--with-make", action="store_true")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}, cores {os.cpu_count()}")

    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    outputs = set()
    for _ in range(args.repeat):
        for name, cmd in COMMANDS.items():
            t, out = wall(cmd)
            times[name].append(t)
            outputs.add(out)
    assert len(outputs) == 1, "the package and the inline seed printed different lines"
    for name, xs in times.items():
        print(summary(f"{name} (fresh process)", xs))
    ratio = statistics.median(times["package"]) / statistics.median(times["inline"])
    print(f"{'ratio package / inline':>28}: {ratio:.2f}")

    warm = in_process(args.repeat)
    for name, xs in warm.items():
        print(summary(f"{name} (in process, warm)", xs[1:] or xs))
    ratio = statistics.median(warm["package"][1:] or warm["package"]) / statistics.median(warm["inline"][1:] or warm["inline"])
    print(f"{'ratio package / inline':>28}: {ratio:.2f}")

    if args.with_make:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        t, _ = wall([PY, "-m", "mkdocs", "build", "--strict", "-d", "/tmp/rlhf-toy-bench-site"], env=env)
        print(f"{'mkdocs build --strict':>28}: {t:6.2f} s")
        t, _ = wall(["make", "test"], env=env)
        print(f"{'make test':>28}: {t:6.2f} s")


if __name__ == "__main__":
    main()
