"""The book's numbers do not depend on the CPU.

Two kinds of check. **Op fingerprints** (`tests/numerics/`): every op the pages depend on, hashed at the chapter-9
model's shapes, then three SFT steps of the chapter-9 policy and two steps of chapters 4 and 6 on the bandit, must
give the hashes in `expected.txt`; a CPU on which a number would drift fails here with the op's name. The expected
hashes agree with the AMD EPYC reference (`amd-epyc-avx2.txt`) on every op both list.

**Emulated CPUs**: ATen, MKL and oneDNN are pinned (src/rlhf_toy/numerics.env). MKL_ENABLE_INSTRUCTIONS caps the
instruction set MKL's AUTO dispatch may use and ONEDNN_MAX_CPU_ISA does the same for oneDNN. With the pins, 120 SFT
steps of chapter 9's warm start (a chaotic optimisation: 30 steps already turn a last-bit difference into different
weights) must end in bit-identical weights under every cap; without the pins the same emulation changes the weights,
which shows that the check can fail.

The one op the pins cannot fix is `torch.sqrt` on a float tensor: torch hands it to MKL's vector math, whose
`COMPATIBLE` branch is not correctly rounded and gives other bits on AMD than on Intel. Adam needs a square root
every step, so the package builds every Adam/AdamW with `fused=True` (its CPU kernel takes the IEEE square root).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from rlhf_toy.numerics import numeric_env, pin_numerics

ROOT = Path(__file__).resolve().parents[1]
NUMERICS = ROOT / "tests" / "numerics"

# Prints the held-out accuracy and a hash of every weight after the chapter-9 warm start (or after `steps` SFT
# steps when given): any difference in any last bit changes the hash.
FINGERPRINT = """
import hashlib, sys
import rlhf_toy
import torch
from rlhf_toy.demos.tiny_lm import warm_start, sft_config
from rlhf_toy.tasks.addition import AdditionTask
from rlhf_toy.train.sft import SFTConfig, train_sft
steps = int(sys.argv[1])
if steps:
    torch.manual_seed(0)
    task = AdditionTask(seed=0, balanced=True)
    policy = task.make_policy()
    train_sft(policy, task, SFTConfig(**{**sft_config().__dict__, "steps": steps}))
else:
    task, policy = warm_start(0)
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in policy.parameters())).hexdigest()[:16]
print(digest, torch.backends.cpu.get_cpu_capability())
"""

PINNED = numeric_env()


def _env(**overrides: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PINNED}
    env.update(PINNED)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _fingerprints(steps: int, *envs: dict[str, str]) -> list[str]:
    procs = [
        subprocess.Popen([sys.executable, "-c", FINGERPRINT, str(steps)], env=env, stdout=subprocess.PIPE, text=True)
        for env in envs
    ]
    outs = [p.communicate(timeout=600)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return outs


def test_this_process_runs_with_the_pinned_settings():
    assert pin_numerics() == PINNED
    assert {k: os.environ[k] for k in PINNED} == PINNED
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"


def test_importing_rlhf_toy_applies_the_settings_and_respects_the_readers_own():
    code = "import os, rlhf_toy; print(os.environ['MKL_CBWR'], os.environ['ATEN_CPU_CAPABILITY'])"
    bare = {k: v for k, v in os.environ.items() if k not in PINNED}
    out = subprocess.run([sys.executable, "-c", code], env=bare, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [PINNED["MKL_CBWR"], PINNED["ATEN_CPU_CAPABILITY"]]
    out = subprocess.run(
        [sys.executable, "-c", code], env={**bare, "MKL_CBWR": "AUTO"}, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[0] == "AUTO"


def test_each_library_reports_the_pinned_code_path():
    code = "import rlhf_toy, torch; torch.nn.functional.gelu(torch.ones(64, 64) @ torch.ones(64, 64))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(MKL_VERBOSE="1", ONEDNN_VERBOSE="1"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "CNR:COMPATIBLE" in out  # MKL's SGEMM runs on its vendor-independent branch
    assert "eltwise,jit:avx2," in out  # oneDNN's GELU uses its AVX2 JIT code, whatever the CPU has


def test_sft_warm_start_is_bit_identical_under_emulated_cpus():
    native, avx2_only, sse_only = _fingerprints(
        120,
        _env(),
        _env(MKL_ENABLE_INSTRUCTIONS="AVX2"),
        _env(MKL_ENABLE_INSTRUCTIONS="SSE4_2", ONEDNN_MAX_CPU_ISA="AVX2"),
    )
    assert native == avx2_only == sse_only


def _mkl_branch(env: dict[str, str]) -> str:
    """The code branch MKL runs under `env`, as its verbose header names it (e.g. `... (Intel(R) AVX2) enabled ...`)."""
    code = "import torch; torch.ones(64, 64) @ torch.ones(64, 64)"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**env, "MKL_VERBOSE": "1"}, capture_output=True, text=True, check=True
    ).stdout
    header = out.splitlines()[0]
    return header.split(" for Intel(R) 64 architecture ", 1)[-1].split(", Lnx", 1)[0]


def test_without_the_pins_the_same_emulation_changes_the_weights():
    # Control: each pin matters on this CPU, and each cap is a real one. 30 SFT steps show a different last bit.
    # ATen: its generic (non-vectorised) kernels exist on every x86-64 CPU.
    aten = _fingerprints(30, _env(), _env(ATEN_CPU_CAPABILITY="default"))
    assert aten[0] != aten[1], "ATEN_CPU_CAPABILITY=default should change the weights"
    # oneDNN: its SSE4.1 JIT code exists below the AVX2 cap on every CPU the pins allow.
    onednn = _fingerprints(30, _env(ONEDNN_MAX_CPU_ISA="AVX2"), _env(ONEDNN_MAX_CPU_ISA="SSE41"))
    assert onednn[0] != onednn[1], "ONEDNN_MAX_CPU_ISA=SSE41 should change GELU and so the weights"
    # MKL: unpinned, its AUTO branch follows the CPU; capped at SSE4.2 it must run other code, unless this CPU's
    # AUTO branch already is that code (then there is nothing below it to emulate: say so rather than pass).
    auto, capped = _env(MKL_CBWR="AUTO"), _env(MKL_CBWR="AUTO", MKL_ENABLE_INSTRUCTIONS="SSE4_2")
    branches = _mkl_branch(auto), _mkl_branch(capped)
    if branches[0] == branches[1]:
        pytest.skip(f"MKL's AUTO branch on this CPU is already {branches[0]!r}: no lower cap to emulate")
    mkl = _fingerprints(30, auto, capped)
    assert mkl[0] != mkl[1], f"MKL branches {branches} gave the same weights"


def _fingerprint_lines(text: str) -> dict[str, str]:
    """`name -> hash` for the lines of a fingerprint file (`name  (shape)  hash`); comment lines are skipped.

    A module's forward hook fires more than once per step, so a repeated name gets its occurrence: `name [2]`.
    """
    lines: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            head, digest = line.rsplit(None, 1)
            name = head.rsplit("(", 1)[0].strip() if head.rstrip().endswith(")") else head.strip()
            seen[name] += 1
            lines[name if seen[name] == 1 else f"{name} [{seen[name]}]"] = digest
    return lines


def test_op_fingerprints_match_the_expected_ones():
    out = subprocess.run(
        [sys.executable, str(NUMERICS / "fingerprint.py")], env=_env(), capture_output=True, text=True, check=True
    ).stdout
    got, want = _fingerprint_lines(out), _fingerprint_lines((NUMERICS / "expected.txt").read_text(encoding="utf-8"))
    assert list(got) == list(want), "fingerprint.py and expected.txt list different ops: regenerate expected.txt"
    drifted = [name for name in want if got[name] != want[name]]
    assert not drifted, (
        f"op {drifted[0]!r} differs on this CPU ({len(drifted)} of {len(want)} lines differ; "
        f"first ones: {drifted[:5]}): the pages' numbers would drift here"
    )


def test_expected_fingerprints_agree_with_the_amd_reference():
    # The expected hashes were made on an Intel CPU with AVX-512; the reference on an AMD EPYC with AVX2 only.
    ours = _fingerprint_lines((NUMERICS / "expected.txt").read_text(encoding="utf-8"))
    amd = _fingerprint_lines((NUMERICS / "amd-epyc-avx2.txt").read_text(encoding="utf-8"))
    common = [name for name in ours if name in amd]
    assert len(common) == 148  # the single ops but two; initial weights; step 1: batch, forward (each call), gradients
    assert [name for name in common if ours[name] != amd[name]] == []
    # What the reference has and we do not: the two vendor-dependent ops, and what the unfused AdamW's first step
    # made of the weights (its square root came from them).
    left_out = {name for name in amd if name not in ours}
    assert {"sqrt", "adamw 3 steps"} <= left_out
    assert all(n in ("sqrt", "adamw 3 steps") or re.match(r"s1 param |s[23] ", n) for n in left_out), left_out


SQRT_AND_ADAM = """
import hashlib, sys, rlhf_toy, torch
h = lambda t: hashlib.sha256(t.detach().numpy().tobytes()).hexdigest()[:16]
a = torch.rand(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64).float() * 4
wrong = (a.sqrt() != a.double().sqrt().float()).sum().item()  # float64 rounding to float32 is exact for sqrt
out = [str(wrong), h(a.sqrt())]
for fused in (False, True):
    torch.manual_seed(0)
    w, p = torch.randn(192, 64), torch.nn.Parameter(torch.randn(192, 64))
    opt = torch.optim.AdamW([p], lr=3e-3, fused=fused)
    for _ in range(3):
        opt.zero_grad(); (p.sin() * w).sum().backward(); opt.step()
    out.append(h(p))
print(*out)
"""


def test_the_vendor_dependent_op_is_mkls_sqrt_and_fused_adam_avoids_it():
    # torch.sqrt follows MKL's branch; under the pin (COMPATIBLE) it is not correctly rounded. The fused AdamW
    # does not call MKL at all: the same bits under every MKL branch, equal to the correctly rounded result.
    envs = [_env(), _env(MKL_CBWR="AUTO")]
    outs = [
        subprocess.run(
            [sys.executable, "-c", SQRT_AND_ADAM], env=e, capture_output=True, text=True, check=True
        ).stdout.split()
        for e in envs
    ]
    (wrong, sqrt_pinned, unfused_pinned, fused_pinned), (_, sqrt_auto, unfused_auto, fused_auto) = outs
    assert int(wrong) > 0  # MKL COMPATIBLE's sqrt: an approximation, not the IEEE square root
    assert fused_pinned == fused_auto
    if _mkl_branch(envs[0]) != _mkl_branch(envs[1]):
        assert sqrt_pinned != sqrt_auto and unfused_pinned != unfused_auto


OPTIMIZER = re.compile(r"torch\.optim\.AdamW?\((?:[^()]|\([^()]*\))*\)", re.S)
SQRT = re.compile(r"(?<!math)\.sqrt\(")


def test_every_adam_in_the_book_is_fused_and_no_tensor_sqrt_reaches_a_page():
    sources = [
        *(ROOT / "src").rglob("*.py"),
        *(ROOT / "scripts").glob("*.py"),
        *(ROOT / "notebooks").glob("*.py"),
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "benchmarks").glob("tiny_lm.py"),
    ]
    unfused = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in sources
        for m in OPTIMIZER.finditer(path.read_text(encoding="utf-8"))
        if "fused=True" not in m.group(0)
    ]
    assert unfused == []
    code = (ROOT / "src").rglob("*.py")
    assert [str(p.relative_to(ROOT)) for p in code if SQRT.search(p.read_text(encoding="utf-8"))] == []
