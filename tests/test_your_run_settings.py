"""Chapter 13 (settings): memory arithmetic against real tensors, the pass-rate window, the cached difficulty run."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlhf_toy._code_hash import sources_hash
from rlhf_toy.estimators.difficulty import pass_rate_window
from rlhf_toy.estimators.pass_at_k import pass_at_k
from rlhf_toy.models.memory import (
    QWEN25,
    ModelShape,
    activation_bytes,
    grpo_step_flops,
    kv_cache_bytes_per_token,
    lora_parameter_count,
    measured_memory,
    parameter_count,
    shard,
    training_memory,
)
from rlhf_toy.studies.difficulty import ARMS, SOURCES

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "data" / "your_run_settings.json"


def _qwen2(shape: ModelShape, device: str = "cpu") -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers, num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads, tie_word_embeddings=shape.tie_word_embeddings,
        max_position_embeddings=64,
    )  # fmt: skip
    with torch.device(device):
        return Qwen2ForCausalLM(config)


def measure(shape: ModelShape, batch_size: int, seq_len: int, dtype: str) -> dict[str, int]:
    torch.manual_seed(0)
    model = _qwen2(shape).to(getattr(torch, dtype))
    ids = torch.randint(0, shape.vocab_size, (batch_size, seq_len))
    return measured_memory(
        model,
        lambda: torch.log_softmax(model(ids).logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1),
    )


TINY = ModelShape(16, 48, 192, 2, 4, 4, False)  # chapter 10's make_model(): 75,792 parameters
GQA_TIED = ModelShape(40, 64, 96, 3, 8, 2, True)


@pytest.mark.parametrize("shape", [TINY, GQA_TIED], ids=["chapter10", "gqa-tied"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("batch_size", "seq_len"), [(3, 7), (2, 11)])
def test_training_memory_matches_real_tensors(shape, dtype, batch_size, seq_len):
    want = training_memory(shape, batch_size, seq_len, dtype, mixed_precision=False)
    got = measure(shape, batch_size, seq_len, dtype)
    assert got == {k: want[k] for k in got}
    assert want["master_weights"] == 0


def test_tiny_shape_is_chapter_10_model():
    from rlhf_toy.integrations.trl import make_model

    model = make_model()
    assert sum(p.numel() for p in model.parameters()) == parameter_count(TINY) == 75792
    assert len(list(model.parameters())) == 12 * 2 + 3


@pytest.mark.parametrize("name", sorted(QWEN25))
def test_parameter_count_matches_transformers_on_the_meta_device(name):
    model = _qwen2(QWEN25[name], device="meta")
    assert sum(p.numel() for p in model.parameters()) == parameter_count(QWEN25[name])


def test_lora_count_matches_the_linear_layers():
    rank, model = 4, _qwen2(GQA_TIED)
    linears = [m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n]
    assert len(linears) == 7 * GQA_TIED.num_hidden_layers
    assert lora_parameter_count(GQA_TIED, rank) == sum(rank * (m.in_features + m.out_features) for m in linears)
    with pytest.raises(ValueError, match="rank"):
        lora_parameter_count(GQA_TIED, 0)


def test_mixed_precision_is_16_bytes_per_parameter_plus_activations():
    shape = QWEN25["7B"]
    n = parameter_count(shape)
    m = training_memory(shape, 1, 1024)
    assert m["weights"] + m["gradients"] + m["master_weights"] + m["optimizer_states"] == 16 * n + 4 * (28 * 12 + 3)


def test_lora_trains_only_the_adapter():
    shape, rank = QWEN25["7B"], 16
    m, lora = training_memory(shape, 1, 1024), lora_parameter_count(shape, rank)
    lo = training_memory(shape, 1, 1024, lora_rank=rank)
    assert lo["gradients"] == 4 * lora and lo["optimizer_states"] == 8 * lora + 4 * 14 * 28
    assert lo["weights"] == 2 * parameter_count(shape) + 4 * lora
    assert lo["activations"] == m["activations"]


def test_shard_stages():
    m = training_memory(QWEN25["1.5B"], 1, 512)
    for strategy, split in {"ddp": (), "zero1": ("optimizer_states", "master_weights"),
                            "zero2": ("optimizer_states", "master_weights", "gradients"),
                            "zero3": ("optimizer_states", "master_weights", "gradients", "weights")}.items():  # fmt: skip
        s = shard(m, strategy, 8)
        for key in ("weights", "gradients", "master_weights", "optimizer_states", "activations"):
            assert s[key] == (-(-m[key] // 8) if key in split else m[key]), (strategy, key)
        assert s["total"] == sum(v for k, v in s.items() if k != "total")
    assert shard(m, "zero3", 1) == m
    with pytest.raises(ValueError, match="strategy"):
        shard(m, "zero4", 8)
    with pytest.raises(ValueError, match="n_gpus"):
        shard(m, "zero1", 0)


def test_cost_helpers():
    assert kv_cache_bytes_per_token(QWEN25["7B"]) == 2 * 28 * 4 * 128 * 2
    cost = grpo_step_flops(10, prompts=2, num_generations=4, prompt_length=3, completion_length=5)
    assert cost["generation"] == 2 * 10 * 8 * 8 and cost["training"] == 6 * 10 * 8 * 8
    cost = grpo_step_flops(10, 2, 4, 3, 5, beta=0.04, num_iterations=2)
    assert cost["training"] == 6 * 10 * 64 * 2 + 2 * 10 * 64 * 2
    with pytest.raises(ValueError, match="dtype"):
        activation_bytes(TINY, 1, 1, "int8")
    with pytest.raises(ValueError, match="seq_len"):
        activation_bytes(TINY, 1, 0)


def test_pass_rate_window():
    counts = torch.tensor([0, 1, 2, 5, 8, 9, 10])
    assert pass_rate_window(counts, 10).tolist() == [False, False, True, True, True, False, False]
    assert pass_rate_window(counts, 10, 0.0, 1.0).all()
    for c in counts.tolist():  # the window's rate is chapter 11's pass@1
        assert abs(pass_at_k(10, c, 1) - c / 10) < 1e-12
    with pytest.raises(ValueError, match="correct"):
        pass_rate_window(counts.float(), 10)
    with pytest.raises(ValueError, match="low"):
        pass_rate_window(counts, 10, 0.8, 0.2)
    with pytest.raises(ValueError, match="c 应在"):
        pass_rate_window(torch.tensor([11]), 10)


def test_difficulty_cache_matches_the_code():
    cache = json.loads(CACHE.read_text(encoding="utf-8"))
    assert cache["code_hash"] == sources_hash(SOURCES), "code changed: rerun scripts/run_settings.py"
    budget = cache["settings"]["steps"] * 32 * 8  # steps × prompts × G, as the page says
    for run in cache["runs"].values():
        assert set(ARMS) <= set(run)
        # samples are counted inside the reward function during training, so a skipped or short batch shows up
        assert {run[arm]["samples"] for arm in ARMS} == {budget}
        assert sum(run["pool_rates"]) == cache["settings"]["pool_size"]
        n, (low, high) = cache["settings"]["n"], cache["settings"]["control_window"]
        assert run["kept_no_easy"] == sum(k for c, k in enumerate(run["pool_rates"]) if low <= c / n <= high)
        for arm in ARMS:
            for key in ("all_correct", "all_wrong"):
                assert 0.0 <= run[arm][key]["early"] <= 1.0 and 0.0 <= run[arm][key]["late"] <= 1.0


def test_the_recorded_samples_are_counted_not_computed(monkeypatch):
    # a 2-step run whose task serves half batches: the counted samples must show it (a computed count would not)
    from rlhf_toy.studies import difficulty

    real_train_grpo = difficulty.train_grpo

    def two_steps(policy, task, config, **kw):
        config = copy.copy(config)
        config.steps = 2
        task.batch_size = 16
        return real_train_grpo(policy, task, config, **kw)

    real_warm_start = difficulty._warm_start

    def small_heldout(seed, sft_steps):  # evaluation is not what this test is about
        task, policy = real_warm_start(seed, sft_steps)
        task.heldout = task.heldout[:8]
        return task, policy

    monkeypatch.setattr(difficulty, "train_grpo", two_steps)
    monkeypatch.setattr(difficulty, "_warm_start", small_heldout)
    out = difficulty.difficulty_run(
        seed=0, steps=2, pool_size=32, n=2, sft_steps=1, window=(0, 1), control_window=(0, 1)
    )
    assert {out[arm]["samples"] for arm in ARMS} == {2 * 16 * 8}
