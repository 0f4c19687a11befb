"""Chapter 14 (docs/reading-logs.md): the symptom runs in docs/data/symptoms.json and what `diagnose` says about them."""

from __future__ import annotations

import json

import pytest

from rlhf_toy._code_hash import sources_hash
from rlhf_toy.demos.reading_logs import CACHE, load_runs
from rlhf_toy.demos.symptoms import HASHED, STEPS
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
    "zero_std_control",
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
    assert len(set(acc)) == 1 and max(abs(r["loss"]) for r in runs["loss_zero_lr0"] if r["step"] >= 1) < 1e-4
    # symptom 4: the bad reward function gives zero gradient
    assert all(r["grad_norm"] == 0 for r in runs["zero_std"] if r["step"] >= 1)
    # symptoms 5, 6: without the length penalty / with the longer limit no length symptom
    clean = {f.symptom for f in diagnose(runs["scratch_healthy"]).findings if f.status == "clean"}
    assert {"length_collapse", "truncation", "entropy_collapse"} <= clean


def _accuracy(history):
    return [r["accuracy"] for r in history if "accuracy" in r]


def test_every_run_is_evaluated_before_its_first_step(runs):
    # page, 直觉: “每次运行在第 1 步之前先在留出集上评估一次（第 0 步）”; runs from the same warm start agree there
    for name, history in runs.items():
        assert set(history[0]) == {"step", "accuracy"} and history[0]["step"] == 0, name
        assert [r["step"] for r in history] == list(range(STEPS + 1)), name
    assert len({runs[n][0]["accuracy"] for n in ("healthy", "zero_std", "zero_std_control", "kl_explodes")}) == 1
    assert len({runs[n][0]["accuracy"] for n in ("scratch_healthy", "length_collapse", "entropy_collapse")}) == 1
    # truncation: the 6-token limit cuts the warm start's greedy answers as well (page, symptom 6)
    assert runs["truncation"][0]["accuracy"] < runs["scratch_healthy"][0]["accuracy"]


def test_the_zero_std_control_differs_only_in_the_reward_function(runs):
    # page, symptom 4: the control has the same β = 0; its first batch is the bad run's; it learns, the bad run does not
    bad, control = runs["zero_std"], runs["zero_std_control"]
    assert bad[1]["entropy"] == control[1]["entropy"] and bad[1]["completions/mean_length"] == control[1][
        "completions/mean_length"
    ]
    assert "kl" not in bad[1] and "kl" not in control[1]  # β = 0 in both (the loop logs kl only with β ≠ 0)
    assert len(set(_accuracy(bad))) == 1
    assert _accuracy(control)[-1] - _accuracy(control)[0] > 0.05


def test_the_length_penalty_raises_the_reward_mostly_through_the_length_term_and_accuracy_rises_as_in_the_control(runs):
    # page, symptom 5: with the step-0 evaluation the held-out accuracy rises about as much as in the control, so
    # diagnose finds no "reward up, accuracy not"; most of the reward's rise is the length term (reward = correct − 0.1·len)
    bad, control = runs["length_collapse"], runs["scratch_healthy"]
    rise_bad = _accuracy(bad)[-1] - _accuracy(bad)[0]
    rise_control = _accuracy(control)[-1] - _accuracy(control)[0]
    assert rise_bad > 0.05 and rise_control > 0.05 and abs(rise_bad - rise_control) < 0.05
    first, last = bad[1], bad[-1]
    reward_rise = last["reward"] - first["reward"]
    length_term_rise = 0.1 * (first["completions/mean_length"] - last["completions/mean_length"])
    assert length_term_rise > reward_rise / 2
    found = {f.symptom: f.status for f in diagnose(bad).findings}
    assert found["length_collapse"] == "detected" and found["reward_without_accuracy"] == "clean"
    # ...and without the step-0 evaluation the rule takes step 10 (already risen) as the start and fires (page)
    late = {f.symptom: f.status for f in diagnose([r for r in bad if r["step"] >= 1]).findings}
    assert late["reward_without_accuracy"] == "detected"
