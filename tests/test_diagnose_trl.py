"""rlhf_toy.diagnose on a real TRL 1.16 log: GRPOTrainer for three steps on CPU through the chapter-10 bridge (an
untrained model, so it earns no reward), its `log_history` and the `trainer_state.json` that `save_state` writes."""

from __future__ import annotations

import json

import pytest

from rlhf_toy.diagnose import diagnose

pytestmark = pytest.mark.xdist_group("trl")  # the same worker as tests/test_trl_chapter.py: TRL is imported once


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    from trl import GRPOTrainer

    from rlhf_toy.demos.tiny_lm import grpo_config
    from rlhf_toy.integrations.trl import make_model, make_tokenizer, prompt_dataset, reward_function, trl_grpo_config
    from rlhf_toy.tasks.addition import AdditionTask

    task = AdditionTask(seed=0, balanced=True, batch_size=4)
    config = grpo_config(quick=True, num_generations=4, steps=3)  # chapter 9's quick config: beta = 0
    out = tmp_path_factory.mktemp("trl_grpo")
    trainer = GRPOTrainer(
        model=make_model(),
        reward_funcs=reward_function(task),
        args=trl_grpo_config(config, task, output_dir=str(out)),
        train_dataset=prompt_dataset(task.draw(config.steps * task.batch_size)),
        processing_class=make_tokenizer(),
    )
    trainer.train()
    trainer.save_state()  # writes output_dir/trainer_state.json
    return trainer, out / "trainer_state.json"


def test_trl_log_history_and_trainer_state_give_the_same_diagnosis(trl_run):
    trainer, path = trl_run
    from_memory, from_file = diagnose(trainer.state.log_history), diagnose(path)
    assert from_memory.findings == from_file.findings and from_file.source == str(path)
    assert json.loads(path.read_text(encoding="utf-8"))["log_history"] == trainer.state.log_history
    assert from_file.kind == "grpo" and from_file.steps == (1, 3) and from_file.unknown == []


def test_trl_log_reports_its_missing_metrics(trl_run):
    _, path = trl_run
    d = diagnose(path)
    # beta = 0: TRL logs no kl; no evaluation was run; no vLLM, so no sampling/* metrics
    assert {f.symptom: f.metrics for f in d.missing} == {
        "kl_explodes": ("kl", "objective/kl"),
        "reward_without_accuracy": ("eval_accuracy", "accuracy", "success_prob"),
        "sampler_mismatch": ("sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean"),
    }
    read = {f.symptom: f.metrics for f in d.findings if f.status in ("clean", "detected")}
    assert read["entropy_collapse"] == ("entropy",) and read["clip_ratio_high"] == ("clip_ratio/region_mean",)
    assert read["grad_norm_spike"] == ("grad_norm",) and read["truncation"] == ("completions/clipped_ratio",)
    assert read["length_collapse"] == ("completions/mean_length",)


def test_trl_log_of_an_untrained_model_shows_no_learning_signal(trl_run):
    trainer, path = trl_run
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert rewards == [0.0, 0.0, 0.0]  # the untrained model never writes a correct sum
    d = diagnose(path)
    assert {f.symptom for f in d.problems} == {"no_learning_signal", "truncation"}, str(d)
    text = str(d)
    assert "组内奖励全相同，没有学习信号（第 1 步起）" in text and "TRL 的 GRPOTrainer 只在 beta ≠ 0 时记录 kl" in text
    print(text)
