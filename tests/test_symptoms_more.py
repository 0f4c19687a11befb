"""Chapter 14 (continued), docs/reading-logs-more.md: the symptom runs of rlhf_toy.studies.symptoms_more.

The cache docs/data/symptoms_more.json is current (code hash) and one run recomputes to it; `diagnose` detects each
symptom run at the step the page prints and passes each healthy run clean; the exercise's reference agrees with the
grad-norm rule on the cached runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _scripts import load_script

from rlhf_toy._code_hash import sources_hash
from rlhf_toy.diagnose import diagnose
from rlhf_toy.diagnose.rules import GRAD_SPIKE
from rlhf_toy.exercises.reading_logs_more import grad_spike_ratios
from rlhf_toy.studies import symptoms_more as S

ROOT = Path(__file__).resolve().parents[1]
DATA = json.loads((ROOT / "docs" / "data" / "symptoms_more.json").read_text(encoding="utf-8"))
RUNS = DATA["results"]


def _script():
    return load_script("run_symptoms_more")


def test_cache_is_current_and_a_run_recomputes_to_it():
    script = _script()
    assert DATA["code_hash"] == sources_hash(script.HASHED), "run: python scripts/run_symptoms_more.py"
    assert set(RUNS) == set(script.RUNS)
    assert DATA["seconds"]["cpu"] < 60  # the chapter's budget: a few seconds
    torch.manual_seed(123)  # each run seeds itself; the global state before it must not matter
    again = script.run("spike_outlier")
    assert [sorted(r) for r in again] == [sorted(r) for r in RUNS["spike_outlier"]]
    for new, cached in zip(again, RUNS["spike_outlier"], strict=True):  # 6 decimals in the cache; last digit may differ
        assert new == pytest.approx(cached, abs=2e-6)


# symptom run -> (rule, first step); healthy runs -> no problem at all
SYMPTOMS = {
    "dpo_coin_flip": ("dpo_chosen_down", 11),
    "hacking_proxy": ("reward_without_accuracy", 6),
    "spike_outlier": ("grad_norm_spike", 6),
    "mismatch_top4": ("sampler_mismatch", 1),
    "mismatch_top4_tis": ("sampler_mismatch", 1),  # the correction changes the gradient, not the sampler
    "clip_mu4": ("clip_ratio_high", 1),
    "clip_mu8": ("clip_ratio_high", 1),
}
HEALTHY = ("dpo_dropped", "hacking_true", "spike_clean", "spike_outlier_group", "mismatch_none", "clip_mu1", "clip_mu2")


@pytest.mark.parametrize("name", sorted(SYMPTOMS))
def test_each_symptom_run_is_detected_with_its_step(name):
    symptom, step = SYMPTOMS[name]
    d = diagnose(RUNS[name])
    found = {f.symptom: f.step for f in d.problems}
    assert found == {symptom: step}, str(d)
    assert next(f for f in d.problems).section.startswith("reading-logs-more.md#")


@pytest.mark.parametrize("name", HEALTHY)
def test_each_healthy_run_is_clean(name):
    d = diagnose(RUNS[name])
    assert d.problems == [], str(d)


def test_the_control_differs_from_the_symptom_run_in_the_direction_the_page_says():
    # DPO: chosen log-probs fall with coin-flip ties and rise without them; the true accuracy rises in both
    coin, dropped = RUNS["dpo_coin_flip"], RUNS["dpo_dropped"]
    assert (
        coin[-1]["logps/chosen"]
        < coin[0]["logps/chosen"] - 1
        < dropped[0]["logps/chosen"]
        < dropped[-1]["logps/chosen"]
    )
    assert coin[-1]["success_prob"] > coin[0]["success_prob"] and dropped[-1]["success_prob"] > coin[-1]["success_prob"]
    # reward hacking: the proxy's true accuracy peaks and falls below its start; the true reward's keeps rising
    proxy = [r["success_prob"] for r in RUNS["hacking_proxy"]]
    assert max(proxy) > proxy[0] > proxy[-1] and RUNS["hacking_true"][-1]["success_prob"] > 0.95
    for beta in ("0.3", "1", "3"):  # every β ends below its own peak
        acc = [r["success_prob"] for r in RUNS[f"hacking_proxy_beta{beta}"]]
        assert acc[-1] < max(acc) - 0.03
    # grad spike: the outlier's answer gains probability with or without group scaling, loses it without the bug
    bug = {n: RUNS[n][-1]["bug_prob"] for n in ("spike_outlier", "spike_outlier_group", "spike_clean")}
    first = RUNS["spike_clean"][0]["bug_prob"]
    assert bug["spike_outlier"] > 3 * first and bug["spike_outlier_group"] > 3 * first and bug["spike_clean"] < first
    # mismatch: no difference at all when the sampler is the trainer; the top-4 sampler learns much less
    assert all(r["sampling/sampling_logp_difference/mean"] == 0 for r in RUNS["mismatch_none"])
    assert RUNS["mismatch_top4"][-1]["success_prob"] < RUNS["mismatch_none"][-1]["success_prob"] - 0.2
    # clip ratio: 0 by definition at num_iterations=1, grows with num_iterations
    means = [sum(r["clip_ratio"] for r in RUNS[f"clip_mu{mu}"]) for mu in (1, 2, 4, 8)]
    assert means[0] == means[1] == 0 < means[2] < means[3]


@pytest.mark.parametrize("name", ["spike_outlier", "spike_clean", "spike_outlier_group"])
def test_the_exercise_reference_agrees_with_the_grad_norm_rule(name):
    norms = torch.tensor([r["grad_norm"] for r in RUNS[name]], dtype=torch.float64)
    ratios = grad_spike_ratios(norms)
    first = next((i + 1 for i, x in enumerate(ratios.tolist()) if x >= GRAD_SPIKE), None)
    found = {f.symptom: f.step for f in diagnose(RUNS[name]).problems}
    assert found.get("grad_norm_spike") == first


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="ties"):
        S.run_dpo_ties("keep")
    with pytest.raises(ValueError, match="reward"):
        S.run_reward_hacking("gold")
    with pytest.raises(ValueError, match="grad_norms"):
        grad_spike_ratios(torch.ones(2, 3))


def test_grad_norm_is_the_norm_of_this_steps_gradient():
    policy = torch.nn.Linear(3, 2)
    policy(torch.ones(1, 3)).sum().backward()
    expected = torch.cat([p.grad.flatten() for p in policy.parameters()]).double().norm().item()
    assert S.grad_norm(policy) == pytest.approx(expected, rel=1e-12)


def test_group_scaled_advantages_are_bounded_however_large_the_outlier():
    # page, 梯度范数一节: “一组 G 个回答除以样本标准差之后，优势的绝对值不超过 (G−1)/√G”; one outlier attains it
    from rlhf_toy import group_advantages

    G = 4
    bound = (G - 1) / G**0.5
    outlier = group_advantages(torch.tensor([50.0, 0.0, 0.0, 0.0]), G)
    assert outlier.abs().max().item() == pytest.approx(bound, rel=1e-4)
    rewards = torch.randn(1000 * G, generator=torch.Generator().manual_seed(0)) * 100
    assert group_advantages(rewards, G).abs().max().item() <= bound + 1e-6


def test_the_kl_penalty_slows_the_hacking_but_diagnose_still_flags_every_beta():
    # page: “`diagnose` 在三个 β 的运行上都报了奖励涨而正确率不涨”
    for beta in ("0.3", "1", "3"):
        found = {f.symptom for f in diagnose(RUNS[f"hacking_proxy_beta{beta}"]).problems}
        assert "reward_without_accuracy" in found, beta


def test_eval_reward_from_the_hacked_reward_is_not_read_as_accuracy():
    # rules.ACCURACY_METRICS leaves out eval_reward: scored by the hacked reward it rises with `reward`.
    # The hacked run with its true accuracy replaced by the proxy reward is reported as missing, not clean.
    history = [
        {k: v for k, v in {**row, "eval_reward": row.get("reward")}.items() if k != "success_prob"}
        for row in RUNS["hacking_proxy"]
    ]
    finding = next(f for f in diagnose(history).findings if f.symptom == "reward_without_accuracy")
    assert finding.status == "missing"
