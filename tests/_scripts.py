"""Load a script from scripts/ as a module, for the tests that check a cache against the code that wrote it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """Execute `scripts/<name>.py` as a fresh module; scripts/ is on `sys.path` only while it runs (scripts import
    each other, e.g. `run_tiny_lm_ramble0` imports `run_tiny_lm`)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module
