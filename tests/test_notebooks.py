"""Chapter notebooks: generated from notebooks/*.py, executed, in sync, with the Colab badge and the
install cell; the install cell really installs rlhf_toy into a clean environment (from a local wheel)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks").glob("*.py"))
sys.path.insert(0, str(ROOT / "scripts"))
import build_notebooks  # noqa: E402


def repository() -> str:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    # mkdocs.yml uses !ENV and python tags; read only the extra block.
    extra = text.split("\nextra:\n", 1)[1].split("\n\n", 1)[0]
    return yaml.safe_load("extra:\n" + extra)["extra"]["repository"]


def test_every_notebook_is_in_sync_and_executed():
    assert build_notebooks.problems() == []


def test_every_notebook_is_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for py in SOURCES:
        assert f"notebooks/{py.stem}.ipynb" in nav, py.name


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.stem)
def test_first_cells_are_the_colab_badge_and_the_install_cell(py):
    nb = jupytext.read(py)
    badge, install = nb.cells[0], nb.cells[2] if nb.cells[1].cell_type == "markdown" else nb.cells[1]
    assert badge.cell_type == "markdown" and "colab-badge" in badge.metadata.get("tags", [])
    url = f"https://colab.research.google.com/github/{repository()}/blob/main/docs/notebooks/{py.stem}.ipynb"
    assert url in badge.source
    assert install.cell_type == "code"
    assert 'importlib.util.find_spec("rlhf_toy") is None' in install.source
    assert f"git+https://github.com/{repository()}" in install.source


def test_install_cell_installs_the_package_in_a_clean_environment(tmp_path):
    """What Colab does: rlhf_toy is missing, torch is present; the cell pip-installs the package."""
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(ROOT),
        ],
        check=True,
    )
    wheel = next(wheel_dir.glob("rlhf_toy-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Stand-in for Colab's preinstalled torch: expose this environment's torch, but not rlhf_toy.
    import torch

    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "colab_torch.pth").write_text(str(Path(torch.__file__).parents[1]) + "\n")
    check = "import importlib.util, sys; sys.exit(importlib.util.find_spec('rlhf_toy') is not None)"
    assert subprocess.run([str(python), "-c", check]).returncode == 0, "rlhf_toy must be missing at first"

    install_cell = jupytext.read(ROOT / "notebooks" / "overview.py").cells[2].source
    script = (
        install_cell + "\nfrom rlhf_toy import group_advantages\nimport torch\n"
        "print(group_advantages(torch.tensor([1.0, 0.0]), num_generations=2).tolist())\n"
    )
    env = {**os.environ, "RLHF_TOY_SOURCE": str(wheel), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    out = subprocess.run([str(python), "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    a = 0.5 / (0.5**0.5 + 1e-4)  # (r - mean) / (Bessel std + 1e-4) for rewards [1, 0]
    got = [float(v) for v in out.stdout.strip().strip("[]").split(",")]
    assert got == pytest.approx([a, -a], rel=1e-6)
