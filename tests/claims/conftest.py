"""Claim tests: what the pages say about TRL and verl, checked against the pinned libraries (requirements-libs.txt).

One file per page (test_<page>_page.py); each test's comment names the page and the sentence it backs, and the
pages' “与 TRL 的差异” boxes name the tests. A missing library fails the collection, it never skips.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest


def stub_ray() -> None:
    """`import verl` imports ray for one type annotation; nothing checked here uses it (as in tests/conformance)."""
    if "ray" not in sys.modules and importlib.util.find_spec("ray") is None:
        ray = types.ModuleType("ray")
        ray.ObjectRef = type("ObjectRef", (), {})
        sys.modules["ray"] = ray


stub_ray()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which turns the marker into the group
def pytest_collection_modifyitems(config, items):
    """The same xdist worker as tests/conformance (`--dist loadgroup`): TRL and verl are imported once."""
    here = Path(__file__).resolve().parent
    for item in items:
        if here in item.path.resolve().parents:
            item.add_marker(pytest.mark.xdist_group("pinned_libs"))
