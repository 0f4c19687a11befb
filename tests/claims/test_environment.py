"""The test environment is the one requirements-libs.txt describes: the pinned versions are installed, torch is the
lock's, and `pip check` reports exactly the lines documented in requirements-lock.txt and requirements-libs.txt."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from .pinned import LIBS, LOCK, ROOT


def test_pinned_library_versions_are_installed():
    wrong = {name: (pin, version(name)) for name, pin in LIBS.items() if version(name) != pin}
    assert not wrong, f"installed versions differ from requirements-libs.txt (pin, installed): {wrong}; run make test"


def test_torch_is_the_locked_cpu_build():
    assert version("torch").split("+")[0] == LOCK["torch"]
    assert "trl" not in LOCK and "verl" not in LOCK  # the site build (make serve) does not install them


def test_pip_check_reports_only_the_documented_lines():
    lines = [
        line
        for name in ("requirements-lock.txt", "requirements-libs.txt")
        for line in (ROOT / name).read_text(encoding="utf-8").splitlines()
    ]
    documented = sorted(line.removeprefix("# pip-check: ") for line in lines if line.startswith("# pip-check: "))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"], capture_output=True, text=True
    )
    reported = sorted(line for line in result.stdout.splitlines() if line.strip())
    assert reported == documented, (
        "pip check differs from the '# pip-check:' lines of requirements-lock.txt and requirements-libs.txt\n"
        f"reported but not documented: {sorted(set(reported) - set(documented))}\n"
        f"documented but not reported: {sorted(set(documented) - set(reported))}"
    )
