"""Chapter 8: the comparison runner, reward over-optimisation, the broken configurations and the result cache."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from rlhf_toy import BanditTask, TablePolicy
from rlhf_toy.studies.comparison import (
    ALGORITHMS,
    Budget,
    reference_preference_pairs,
    run_comparison,
    run_grpo,
    run_offline_sweep,
    samples_to_target,
    summarize,
)
from rlhf_toy.studies.health import BROKEN, initial_success, run_broken
from rlhf_toy.studies.overoptimisation import (
    biased_preference_pairs,
    early_stop,
    make_setup,
    optimum_curve,
    peak,
    run_overoptimisation,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import run_experiments  # noqa: E402

TINY = Budget(samples=320, offline_samples=160, offline_steps=10)


def test_runner_is_deterministic_for_a_fixed_seed():
    a = run_comparison(["grpo", "dpo"], seeds=[3], budget=TINY)
    b = run_comparison(["grpo", "dpo"], seeds=[3], budget=TINY)
    assert a == b
    assert a != run_comparison(["grpo", "dpo"], seeds=[4], budget=TINY)


def test_all_algorithms_start_from_the_same_task_and_policy():
    rows = run_comparison(None, seeds=[0], budget=Budget(samples=80, offline_samples=80, offline_steps=1))
    assert {r["algorithm"] for r in rows} == set(ALGORITHMS)
    torch.manual_seed(0)
    task = BanditTask.make(20, 8)
    start = task.success_prob(TablePolicy.random(20, 8))
    assert initial_success(0) == pytest.approx(start)


def test_every_algorithm_beats_the_initial_policy_in_quick_mode():
    start = initial_success(0)
    rows = run_comparison(None, seeds=[0], budget=Budget())
    summary = {s["algorithm"]: s for s in summarize(rows, target=0.5)}
    assert set(summary) == set(ALGORITHMS)
    for name, s in summary.items():
        assert s["success_mean"] > start + 0.2, name  # generous: from about 0.13 to above 0.33
        assert s["kl_mean"] > 0, name  # learning means moving away from the reference


def test_samples_are_counted_per_completion():
    rows = run_comparison(["ppo", "dpo"], seeds=[0], budget=TINY)
    ppo = [r for r in rows if r["algorithm"] == "ppo"]
    assert [r["samples"] for r in ppo] == [80 * s for s in range(1, len(ppo) + 1)]  # 20 prompts x G=4 per step
    assert {r["samples"] for r in rows if r["algorithm"] == "dpo"} == {160}  # offline: all sampled up front


def test_reference_pairs_are_labelled_by_the_true_reward_and_ties_are_dropped():
    torch.manual_seed(0)
    task = BanditTask.make(20, 8)
    policy = TablePolicy.random(20, 8)
    (prompts, chosen, rejected), used = reference_preference_pairs(task, policy, 400)
    assert used == 400 and 0 < len(prompts) < 200
    assert (chosen[:, 0] == task.correct[prompts]).all()
    assert (rejected[:, 0] != task.correct[prompts]).all()


def test_summary_counts_samples_to_target():
    history = [{"samples": 80 * s, "success_prob": p} for s, p in enumerate([0.2, 0.5, 0.91, 0.85], start=1)]
    assert samples_to_target(history, 0.9) == 240
    assert samples_to_target(history, 0.95) is None
    rows = [{"algorithm": "x", "seed": 0, "step": i + 1, **h, "kl_to_ref": 0.1} for i, h in enumerate(history)]
    (s,) = summarize(rows, 0.9)
    assert s["reached"] == 1 and s["to_target_median"] == 240 and s["success_std"] == 0.0


def test_offline_sweep_improves_with_more_data():
    rows = run_offline_sweep(["dpo"], seeds=[0], sizes=[40, 640], budget=Budget(offline_steps=30))
    assert [r["samples"] for r in rows] == [40, 640]
    assert rows[1]["success_prob"] > rows[0]["success_prob"]


def test_exact_optimum_shows_overoptimisation():
    """pi*_beta ∝ pi_ref exp(r_hat / beta): the proxy rises monotonically with KL, the true reward peaks then falls."""
    curve = optimum_curve(make_setup(0), [10.0, 3.0, 1.0, 0.5, 0.3, 0.1, 0.03])
    kls = [p["kl_to_ref"] for p in curve]
    proxies = [p["proxy_reward"] for p in curve]
    true = [p["success_prob"] for p in curve]
    assert kls == sorted(kls) and proxies == sorted(proxies)
    assert max(true) > true[0] + 0.1 and max(true) > true[-1] + 0.2


def test_overoptimisation_appears_without_kl_and_is_reduced_with_kl():
    no_kl = run_overoptimisation("ppo", beta=0.0, seed=0, steps=25)
    with_kl = run_overoptimisation("ppo", beta=1.0, seed=0, steps=25)
    top = peak(no_kl)
    assert top["success_prob"] > no_kl[-1]["success_prob"] + 0.1  # the true reward peaked, then fell
    assert no_kl[-1]["proxy_reward"] > top["proxy_reward"]  # ... while the proxy kept rising
    assert with_kl[-1]["success_prob"] > no_kl[-1]["success_prob"] + 0.1  # KL limits the damage
    assert with_kl[-1]["kl_to_ref"] < no_kl[-1]["kl_to_ref"]
    assert early_stop(no_kl, 0.4)["success_prob"] > no_kl[-1]["success_prob"] + 0.1  # so does early stopping


@pytest.mark.parametrize("name", [n for n in BROKEN if n != "no_kl"])  # no_kl: the test above
def test_broken_configurations_really_break(name):
    start = initial_success(0)
    history = run_broken(name, 0)
    final = history[-1]
    if name == "zero_variance":
        assert final["frac_reward_zero_std"] == 1.0
        assert final["kl_to_ref"] == 0.0 and final["success_prob"] == pytest.approx(start)  # nothing learned
    else:
        assert final["success_prob"] < start / 2, name  # worse than the untrained policy
    if name == "swapped_pairs":
        assert final["rewards/margins"] > 0 and final["rewards/accuracies"] == 1.0  # DPO's own metrics look fine
    if name == "lr_too_high":
        assert final["frac_reward_zero_std"] > 0.9  # collapsed: every group gets the same reward


def test_bad_input():
    with pytest.raises(ValueError, match="algorithm"):
        run_comparison(["trpo"])
    with pytest.raises(ValueError, match="seeds"):
        run_comparison(["grpo"], seeds=[])
    with pytest.raises(ValueError, match="algorithm"):
        run_offline_sweep(["grpo"])
    with pytest.raises(ValueError, match="name"):
        run_broken("typo")
    task = BanditTask.make(20, 8)
    with pytest.raises(ValueError, match="n_samples"):
        reference_preference_pairs(task, TablePolicy.random(20, 8), 50)
    with pytest.raises(ValueError, match="pairs_per_prompt"):
        biased_preference_pairs(task, (task.correct + 1) % 8, pairs_per_prompt=0)
    with pytest.raises(ValueError, match="decoy"):
        biased_preference_pairs(task, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="beta"):
        optimum_curve(make_setup(0), [1.0, 0.0])
    with pytest.raises(ValueError, match="algorithm"):
        run_overoptimisation("dpo")
    with pytest.raises(ValueError, match="beta"):
        run_overoptimisation("ppo", beta=-1.0)
    with pytest.raises(ValueError, match="kl_budget"):
        early_stop([{"kl_to_ref": 0.0}], -1.0)


def test_cache_matches_its_config_and_one_entry_regenerates_exactly():
    cache = json.loads((ROOT / "docs" / "data" / "comparison.json").read_text(encoding="utf-8"))
    spec = run_experiments.FULL
    assert cache["config"] == json.loads(json.dumps({**spec, "budget": asdict(spec["budget"])}))
    budget = spec["budget"]
    assert run_grpo(0, budget)[-1]["success_prob"] == cache["finals"]["grpo"]["0"]
    assert ALGORITHMS["dpo"](0, budget)[-1]["success_prob"] == cache["finals"]["dpo"]["0"]
    assert len((ROOT / "docs" / "data" / "comparison.json").read_bytes()) < 40_000
