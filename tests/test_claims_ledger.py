"""docs/claims.md is generated from the claim and conformance tests (scripts/claims_ledger.py) and must be current."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ledger():
    spec = importlib.util.spec_from_file_location("claims_ledger", ROOT / "scripts" / "claims_ledger.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_committed_ledger_is_generated_from_the_current_tests():
    ledger = _ledger()
    expected = ledger.render(ledger.collect())
    assert (ROOT / "docs" / "claims.md").read_text(encoding="utf-8") == expected, "run python scripts/claims_ledger.py"


def test_every_claim_test_that_touches_a_library_is_in_the_ledger():
    claims = _ledger().collect()
    ids = {c.test_id for c in claims}
    assert "tests/claims/test_grpo_page.py::test_grpo_config_defaults" in ids
    assert "tests/conformance/test_grpo_loss_trl.py::test_grpo_loss_matches_trl" in ids
    # a test of the page itself (footnote syntax) names no library and is left out
    assert "tests/claims/test_overview_page.py::test_footnote_definitions_do_not_swallow_body_text" not in ids
    assert all(c.libraries for c in claims)
