"""The package's layers (CONTRIBUTING.md, "新代码放在哪里"), checked with import-linter.

The contracts live in pyproject.toml (`[tool.importlinter]`): higher layers may import lower ones, never the reverse,
and no sibling modules or packages import each other in a cycle. A copy of the package with one deliberate violation
shows that the check fails when a layer is crossed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "rlhf_toy"
TOOLS = {"__init__.py", "__main__.py", "_checks.py", "_threads.py", "_code_hash.py", "numerics.py"}


def _lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_layer_and_acyclic_contracts_are_kept():
    result = _lint_imports(ROOT, ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_diagnose_importing_a_training_loop_breaks_the_contract(tmp_path):
    # rlhf_toy.diagnose sits beside exercises/integrations but reads logs only: a forbidden contract keeps it from
    # importing any other layer (readers run it on their own logs without the book's training code)
    shutil.copytree(PACKAGE, tmp_path / "src" / "rlhf_toy", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    rules = tmp_path / "src" / "rlhf_toy" / "diagnose" / "rules.py"
    rules.write_text(rules.read_text(encoding="utf-8") + "\nimport rlhf_toy.train.grpo  # noqa\n", encoding="utf-8")
    result = _lint_imports(tmp_path, tmp_path / "src")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "rlhf_toy.diagnose.rules -> rlhf_toy.train.grpo" in result.stdout


def test_a_lower_layer_importing_a_study_breaks_the_contract(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "src" / "rlhf_toy", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")  # import-linter reads [tool.importlinter]
    kl = tmp_path / "src" / "rlhf_toy" / "estimators" / "kl.py"
    kl.write_text(kl.read_text(encoding="utf-8") + "\nimport rlhf_toy.studies.health  # noqa\n", encoding="utf-8")
    result = _lint_imports(tmp_path, tmp_path / "src")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "rlhf_toy.estimators.kl -> rlhf_toy.studies.health" in result.stdout


def test_the_top_level_holds_only_the_tools_beside_the_layers():
    modules = {p.name for p in PACKAGE.glob("*.py")}
    assert modules == TOOLS, f"new top-level module(s) {sorted(modules - TOOLS)}: put them in a layer (CONTRIBUTING.md)"
    layers = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert layers == sorted(
        [
            "demos",
            "diagnose",
            "estimators",
            "exercises",
            "integrations",
            "losses",
            "models",
            "policies",
            "rollout",
            "studies",
        ]
        + ["tasks", "train"]
    )
