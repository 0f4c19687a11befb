"""Seed parity: `python -m rlhf_toy seed` prints exactly what the original seed notebook printed
(torch 2.13.0, CPU), now computed through the package's functions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlhf_toy.demos import run_seed

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = ROOT / "tests" / "data" / "seed_output.txt"
SHARED = ROOT.parent / "shared" / "seeds" / "rlhf_toy_seed.output.txt"


def test_seed_demo_matches_seed_output_line_for_line(capsys):
    run_seed(seed=0)
    got = capsys.readouterr().out.splitlines()
    want = EXPECTED.read_text(encoding="utf-8").splitlines()
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True), start=1):
        assert g == w, f"line {i} differs"


def test_our_copy_of_the_seed_output_is_the_original():
    if SHARED.exists():  # the original lives outside the repository; CI has it beside the clone
        assert EXPECTED.read_bytes() == SHARED.read_bytes()


def test_quick_mode_prints_the_first_report_of_each_phase(capsys):
    run_seed(seed=0, quick=True)
    got = capsys.readouterr().out.splitlines()
    want = EXPECTED.read_text(encoding="utf-8").splitlines()
    # GRPO: initial line and step 20 agree with the full run (same draws); DPO starts from a later RNG state.
    assert got[:2] == want[:2]
    assert len(got) == 4 and got[2].startswith("[DPO ] 初始") and got[3].startswith("[DPO ] step  50")


def test_command_line_entry_point_prints_the_same_lines():
    out = subprocess.run([sys.executable, "-m", "rlhf_toy", "seed"], capture_output=True, text=True, check=True)
    assert out.stdout == EXPECTED.read_text(encoding="utf-8")
