"""DPPO's divergence trust region: rlhf_toy `dppo_loss` vs verl 0.9.1 `get_policy_loss_fn("dppo_tv")` and
`get_policy_loss_fn("dppo_kl")`, value, gradient and metrics, every aggregation verl allows.

The batch has log-probabilities near 0 in some rows (probabilities near 1), so the binary TV / KL divergence
crosses the threshold and the trust region masks tokens, and rare tokens with ratio e^2 inside the trust region,
so the TIS cap C = 3 bites.
"""

from __future__ import annotations

import pytest
import torch
from verl.workers.config import ActorConfig

from rlhf_toy.losses.divergence_mask import dppo_loss

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .verl_policy_losses import AGGREGATIONS, grad_of, mask_for, verl_config, verl_policy_loss

METRICS = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl")


def dppo_batch(seed, dtype):
    batch = token_batch(seed, dtype)
    # high-probability tokens: old p ≈ 0.6–0.95, new p moved by a ratio e^{±0.5}
    g = torch.Generator().manual_seed(100 + seed)
    old = torch.log(0.6 + 0.35 * torch.rand(4, batch.mask.shape[1], generator=g, dtype=torch.float64))
    new = old + 0.5 * torch.sign(torch.randn(old.shape, generator=g, dtype=torch.float64))
    batch.old_logps[4:8] = old.clamp(max=-1e-3).to(dtype)
    batch.logps = batch.logps.detach().clone()
    batch.logps[4:8] = new.clamp(max=-1e-3).to(dtype)
    # rare tokens (p_old = e^-8) with w = e^{±2}: inside the trust region, and w > C = 3 where it went up
    batch.old_logps[8:10] = -8.0
    batch.logps[8:10] = torch.tensor([-6.0, -10.0], dtype=dtype)[:, None]
    batch.logps.requires_grad_(True)
    return batch


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "mode"), AGGREGATIONS)
@pytest.mark.parametrize("divergence", ["tv", "kl"])
@pytest.mark.parametrize(("epsilon", "epsilon_high", "clip_ratio_c"), [(0.2, None, 3.0), (0.05, 0.1, 20.0)])
def test_dppo_loss_matches_verl(seed, dtype, loss_type, mode, divergence, epsilon, epsilon_high, clip_ratio_c):
    batch = dppo_batch(seed, dtype)
    mask = mask_for(mode, batch.mask)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, metrics = dppo_loss(
        ours_logps,
        batch.old_logps,
        batch.advantages,
        mask,
        epsilon,
        epsilon_high,
        divergence=divergence,
        clip_ratio_c=clip_ratio_c,
        loss_type=loss_type,
    )
    config = verl_config(epsilon, epsilon_high, clip_ratio_c=clip_ratio_c)
    theirs, their_metrics = verl_policy_loss(f"dppo_{divergence}", batch, their_logps, mask, mode, config)
    assert_same(ours, theirs, f"DPPO-{divergence} loss, {loss_type} vs {mode}")
    assert_same(grad_of(ours, ours_logps), grad_of(theirs, their_logps), f"gradient of DPPO-{divergence} ({mode})")
    for name in METRICS:
        assert_same(metrics[name], their_metrics[name], name)
    assert metrics["actor/pg_clipfrac"] > 0  # the trust region masks some tokens
    if clip_ratio_c == 3.0 and mask[8].any():
        assert metrics["actor/pg_clipfrac_lower"] > 0  # and the TIS cap bites inside it


def test_verl_dppo_truncates_at_the_actor_default_clip_ratio_c_not_20():
    """`compute_policy_loss_dppo_tv` falls back to C = 20 only when the config has no clip_ratio_c; ActorConfig
    always has one (default 3.0, meant for dual-clip PPO), so a reader's default DPPO run truncates w at 3."""
    batch = dppo_batch(0, torch.float64)
    batch.old_logps[1, :] = -8.0  # rare tokens: w = e^2 > 3 while p − p_old < 0.003, inside the trust region
    batch.logps = batch.logps.detach().index_put((torch.tensor([1]),), torch.full((7,), -6.0, dtype=torch.float64))
    batch.advantages[1] = 1.0
    default = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert default.clip_ratio_c == 3.0 and default.clip_ratio_low == default.clip_ratio_high == 0.2
    theirs, _ = verl_policy_loss("dppo_tv", batch, batch.logps.detach(), batch.mask, "token-mean", default)
    at_3, _ = dppo_loss(batch.logps.detach(), batch.old_logps, batch.advantages, batch.mask, clip_ratio_c=3.0)
    at_20, _ = dppo_loss(batch.logps.detach(), batch.old_logps, batch.advantages, batch.mask)
    assert_same(at_3, theirs, "verl default config vs clip_ratio_c=3")
    assert (at_20 - theirs).abs() > 1e-3
