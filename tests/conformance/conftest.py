"""Conformance tests: rlhf_toy and the pinned TRL / verl (requirements-libs.txt) on the same tensors.

The libraries are required, not optional: a missing library or a private attribute that moved makes these tests
fail (an ImportError at collection, an AttributeError in the test), never skip. `make test` installs them.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest


def stub_ray() -> None:
    """`import verl` runs verl/protocol.py, which imports ray (250 MB) for one type annotation, `ray.ObjectRef`.

    Nothing the tests call uses ray, so a module with that one attribute stands in for it. With ray installed,
    the real one is used.
    """
    if "ray" not in sys.modules and importlib.util.find_spec("ray") is None:
        ray = types.ModuleType("ray")
        ray.ObjectRef = type("ObjectRef", (), {})
        sys.modules["ray"] = ray


stub_ray()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which turns the marker into the group
def pytest_collection_modifyitems(config, items):
    """One xdist worker runs every test that imports TRL or verl (`--dist loadgroup`): the imports cost seconds."""
    here = Path(__file__).resolve().parent
    for item in items:
        if here in item.path.resolve().parents:
            item.add_marker(pytest.mark.xdist_group("pinned_libs"))
