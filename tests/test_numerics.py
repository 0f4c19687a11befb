"""The book's numbers do not depend on the CPU: ATen, MKL and oneDNN are pinned (src/rlhf_toy/numerics.env).

The machine-dependent part of each library's dispatch can be emulated on one machine: MKL_ENABLE_INSTRUCTIONS
caps the instruction set MKL's AUTO dispatch may use, as on a CPU without AVX-512 (or without AVX2), and
ONEDNN_MAX_CPU_ISA does the same for oneDNN. With the pins, 120 SFT steps of chapter 9's warm start (a chaotic
optimisation: the most sensitive computation in the book; the control below shows that 30 steps already turn a
last-bit difference into different weights) must end in bit-identical weights under every cap; without the pins the
same emulation changes the weights, which shows that the check can fail. (The full warm start, up to 800 steps, was
checked the same way when the pins were introduced; 120 steps keep the test within the CI budget.)
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from rlhf_toy.numerics import numeric_env, pin_numerics

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


def test_without_the_pins_the_same_emulation_changes_the_weights():
    # Control: the caps above are not no-ops. 30 SFT steps are enough to see a different last bit.
    unpinned_mkl = _fingerprints(
        30,
        _env(MKL_CBWR="AUTO", MKL_ENABLE_INSTRUCTIONS="AVX2"),
        _env(MKL_CBWR="AUTO", MKL_ENABLE_INSTRUCTIONS="SSE4_2"),
    )
    capped_onednn = _fingerprints(30, _env(ONEDNN_MAX_CPU_ISA="AVX2"), _env(ONEDNN_MAX_CPU_ISA="SSE41"))
    assert unpinned_mkl[0] != unpinned_mkl[1]
    assert capped_onednn[0] != capped_onednn[1]
