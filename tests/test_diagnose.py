"""rlhf_toy.diagnose: each rule on a synthetic history built to show its symptom, a healthy history that passes clean,
bad input, and the book's own GRPO / DPO loops (healthy and broken). The real TRL log is in test_diagnose_trl.py."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from rlhf_toy.diagnose import RULES, diagnose, read_history

ROOT = Path(__file__).resolve().parents[1]
N = 20


def healthy(n: int = N) -> list[dict]:
    """A TRL-style GRPO log (every metric a rule reads) of a run that learns steadily, plus an eval every 5 steps."""
    log = []
    for s in range(1, n + 1):
        log.append(
            {
                "step": s,
                "epoch": s / n,
                "loss": 0.02 + 0.001 * s,
                "grad_norm": 1.0 + 0.1 * (s % 3),
                "learning_rate": 1e-6,
                "num_tokens": 1000.0 * s,
                "reward": 0.2 + 0.02 * s,
                "reward_std": 0.4,
                "frac_reward_zero_std": 0.3,
                "kl": 0.001 * s,
                "entropy": 1.0 - 0.01 * s,
                "clip_ratio/region_mean": 0.02,
                "clip_ratio/low_mean": 0.01,
                "clip_ratio/high_mean": 0.01,
                "completions/mean_length": 50.0 + (s % 2),
                "completions/clipped_ratio": 0.02,
                "sampling/sampling_logp_difference/mean": 0.01,
                "sampling/importance_sampling_ratio/mean": 1.0,
                "rewards/correct/mean": 0.2 + 0.02 * s,
            }
        )
        if s % 5 == 0:
            log.append({"step": s, "epoch": s / n, "eval_accuracy": 0.2 + 0.02 * s, "eval_loss": 0.1})
    log.append({"step": n, "epoch": 1.0, "train_runtime": 12.0, "train_loss": 0.03, "total_flos": 0.0})
    return log


def with_series(log: list[dict], key: str, values) -> list[dict]:  # noqa: ANN001
    """`log` with `key` of the training records (the ones with `reward`) replaced step by step by `values(step)`."""
    return [{**r, key: values(r["step"])} if "reward" in r else r for r in log]


def test_healthy_history_passes_clean():
    d = diagnose(healthy())
    assert d.kind == "grpo" and d.steps == (1, N)
    assert d.detected == [] and d.missing == [] and d.unknown == []
    assert {f.status for f in d.findings} == {"clean", "not_applicable"}
    assert [f.symptom for f in d.findings if f.status == "not_applicable"] == ["dpo_chosen_down"]
    assert "没有检出症状" in str(d)


def test_there_are_at_least_ten_rules_each_with_a_section_and_a_documented_threshold():
    assert len(RULES) >= 10 and len({r.symptom for r in RULES}) == len(RULES)
    for rule in RULES:
        assert rule.check.__doc__ and "理由" in rule.check.__doc__, rule.symptom
        assert re.fullmatch(r"[a-z-]+\.md#\S+", rule.section), rule.section


def _headings(page: Path) -> set[str]:
    """The heading ids MkDocs gives a page (toc with pymdownx's lower-case slugify, `_1` for repeats, `{#id}`)."""
    from pymdownx.slugs import slugify

    slug = slugify(case="lower")
    ids: set[str] = set()
    fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.+?)\s*$", line)
        if not m:
            continue
        text = m[1]
        explicit = re.search(r"\{#([^}]+)\}$", text)
        base = explicit[1] if explicit else slug(re.sub(r"[`$]", "", text), "-")
        new, k = base, 0
        while new in ids:
            k += 1
            new = f"{base}_{k}"
        ids.add(new)
    return ids


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.symptom)
def test_each_rule_points_to_an_existing_section(rule):
    page, anchor = rule.section.split("#")
    assert anchor in _headings(ROOT / "docs" / page), rule.section


# --- each symptom on a synthetic history -------------------------------------------------------------------------


def _one(log, symptom: str):  # noqa: ANN001, ANN202
    d = diagnose(log)
    found = {f.symptom: f for f in d.detected}
    assert set(found) == {symptom}, str(d)
    return found[symptom], d


def test_loss_exactly_zero_while_reward_moves_is_a_note_not_a_problem():
    f, d = _one(with_series(healthy(), "loss", lambda s: 0.0 if s % 2 else -1e-3), "loss_zero_or_negative")
    assert f.step == 1 and f.severity == "info" and d.problems == []
    assert "提示（看着像问题，其实不是）" in str(d) and "reading-logs.md#loss-zero" in str(d)


def test_loss_zero_with_a_flat_reward_is_not_reported():
    log = with_series(with_series(healthy(), "loss", lambda s: 0.0), "reward", lambda s: 0.5)
    log = [r for r in log if "eval_accuracy" not in r]
    d = diagnose(log)
    assert "loss_zero_or_negative" not in d.symptoms()


def test_kl_explosion():
    f, _ = _one(with_series(healthy(), "kl", lambda s: 0.02 if s < 12 else 0.5), "kl_explodes")
    assert f.step == 12 and "0.020" in f.evidence and "0.500" in f.evidence


def test_kl_growing_from_zero_is_not_an_explosion():
    # 1e-5 -> 1e-3 -> 0.05 is a 100x ratio per step, but below the 0.01-nat floor times 10
    d = diagnose(with_series(healthy(), "kl", lambda s: min(1e-5 * 10 ** (s - 1), 0.09)))
    assert "kl_explodes" not in d.symptoms()


def test_entropy_fast_collapse():
    f, _ = _one(with_series(healthy(), "entropy", lambda s: 1.0 if s < 8 else 0.5), "entropy_collapse")
    assert f.step == 8


def test_entropy_deep_collapse_reports_the_reward_at_that_step():
    f, _ = _one(with_series(healthy(), "entropy", lambda s: 1.0 * 0.85**s), "entropy_collapse")
    assert f.step == 20 and "reward = 0.600" in f.evidence  # 0.85**20 = 0.039 < 5 % of 0.85 = 0.0425 < 0.85**19


def test_frac_reward_zero_std_goes_to_one():
    f, _ = _one(with_series(healthy(), "frac_reward_zero_std", lambda s: 1.0 if s >= 9 else 0.3), "no_learning_signal")
    assert f.step == 9 and "平均 reward" in f.evidence


def test_one_saturated_batch_is_not_sustained():
    d = diagnose(with_series(healthy(), "frac_reward_zero_std", lambda s: 1.0 if s in (4, 5, 9) else 0.3))
    assert "no_learning_signal" not in d.symptoms()


def test_completion_length_collapse():
    f, _ = _one(
        with_series(healthy(), "completions/mean_length", lambda s: 50.0 if s < 10 else 12.0), "length_collapse"
    )
    assert f.step == 10


def test_completions_run_to_the_limit():
    f, _ = _one(with_series(healthy(), "completions/clipped_ratio", lambda s: 0.02 if s < 15 else 0.6), "truncation")
    assert f.step == 15


def dpo_log(chosen_down: bool, with_logps: bool = True) -> list[dict]:
    log = []
    for s in range(1, N + 1):
        chosen = -0.05 * s if chosen_down else 0.02 * s
        r = {"step": s, "loss": 0.69 - 0.01 * s, "grad_norm": 1.0, "rewards/chosen": chosen}
        r |= {"rewards/rejected": chosen - 0.1 * s, "rewards/margins": 0.1 * s, "rewards/accuracies": 0.8}
        if with_logps:
            r |= {"logps/chosen": -20.0 + 10 * chosen, "logps/rejected": -30.0 - s}
        log.append(r)
    return log


@pytest.mark.parametrize("with_logps", [True, False])
def test_dpo_chosen_log_probs_fall_while_margins_rise(with_logps):
    f, d = _one(dpo_log(chosen_down=True, with_logps=with_logps), "dpo_chosen_down")
    assert d.kind == "dpo" and f.metrics[1] == ("logps/chosen" if with_logps else "rewards/chosen")
    assert diagnose(dpo_log(chosen_down=False, with_logps=with_logps)).detected == []


def test_reward_rises_but_heldout_accuracy_does_not():
    log = [{**r, "eval_accuracy": 0.3} if "eval_accuracy" in r else r for r in healthy()]
    f, _ = _one(log, "reward_without_accuracy")
    assert "eval_accuracy 开头 0.300 → 结尾 0.300" in f.evidence


def test_reward_without_an_eval_metric_reports_the_missing_metric():
    d = diagnose([r for r in healthy() if "eval_accuracy" not in r])
    (f,) = d.missing
    assert f.symptom == "reward_without_accuracy" and "eval_accuracy 或 accuracy 或 success_prob" in f.evidence
    assert "缺少指标、没能检查" in str(d)


def test_accuracy_metric_can_be_named():
    log = [{**r, "my_acc": 0.3} if "eval_accuracy" in r else r for r in healthy()]
    log = [{k: v for k, v in r.items() if k != "eval_accuracy"} for r in log]
    assert "reward_without_accuracy" in diagnose(log, accuracy_metric="my_acc").symptoms()
    with pytest.raises(ValueError, match="accuracy_metric：日志里没有 'nope'"):
        diagnose(log, accuracy_metric="nope")


def test_grad_norm_spike():
    f, _ = _one(with_series(healthy(), "grad_norm", lambda s: 40.0 if s == 13 else 1.0), "grad_norm_spike")
    assert f.step == 13 and "40.0 倍" in f.evidence


def test_grad_norm_large_at_the_start_is_not_a_spike():
    assert "grad_norm_spike" not in diagnose(with_series(healthy(), "grad_norm", lambda s: 50.0 / s)).symptoms()


def test_sampler_trainer_mismatch():
    log = with_series(healthy(), "sampling/importance_sampling_ratio/mean", lambda s: 1.0 if s < 6 else 0.7)
    f, _ = _one(log, "sampler_mismatch")
    assert f.step == 6
    f, _ = _one(with_series(healthy(), "sampling/sampling_logp_difference/mean", lambda s: 0.2), "sampler_mismatch")
    assert f.step == 1


def test_sampler_metrics_absent_without_vllm_are_reported_missing():
    log = [{k: v for k, v in r.items() if not k.startswith("sampling/")} for r in healthy()]
    (f,) = diagnose(log).missing
    assert f.symptom == "sampler_mismatch" and "vLLM" in f.evidence


def test_clip_ratio_high():
    f, _ = _one(with_series(healthy(), "clip_ratio/region_mean", lambda s: 0.3 if s > 4 else 0.02), "clip_ratio_high")
    assert f.step == 5


def test_report_names_the_step_the_evidence_and_the_section():
    d = diagnose(with_series(healthy(), "clip_ratio/region_mean", lambda s: 0.3 if s > 4 else 0.02))
    text = str(d)
    assert "检出 1 个症状：" in text and "截断比例高（第 5 步起）" in text
    assert "证据：clip_ratio/region_mean 从第 5 步起持续 ≥ 0.2（最大 0.300）" in text
    assert "见：reading-logs-more.md#clip-high" in text


# --- names, kinds, missing and unknown metrics ---------------------------------------------------------------------


def test_book_aliases_are_read():
    book_ppo = [
        {"step": s, "objective/scores": 0.1 * s, "objective/kl": 0.02 if s < 5 else 1.0, "policy/entropy_avg": 2.0}
        | {"policy/clipfrac_avg": 0.05, "success_prob": 0.1 * s}
        for s in range(1, 9)
    ]
    d = diagnose(book_ppo)
    assert d.kind == "ppo" and d.symptoms() == {"kl_explodes"}
    assert [f.symptom for f in d.missing] == ["grad_norm_spike"]


def test_unknown_metrics_are_listed_and_none_values_skipped():
    log = [{**r, "my_metric": 1.0, "kl": None if r["step"] == 3 else r.get("kl")} for r in healthy() if "reward" in r]
    h = read_history(log)
    assert 3 not in dict(h.points("kl"))
    d = diagnose(log)
    assert d.unknown == ["my_metric"] and "未识别的指标（没有规则读它们）：my_metric" in str(d)


def test_records_of_one_step_are_merged():
    h = read_history([{"step": 5, "reward": 1.0}, {"step": 5, "eval_accuracy": 0.5}, {"reward": 2.0}])
    assert h.points("reward") == [(3, 2.0), (5, 1.0)] and h.points("eval_accuracy") == [(5, 0.5)]
    assert h.steps == [3, 5] and h.n_records == 3  # a record without "step" is numbered by its position


# --- bad input ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "message"),
    [
        ([], "日志是空的"),
        ({"reward": 1.0}, "要的是字典列表"),
        ([1.0, 2.0], r"log\[0\] 不是字典"),
        ([{"step": 1, "reward": float("nan")}], r"log\[0\]\['reward'\]（第 1 步） 是 NaN"),
        ([{"step": 1, "grad_norm": math.inf}], "是 inf：数值溢出"),
        ([{"step": 1, "reward": "0.5"}], r"log\[0\]\['reward'\]（第 1 步） 不是数：'0.5'"),
        ([{"step": 1, "reward": True}], "不是数：True"),
        ([{"step": 1.5, "reward": 1.0}], r"log\[0\]\['step'\] 不是非负整数"),
        ([{"step": 1, "foo": 1.0}], "不像训练日志"),
        ([{"step": 1, "reward": None}], "不像训练日志"),
    ],
)
def test_bad_input_is_a_clear_value_error(log, message):
    with pytest.raises(ValueError, match=message):
        diagnose(log)


def test_bad_files_are_clear_value_errors(tmp_path):
    with pytest.raises(ValueError, match="不是一个存在的文件"):
        diagnose(tmp_path / "missing.json")
    (tmp_path / "a.txt").write_text("step reward\n1 0.5\n", encoding="utf-8")
    with pytest.raises(ValueError, match="不是 JSON 文件"):
        diagnose(tmp_path / "a.txt")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}), encoding="utf-8")
    with pytest.raises(ValueError, match="里没有 log_history（顶层键：model_type），不是训练日志"):
        diagnose(str(tmp_path / "config.json"))
    (tmp_path / "s.json").write_text(json.dumps({"log_history": {"a": 1}}), encoding="utf-8")
    with pytest.raises(ValueError, match="的日志不是列表"):
        diagnose(tmp_path / "s.json")
    (tmp_path / "nan.json").write_text('{"log_history": [{"step": 1, "loss": NaN}]}', encoding="utf-8")
    with pytest.raises(ValueError, match="是 NaN"):
        diagnose(tmp_path / "nan.json")


def test_a_json_list_file_and_a_trainer_state_give_the_same_diagnosis(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps(healthy()), encoding="utf-8")
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": N, "log_history": healthy()}))
    a, b = diagnose(tmp_path / "list.json"), diagnose(tmp_path / "trainer_state.json")
    assert a.findings == b.findings and b.source.endswith("trainer_state.json")


# --- the book's own loops -------------------------------------------------------------------------------------------


def _bandit_grpo(learning_rate: float, steps: int, zero_reward: bool = False) -> list[dict]:
    """train_grpo on chapter 8's bandit (seed 0, G = 4), with an exact evaluation before training as step 0."""
    from rlhf_toy.studies.comparison import _setup, make_evaluator
    from rlhf_toy.studies.health import ZeroRewardTask
    from rlhf_toy.train import GRPOConfig, train_grpo

    task, policy, ref = _setup(0)
    evaluate = make_evaluator(task, ref, 4)
    config = GRPOConfig(num_generations=4, learning_rate=learning_rate, steps=steps)
    log = train_grpo(policy, ZeroRewardTask(task) if zero_reward else task, config, ref, evaluate)
    if zero_reward:  # the evaluator's frac_reward_zero_std is the true task's; training saw only zeros
        log = [{**r, "frac_reward_zero_std": 1.0} for r in log]
    return [{"step": 0, **evaluate(ref)}, *log]


def test_book_grpo_healthy_run_has_no_problem():
    torch.manual_seed(0)
    d = diagnose(_bandit_grpo(learning_rate=0.1, steps=16))
    assert d.kind == "grpo" and d.problems == [], str(d)
    assert {f.symptom for f in d.missing} == {"length_collapse", "truncation", "grad_norm_spike", "sampler_mismatch"}
    assert "loss_zero_or_negative" in d.symptoms()  # num_iterations=2, β>0: the loss is negative, reward rises
    assert {f.symptom for f in d.findings if f.status == "clean"} >= {"kl_explodes", "entropy_collapse"}


def test_book_grpo_converging_fast_is_a_deep_entropy_collapse_not_a_fast_one():
    # learning rate 0.5 (chapter 6's seed demo): the policy converges on the single correct answer; entropy falls below
    # 5 % of log 8 with the reward near 1 (the report shows it), never a third of it within two logs; no KL explosion
    torch.manual_seed(0)
    log = _bandit_grpo(learning_rate=0.5, steps=16)
    entropy = [r["entropy"] for r in log]
    assert max(entropy[i - 2] - entropy[i] for i in range(2, len(entropy))) < 0.28 * entropy[0]
    d = diagnose(log)
    found = {f.symptom: f for f in d.problems}
    assert "kl_explodes" not in found
    assert (
        "不到起始 2.076 的 5%" in found["entropy_collapse"].evidence
        and "reward = 0.9" in found["entropy_collapse"].evidence
    )


def test_book_grpo_learning_rate_far_too_high():
    torch.manual_seed(0)
    d = diagnose(_bandit_grpo(learning_rate=10.0, steps=8))
    found = {f.symptom: f for f in d.problems}
    assert set(found) == {"entropy_collapse", "kl_explodes", "no_learning_signal"}, str(d)
    assert found["entropy_collapse"].step == 1 and found["kl_explodes"].step == 1  # 2.08 -> 1.19 in one step
    assert "从 2.076 掉到 1.187" in found["entropy_collapse"].evidence
    assert found["no_learning_signal"].step == 5  # the policy sits on wrong answers: every group scores 0
    # clip_ratio is 0.45, 0.2, 0.1 in steps 1-3: high, but not for SUSTAIN = 3 logs in a row
    assert next(f for f in d.findings if f.symptom == "clip_ratio_high").status == "clean"


def test_book_grpo_identical_rewards_means_no_learning_signal():
    torch.manual_seed(0)
    d = diagnose(_bandit_grpo(learning_rate=0.1, steps=6, zero_reward=True))
    found = {f.symptom: f for f in d.problems}
    assert set(found) == {"no_learning_signal"}, str(d)
    assert found["no_learning_signal"].step == 1 and "平均 reward = 0.000" in found["no_learning_signal"].evidence


def test_book_dpo_healthy_run_has_no_problem():
    from rlhf_toy.studies.comparison import _setup, reference_preference_pairs
    from rlhf_toy.train import DPOConfig, train_dpo

    torch.manual_seed(0)
    task, policy, ref = _setup(0)
    (prompts, chosen, rejected), _ = reference_preference_pairs(task, ref, 80)
    config = DPOConfig(learning_rate=0.1, steps=12)
    d = diagnose(train_dpo(policy, (prompts, chosen, rejected), config, ref))
    assert d.kind == "dpo" and d.problems == [], str(d)
    assert [f.symptom for f in d.missing] == ["grad_norm_spike"]


def test_every_key_the_book_loops_log_is_read_or_recognised():
    """The book's GRPO (all logging options), PPO and DPO loops with chapter 8's evaluator: no key is unknown."""
    from rlhf_toy.models.value_table import TableValueModel
    from rlhf_toy.studies.comparison import _setup, make_evaluator, reference_preference_pairs
    from rlhf_toy.train import DPOConfig, GRPOConfig, PPOConfig, train_dpo, train_grpo, train_ppo

    torch.manual_seed(0)
    task, policy, ref = _setup(0)
    evaluate = make_evaluator(task, ref, 4)
    grpo = GRPOConfig(num_generations=4, learning_rate=0.1, steps=2, dynamic_sampling=True, log_clip_sides=True)
    logs = {"grpo": train_grpo(policy, task, grpo, ref, evaluate)}
    task, policy, ref = _setup(0)
    value_model = TableValueModel(task.n_prompts)
    logs["ppo"] = train_ppo(policy, value_model, task, PPOConfig(steps=2), ref_policy=ref, evaluate=evaluate)
    task, policy, ref = _setup(0)
    pairs, _ = reference_preference_pairs(task, ref, 80)
    logs["dpo"] = train_dpo(policy, pairs, DPOConfig(steps=2), ref, evaluate)
    for kind, log in logs.items():
        d = diagnose(log)
        assert d.kind == kind and d.unknown == [], (kind, d.unknown)
