"""Rollout correction: rlhf_toy `importance_weights` / `effective_sample_size` vs verl 0.9.1
`compute_rollout_correction_weights` (token / sequence TIS, IcePop "lower_upper" token mask, "lower_upper" at sequence level), and the off-policy
sequence mask vs TRL 1.16 `GRPOTrainer.get_off_policy_mask`.

Intended differences (chapter 12, offpolicy section): verl zeroes the weights at padding and broadcasts the sequence
weight to (B, T); TRL and rlhf_toy give weight 1 at padding and a (B, 1) sequence weight. Compared on `weight * mask`.
verl clamps the log-ratio at ±20 (SAFETY_BOUND) before exp; TRL does not (test below).
"""

from __future__ import annotations

import pytest
import torch
from trl import GRPOTrainer
from verl.trainer.ppo.rollout_corr_helper import SAFETY_BOUND, compute_rollout_correction_weights

from rlhf_toy.estimators.importance import effective_sample_size, importance_weights, off_policy_sequence_mask

from .same_inputs import DTYPES, SEEDS, assert_same, right_padded_mask


def rollout_batch(seed, dtype, batch=16, length=7):
    """Trainer and sampler log-probs 0.5 nat apart on average, right-padded, row 0 empty, row 1 full."""
    g = torch.Generator().manual_seed(seed)
    logps = -3 * torch.rand(batch, length, generator=g, dtype=torch.float64)
    sampler_logps = logps + 0.5 * torch.randn(batch, length, generator=g, dtype=torch.float64)
    mask = right_padded_mask(batch, length, g, torch.float64)
    mask[0] = 1  # verl's metrics need a valid token in every call; keep one full row
    mask[2] = 0  # and one empty row
    return logps.to(dtype), sampler_logps.to(dtype), mask.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_truncated_weights_match_verl(seed, dtype, level):
    logps, mu, mask = rollout_batch(seed, dtype)
    ours = importance_weights(logps, mu, mask, f"{level}_truncate", clip_max=2.0)
    theirs, metrics = compute_rollout_correction_weights(logps - mu, mask, rollout_is=level, rollout_is_threshold=2.0)
    assert_same(ours.expand_as(mask) * mask, theirs, f"{level} TIS weights")
    ess = effective_sample_size(ours, mask, clip_max=2.0)
    assert_same(ess, metrics["rollout_is_eff_sample_size"], f"{level} ESS")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_icepop_lower_upper_is_a_token_mask(seed, dtype):
    logps, mu, mask = rollout_batch(seed, dtype)
    ours = importance_weights(logps, mu, mask, "token_mask", clip_max=2.0, clip_min=0.5)
    theirs, _ = compute_rollout_correction_weights(logps - mu, mask, rollout_is="token", rollout_is_threshold="0.5_2.0")
    assert_same(ours * mask, theirs, "IcePop token mask")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_lower_upper_at_sequence_level_is_a_sequence_mask(seed, dtype):
    # verl's default rollout_is="sequence" with a "lower_upper" threshold: the two bounds act on the sequence weight.
    logps, mu, mask = rollout_batch(seed, dtype)
    ours = importance_weights(logps, mu, mask, "sequence_mask", clip_max=2.0, clip_min=0.5)
    theirs, _ = compute_rollout_correction_weights(
        logps - mu, mask, rollout_is="sequence", rollout_is_threshold="0.5_2.0"
    )
    assert_same(ours.expand_as(mask) * mask, theirs, "two-sided sequence mask")


def test_verl_clamps_the_log_ratio_and_trl_does_not():
    logps = torch.zeros(1, 2, dtype=torch.float64)
    mu = torch.tensor([[-25.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.float64)
    ours = importance_weights(logps, mu, mask, "token_truncate", clip_max=1e12)
    theirs, _ = compute_rollout_correction_weights(logps - mu, mask, rollout_is="token", rollout_is_threshold=1e12)
    assert ours[0, 0].item() == pytest.approx(torch.tensor(25.0).exp().item())
    assert theirs[0, 0].item() == pytest.approx(torch.tensor(SAFETY_BOUND).exp().item())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_off_policy_sequence_mask_matches_trl(seed, dtype):
    logps, mu, mask = rollout_batch(seed, dtype)
    advantages = torch.randn(16, 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)
    ours = off_policy_sequence_mask(advantages, logps, mu, mask, threshold=0.3)
    theirs = GRPOTrainer.get_off_policy_mask(advantages, logps, mu, mask, off_policy_threshold=0.3)
    assert_same(ours, theirs, "off-policy sequence mask")
