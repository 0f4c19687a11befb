"""Every cached run's key hashes all the code the run imports.

The caches in docs/data/ are keyed on a hash of listed source files (`HASHED` / `SOURCES` lists; see
rlhf_toy._code_hash). A list that misses a module the run imports would let that module change without the cache
going stale. Here the import graph (grimp, which import-linter uses) gives every module the run's entry points
import, directly or not; each must be in the list. Package `__init__` files (re-exports) and the tools
(input checks, threads, numeric settings, the hash itself) are not required.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest
from _scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "rlhf_toy"
TOOLS = {"rlhf_toy._checks", "rlhf_toy._threads", "rlhf_toy._code_hash", "rlhf_toy.numerics"}


_script = load_script


def _hashed_files(items) -> set[str]:
    out = set()
    for item in items:
        item = item.removeprefix("src/rlhf_toy/")
        path = PACKAGE / item
        files = path.rglob("*.py") if path.is_dir() else [path]
        out |= {f.relative_to(PACKAGE).as_posix() for f in files if f.name != "__init__.py"}
    return out


def _imported_files(graph, entries) -> set[str]:
    modules = set(entries)
    for entry in entries:
        modules |= graph.find_upstream_modules(entry)
    out = set()
    for module in modules - TOOLS:
        path = PACKAGE.parent / module.replace(".", "/")
        if not (path / "__init__.py").exists():
            out.add(path.with_suffix(".py").relative_to(PACKAGE).as_posix())
    return out


def _cases():
    from rlhf_toy.demos import distillation, offpolicy, symptoms, tools
    from rlhf_toy.studies import difficulty

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from figs import ch09_tiny_lm
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return {
        "comparison.json": (
            _script("run_experiments").HASHED,
            ["studies.comparison", "studies.health", "studies.overoptimisation"],
        ),
        "reasoning.json": (_script("run_reasoning").HASHED, ["demos.reasoning"]),
        "offpolicy.json": (offpolicy.SOURCES, ["demos.offpolicy"]),
        "distillation.json": (distillation.SOURCES, ["demos.distillation"]),
        "tools.json": (tools.SOURCES, ["demos.tools"]),
        "symptoms.json": (symptoms.HASHED, ["demos.symptoms"]),
        "trl.json": (_script("run_trl").SOURCES, ["integrations.trl", "demos.trl"]),
        "lora.json": (_script("run_lora").SOURCES, ["integrations.lora", "demos.trl"]),
        "tiny_lm_figures.json": (ch09_tiny_lm.TINY_LM_HASHED, ["demos.tiny_lm"]),
        "tiny_lm_runs.json": (_script("run_tiny_lm").HASHED, ["demos.tiny_lm"]),
        "tiny_lm_ramble0.json": (_script("run_tiny_lm_ramble0").HASHED, ["demos.tiny_lm"]),
        "baseline_shared.json": (_script("run_baseline_shared").HASHED, ["demos.tiny_lm", "train.reinforce"]),
        "ratio_shaping_runs.json": (
            _script("run_ratio_shaping").HASHED,
            ["studies.ratio_shaping", "train.grpo_family", "demos.tiny_lm"],
        ),
        "your_run_settings.json": (difficulty.SOURCES, ["studies.difficulty"]),
        "symptoms_more.json": (_script("run_symptoms_more").HASHED, ["studies.symptoms_more"]),
    }


CASES = _cases()


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("rlhf_toy")


@pytest.mark.parametrize("cache", sorted(CASES))
def test_cache_key_hashes_every_module_the_run_imports(graph, cache):
    hashed, entries = CASES[cache]
    missing = _imported_files(graph, [f"rlhf_toy.{e}" for e in entries]) - _hashed_files(hashed)
    assert not missing, f"{cache}: add to its list of hashed sources: {sorted(missing)}"


def test_the_check_finds_a_missing_module(graph):
    hashed, entries = CASES["tools.json"]
    fewer = [item for item in hashed if not item.endswith("multi_turn.py")]
    missing = _imported_files(graph, [f"rlhf_toy.{e}" for e in entries]) - _hashed_files(fewer)
    assert missing == {"rollout/multi_turn.py"}
