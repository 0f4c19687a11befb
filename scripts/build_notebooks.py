"""Build docs/notebooks/*.ipynb from their jupytext sources notebooks/*.py.

    python scripts/build_notebooks.py            # convert and execute every notebook
    python scripts/build_notebooks.py grpo       # only notebooks/grpo.py
    python scripts/build_notebooks.py --check    # exit 1 if a notebook is missing, stale, unexecuted or orphaned

The output is deterministic (cell ids from the cell index, no execution timings), so a rebuild
without changes leaves git clean. Kernels run with the repository root as working directory
and MPLBACKEND unset, so plots are embedded inline.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jupytext
from nbclient import NotebookClient

from rlhf_toy.numerics import pin_numerics

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "notebooks"
DST = ROOT / "docs" / "notebooks"


def cell_inputs(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def build(py: Path) -> Path:
    nb = jupytext.read(py)
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.pop("jupytext", None)
    os.environ.pop("MPLBACKEND", None)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # 存下的输出里不要带耗时的进度条
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        allow_errors=False,
        record_timing=False,
        resources={"metadata": {"path": str(ROOT)}},
    ).execute()
    out = DST / f"{py.stem}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(nb, out, fmt="ipynb")
    return out


def problems() -> list[str]:
    found = []
    for py in sorted(SRC.glob("*.py")):
        ipynb = DST / f"{py.stem}.ipynb"
        if not ipynb.exists():
            found.append(f"missing: {ipynb.relative_to(ROOT)} (run: python scripts/build_notebooks.py {py.stem})")
            continue
        built = jupytext.read(ipynb)
        if cell_inputs(jupytext.read(py)) != cell_inputs(built):
            found.append(
                f"out of sync: {ipynb.relative_to(ROOT)} != {py.relative_to(ROOT)} "
                f"(run: python scripts/build_notebooks.py {py.stem})"
            )
        elif any(c.cell_type == "code" and c.source.strip() and c.get("execution_count") is None for c in built.cells):
            found.append(f"not executed: {ipynb.relative_to(ROOT)}")
    for ipynb in sorted(DST.glob("*.ipynb")):
        if not (SRC / f"{ipynb.stem}.py").exists():
            found.append(f"orphan: {ipynb.relative_to(ROOT)} has no notebooks/{ipynb.stem}.py")
    return found


def main() -> int:
    pin_numerics()  # kernels inherit the book's numeric settings (they may import torch before rlhf_toy)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="notebook names (default: all)")
    ap.add_argument("--check", action="store_true", help="only check, write nothing")
    args = ap.parse_args()
    if args.check:
        found = problems()
        print("\n".join(found) or "notebooks: all in sync and executed")
        return 1 if found else 0
    sources = [SRC / f"{n}.py" for n in args.names] or sorted(SRC.glob("*.py"))
    for py in sources:
        t0 = time.perf_counter()
        out = build(py)
        print(f"{py.relative_to(ROOT)} -> {out.relative_to(ROOT)} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
