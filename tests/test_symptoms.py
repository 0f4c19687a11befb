"""Chapter 14 (docs/reading-logs.md): the symptom runs in docs/data/symptoms.json and what `diagnose` says about them."""

from __future__ import annotations

import json

import pytest

from rlhf_toy._code_hash import sources_hash
from rlhf_toy.demos.reading_logs import CACHE, load_runs
from rlhf_toy.demos.symptoms import HASHED
from rlhf_toy.diagnose import diagnose

# run -> (the rule that must be detected, the step the page names)
SYMPTOMS = {
    "loss_zero": ("loss_zero_or_negative", 1),
    "kl_explodes": ("kl_explodes", 2),
    "entropy_collapse": ("entropy_collapse", 2),
    "zero_std": ("no_learning_signal", 1),
    "length_collapse": ("length_collapse", None),
    "truncation": ("truncation", 1),
}
HEALTHY = (
    "healthy",
    "scratch_healthy",
    "loss_zero_lr0",
)  # loss_zero_lr0: the policy never moves; no entropy alarm from batch noise


@pytest.fixture(scope="module")
def runs():
    return load_runs()


def test_cache_is_from_this_code():
    cache = json.loads(CACHE.read_text(encoding="utf-8"))
    assert cache["code_hash"] == sources_hash(HASHED), "stale: run scripts/run_symptoms.py"
    assert cache["cpu_seconds"] < 300


@pytest.mark.parametrize("run", sorted(SYMPTOMS))
def test_each_symptom_run_is_detected(runs, run):
    rule, step = SYMPTOMS[run]
    found = {f.symptom: f for f in diagnose(runs[run]).findings if f.status == "detected"}
    assert rule in found
    if step is not None:
        assert found[rule].step == step


@pytest.mark.parametrize("run", HEALTHY)
def test_healthy_runs_have_no_warning(runs, run):
    warnings = [f.symptom for f in diagnose(runs[run]).findings if f.status == "detected" and f.severity == "warning"]
    assert warnings == []


def test_the_loss_rule_is_info_and_the_healthy_run_with_kl_is_clean(runs):
    # page, symptom 1: the loss rule is a hint; β > 0 makes the loss positive, so the healthy run is clean of it
    findings = {f.symptom: f for f in diagnose(runs["healthy"]).findings}
    assert findings["loss_zero_or_negative"].status == "clean"
    assert findings["loss_zero_or_negative"].severity == "info"


def test_the_controls_isolate_the_cause(runs):
    # symptom 1: with learning rate 0 the loss is 0 as well and the held-out accuracy never moves
    acc = [r["accuracy"] for r in runs["loss_zero_lr0"] if "accuracy" in r]
    assert len(set(acc)) == 1 and max(abs(r["loss"]) for r in runs["loss_zero_lr0"]) < 1e-4
    # symptom 4: the bad reward function gives zero gradient
    assert all(r["grad_norm"] == 0 for r in runs["zero_std"])
    # symptoms 5, 6: without the length penalty / with the longer limit no length symptom
    clean = {f.symptom for f in diagnose(runs["scratch_healthy"]).findings if f.status == "clean"}
    assert {"length_collapse", "truncation", "entropy_collapse"} <= clean
