"""第 12 章（异策略）：重要性权重、采样器、查表上的精确期望更新、异策略 GRPO 循环与缓存。"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from rlhf_toy._code_hash import sources_hash
from rlhf_toy.demos import offpolicy as demo
from rlhf_toy.estimators.importance import (
    IS_MODES,
    effective_sample_size,
    importance_metrics,
    importance_weights,
    off_policy_sequence_mask,
)
from rlhf_toy.rollout.samplers import bf16_copy, bf16_logps, temperature_logps, top_k_logps, top_p_logps
from rlhf_toy.studies.offpolicy import (
    CORRECTIONS,
    expected_update,
    on_policy_gradient,
    per_answer_weights,
    stale_training,
    update_variance,
)

CACHE = Path(__file__).resolve().parents[1] / "docs" / "data" / "offpolicy.json"


def batch(seed=0, B=6, T=5):
    g = torch.Generator().manual_seed(seed)
    logps = -2 * torch.rand(B, T, generator=g, dtype=torch.float64)
    sampler_logps = logps + 0.7 * torch.randn(B, T, generator=g, dtype=torch.float64)
    lengths = torch.tensor([0, T, 3, 1, 4, 2][:B])
    mask = (torch.arange(T)[None] < lengths[:, None]).double()
    return logps, sampler_logps, mask


# ---- importance_weights: eq:is-token, eq:is-sequence, eq:tis, eq:mis ----


@pytest.mark.parametrize("mode", IS_MODES)
def test_importance_weights_match_the_formulas(mode):
    logps, mu, mask = batch()
    w = importance_weights(logps, mu, mask, mode, clip_max=2.0, clip_min=0.5)
    d = (logps - mu) * mask
    rho = d.sum(-1, keepdim=True).exp() if mode.startswith("sequence") else d.exp()
    expected = rho.clamp(0.5, 2.0) if mode.endswith("truncate") else torch.where((rho >= 0.5) & (rho <= 2.0), rho, 0)
    assert w.shape == ((6, 1) if mode.startswith("sequence") else (6, 5))
    torch.testing.assert_close(w, expected)


def test_sequence_weight_is_the_product_of_token_ratios():
    logps, mu, mask = batch()
    seq = importance_weights(logps, mu, mask, "sequence_truncate", clip_max=math.inf)
    tok = importance_weights(logps, mu, mask, "token_truncate", clip_max=math.inf)
    torch.testing.assert_close(seq[:, 0], torch.where(mask.bool(), tok, 1.0).prod(-1))


def test_padding_and_empty_rows_give_weight_one_and_result_is_detached():
    logps, mu, mask = batch()
    logps.requires_grad_(True)
    tok = importance_weights(logps, mu, mask, "token_truncate")
    seq = importance_weights(logps, mu, mask, "sequence_mask", clip_max=None)
    assert not tok.requires_grad and not seq.requires_grad
    assert (tok[mask == 0] == 1).all()
    assert seq[0, 0] == 1  # row 0 is empty


def test_nan_and_infinite_log_ratios():
    logps, mu, mask = batch()
    mu[1, 0], mu[1, 1], logps[2, 0] = float("nan"), -math.inf, -math.inf
    mu[0, 0] = -math.inf  # padding (row 0 is empty): ignored
    tok_t = importance_weights(logps, mu, mask, "token_truncate", clip_max=3.0)
    tok_m = importance_weights(logps, mu, mask, "token_mask", clip_max=3.0)
    assert tok_t[1, 0] == 1 and tok_m[1, 0] == 1  # NaN: treated as ratio 1 (TRL)
    assert tok_t[1, 1] == 3 and tok_m[1, 1] == 0  # μ = 0: capped or masked
    assert tok_t[2, 0] == 0 and tok_m[2, 0] == 0  # π_old = 0
    assert tok_t[0, 0] == 1
    seq = importance_weights(logps, mu, mask, "sequence_truncate")
    assert seq[1, 0] == 3 and seq[2, 0] == 0
    logps[1, 2] = -math.inf  # +inf and −inf in one row: nan_to_num makes them ±max; finite, meaningless (as in TRL)
    assert torch.isfinite(importance_weights(logps, mu, mask, "sequence_mask", clip_max=None)[1, 0])


def test_importance_weights_reject_bad_input():
    logps, mu, mask = batch()
    with pytest.raises(ValueError, match=r"sampler_logps 的形状是 \(6, 4\)，期望 \(6, 5\)"):
        importance_weights(logps, mu[:, :4], mask)
    with pytest.raises(ValueError, match="未知的 mode='sequence'"):
        importance_weights(logps, mu, mask, "sequence")
    with pytest.raises(ValueError, match="clip_min"):
        importance_weights(logps, mu, mask, "token_mask", clip_max=1.0, clip_min=2.0)
    with pytest.raises(ValueError, match="至少一个"):
        importance_weights(logps, mu, mask, "token_truncate", clip_max=None)
    with pytest.raises(ValueError, match="只能含 0 和 1"):
        importance_weights(logps, mu, mask * 2)


def test_metrics_and_effective_sample_size():
    logps, mu, mask = batch()
    w = importance_weights(logps, mu, mask, "token_truncate")
    m = importance_metrics(logps, mu, mask, w)
    assert m["sampling/importance_sampling_ratio/max"] == w[mask.bool()].max().item()
    assert m["sampling/sampling_logp_difference/max"] == (logps - mu).abs()[mask.bool()].max().item()
    seq = importance_weights(logps, mu, mask, "sequence_truncate")
    assert importance_metrics(logps, mu, mask, seq)["sampling/importance_sampling_ratio/mean"] == pytest.approx(
        seq.mean().item()
    )
    empty = torch.zeros_like(mask)
    assert importance_metrics(logps, mu, empty, w)["sampling/importance_sampling_ratio/min"] == 0.0
    assert effective_sample_size(torch.ones(4, 1), torch.ones(4, 3)) == pytest.approx(1.0)
    one = torch.tensor([[1.0], [0.0], [0.0], [0.0]])
    assert effective_sample_size(one, torch.ones(4, 3)) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="全为 0"):
        effective_sample_size(w, empty)


def test_off_policy_sequence_mask_keeps_positive_advantages_and_close_sequences():
    logps, mu, mask = batch()
    adv = torch.tensor([-1.0, -1.0, 1.0, -1.0, 0.0, -1.0], dtype=torch.float64)
    keep = off_policy_sequence_mask(adv, logps, mu, mask, threshold=0.1)
    kl = ((mu - logps) * mask).sum(1) / mask.sum(1).clamp(min=1)
    torch.testing.assert_close(keep[:, 0], ((adv >= 0) | (kl <= 0.1)).double())


# ---- samplers ----


def test_samplers_truncate_and_renormalise():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]])
    k2 = top_k_logps(logits, 2)
    assert torch.isfinite(k2).sum() == 2 and k2.exp().sum().item() == pytest.approx(1.0)
    p = top_p_logps(logits, 0.7)
    probs = logits.softmax(-1)[0]
    kept = torch.isfinite(p[0])
    assert probs[kept].sum() >= 0.7 and probs[kept].sum() - probs[kept].min() < 0.7  # smallest such set
    torch.testing.assert_close(top_k_logps(logits, 99), temperature_logps(logits))
    torch.testing.assert_close(top_p_logps(logits, 1.0), temperature_logps(logits))
    torch.testing.assert_close(temperature_logps(logits, 2.0), torch.log_softmax(logits / 2, -1))
    assert (bf16_logps(logits) - temperature_logps(logits)).abs().max() < 1e-2
    with pytest.raises(ValueError, match="top_k"):
        top_k_logps(logits, 0)
    with pytest.raises(ValueError, match="top_p"):
        top_p_logps(logits, 0.0)
    with pytest.raises(ValueError, match="temperature"):
        temperature_logps(logits, 0.0)


def test_bf16_copy_rounds_every_weight():
    layer = torch.nn.Linear(3, 2)
    copy = bf16_copy(layer)
    assert torch.equal(copy.weight, layer.weight.detach().to(torch.bfloat16).float())
    assert not copy.weight.requires_grad


# ---- exact bandit study: eq:offpolicy-update ----


def setup(seed=0):
    logits, rewards = demo.bandit_setup(seed)
    return logits[:5], rewards[:5]


def test_on_policy_expected_update_is_the_gradient():
    logits, rewards = setup()
    mu = torch.log_softmax(logits, -1)
    for c in CORRECTIONS:
        torch.testing.assert_close(expected_update(logits, mu, rewards, c), on_policy_gradient(logits, rewards))


def test_expected_update_matches_autograd_of_the_sampled_surrogate():
    logits, rewards = setup()
    mu = torch.log_softmax(torch.randn(5, 8, dtype=torch.float64), -1)
    for c in CORRECTIONS:
        theta = logits.clone().requires_grad_(True)
        logps = torch.log_softmax(theta, -1)
        w = per_answer_weights(logps.detach(), mu, c)
        b = (mu.exp() * rewards).sum(-1, keepdim=True)
        surrogate = (mu.exp() * w * (rewards - b) * logps).sum()  # E_μ[sg(w A) log π]
        (grad,) = torch.autograd.grad(surrogate, theta)
        torch.testing.assert_close(expected_update(logits, mu, rewards, c), grad)


def test_full_importance_sampling_is_unbiased_and_support_mismatch_is_not():
    logits, rewards = setup()
    truth = on_policy_gradient(logits, rewards)
    stale = torch.log_softmax(logits + torch.randn(5, 8, dtype=torch.float64), -1)
    torch.testing.assert_close(expected_update(logits, stale, rewards, "is"), truth)
    assert (expected_update(logits, stale, rewards, "none") - truth).norm() > 1e-3
    top2 = top_k_logps(logits, 2)  # IS over μ's support: Σ_{μ>0} π (r − b)(e_y − π) misses the rest
    pi = logits.softmax(-1)
    inside = torch.isfinite(top2).double()
    b = (top2.exp() * rewards).sum(-1, keepdim=True)
    coef = pi * inside * (rewards - b)
    torch.testing.assert_close(expected_update(logits, top2, rewards, "is"), coef - coef.sum(-1, keepdim=True) * pi)


def test_token_level_weights_are_biased_for_a_sequence_reward():
    # 页面：式 (is-ratios) 之后“奖励看整条回答时只有 ρ_seq 让更新无偏；只乘 ρ_t 即使不限幅也有偏”。
    # 两个 token、V = 3，π(y1)·π(y2|y1) 与采样器 μ 各有自己的 logits，枚举全部 9 条回答。
    g = torch.Generator().manual_seed(0)
    V = 3
    first, second = (
        torch.randn(V, generator=g, dtype=torch.float64),
        torch.randn(V, V, generator=g, dtype=torch.float64),
    )
    mu_first = first + torch.randn(V, generator=g, dtype=torch.float64)
    mu_second = second + torch.randn(V, V, generator=g, dtype=torch.float64)
    reward = torch.rand(V, V, generator=g, dtype=torch.float64)
    params = [first.clone().requires_grad_(True), second.clone().requires_grad_(True)]
    log1, log2 = params[0].log_softmax(-1), params[1].log_softmax(-1)  # log π(y1)，log π(y2 | y1)
    mu1, mu2 = mu_first.log_softmax(-1), mu_second.log_softmax(-1)
    logp = log1[:, None] + log2  # log π(y1, y2)
    mu = (mu1[:, None] + mu2).exp()
    truth = torch.autograd.grad((logp.exp() * reward).sum(), params, retain_graph=True)
    rho1, rho2 = (log1 - mu1).exp().detach()[:, None], (log2 - mu2).exp().detach()
    seq = (mu * (rho1 * rho2) * reward * logp).sum()  # (Π_t ρ_t) R Σ_t ∇log π
    tok = (mu * reward * (rho1 * log1[:, None] + rho2 * log2)).sum()  # Σ_t ρ_t R ∇log π(y_t | y_<t)
    flat = torch.cat([t.flatten() for t in truth])
    for surrogate, biased in ((seq, False), (tok, True)):
        grads = torch.cat([t.flatten() for t in torch.autograd.grad(surrogate, params, retain_graph=True)])
        relative = ((grads - flat).norm() / flat.norm()).item()
        assert (relative > 0.05) if biased else (relative < 1e-12)


def test_update_variance_matches_enumeration():
    logits, rewards = setup()
    mu = torch.log_softmax(logits + torch.randn(5, 8, dtype=torch.float64), -1)
    pi = logits.softmax(-1)
    for c in CORRECTIONS:
        w = per_answer_weights(pi.log(), mu, c)
        b = (mu.exp() * rewards).sum(-1, keepdim=True)
        total = 0.0
        for x in range(5):
            g = (w[x] * (rewards[x] - b[x]))[:, None] * (torch.eye(8, dtype=torch.float64) - pi[x])  # (V, V)
            mean = (mu[x].exp()[:, None] * g).sum(0)
            total += (mu[x].exp() * ((g - mean) ** 2).sum(1)).sum().item()
        assert update_variance(logits, mu, rewards, c) == pytest.approx(total)


def test_stale_training_with_k_zero_ignores_the_correction():
    logits, rewards = setup()
    a, _ = stale_training(logits, rewards, 5, 0, "none")
    b, _ = stale_training(logits, rewards, 5, 0, "mis")
    assert a == b and len(a) == 6 and a[-1] > a[0]
    with pytest.raises(ValueError, match="staleness"):
        stale_training(logits, rewards, 5, -1)


# ---- the transformer loop ----


def test_sample_with_records_the_trainers_log_probs_and_topk():
    from rlhf_toy.tasks.addition import AdditionTask
    from rlhf_toy.train.offpolicy_grpo import sample_with

    torch.manual_seed(0)
    task = AdditionTask(seed=0, batch_size=4)
    policy = task.make_policy()
    prompts = task.prompts()
    completions, mask, mu = sample_with(policy, prompts, 2, 1.0, None)
    with torch.no_grad():
        logps = policy.logps(prompts.repeat_interleave(2, 0), completions)
    torch.testing.assert_close(mu * mask, logps * mask, atol=1e-5, rtol=1e-5)
    completions, mask, mu = sample_with(policy, prompts, 2, 1.0, 1)  # top-1: greedy, μ = 1
    assert torch.equal(mu * mask, torch.zeros_like(mu))


def test_train_offpolicy_grpo_runs_and_logs_trl_metrics():
    from rlhf_toy.tasks.addition import AdditionTask
    from rlhf_toy.train.offpolicy_grpo import OffPolicyGRPOConfig, train_offpolicy_grpo

    torch.manual_seed(0)
    task = AdditionTask(seed=0, batch_size=4)
    policy = task.make_policy()
    history = train_offpolicy_grpo(policy, task, OffPolicyGRPOConfig(steps=2, staleness=1, num_generations=2))
    assert len(history) == 3
    assert history[1]["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=1e-4)  # k=1: step 1 ≡ θ0
    assert {"ess", "sampling/sampling_logp_difference/max"} <= set(history[2])
    # the same batch's ESS under every mode is logged; the trained mode's entry is the logged `ess`
    assert {f"ess/{m}" for m in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")} <= set(
        history[2]
    )
    assert history[2]["ess"] == history[2]["ess/sequence_mask"]


def test_bias_splits_into_length_and_cosine():
    from rlhf_toy.studies.offpolicy import bias

    g = torch.tensor([3.0, 4.0], dtype=torch.float64)
    b = bias(2 * g, g)  # same direction, twice as long
    assert b.relative == pytest.approx(1.0) and b.cosine == pytest.approx(1.0) and b.length == pytest.approx(2.0)
    b = bias(torch.tensor([-4.0, 3.0], dtype=torch.float64), g)  # orthogonal, same length
    assert b.cosine == pytest.approx(0.0, abs=1e-12) and b.length == pytest.approx(1.0)
    assert b.relative == pytest.approx(2**0.5)


# ---- the cache ----


def test_cache_matches_the_code():
    data = json.loads(CACHE.read_text(encoding="utf-8"))
    assert data["code_hash"] == sources_hash(demo.SOURCES)
    assert data["results"]["mismatch"] == demo.mismatch_table()
    assert data["results"]["bias_vs_staleness"] == demo.bias_vs_staleness()
