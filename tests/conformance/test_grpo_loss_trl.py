"""GRPO loss: rlhf_toy `grpo_loss` vs TRL `GRPOTrainer._compute_loss` on the same tensors.

Every loss_type × beta ∈ {0, 0.04} × epsilon_high ∈ {None, 0.28} × on/off-policy, plus the sequence level (GSPO)
and use_bias_correction_kl: loss, gradient, and the logged `clip_ratio/*` and `kl` metrics.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from rlhf_toy import grpo_loss, importance_corrected_k3

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .trl_private import trl_grpo_loss

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]
SETTINGS = list(itertools.product([0.0, 0.04], [None, 0.28], ["on_policy", "off_policy"]))


def both_losses(batch, *, loss_type, beta, epsilon_high, policy, importance_sampling_level="token", mask=None):
    mask = batch.mask if mask is None else mask
    old_logps = batch.old_logps if policy == "off_policy" else None
    ref_logps = batch.ref_logps if beta else None
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    config = dict(
        loss_type=loss_type,
        beta=beta,
        epsilon=0.2,
        epsilon_high=epsilon_high,
        max_completion_length=9,
        importance_sampling_level=importance_sampling_level,
    )
    ours, metrics = grpo_loss(ours_logps, old_logps, ref_logps, batch.advantages, mask, log_clip_sides=True, **config)
    theirs, their_metrics = trl_grpo_loss(their_logps, mask, batch.advantages, old_logps, ref_logps, **config)
    ours.backward()
    theirs.backward()
    return (ours, ours_logps.grad, metrics), (theirs, their_logps.grad, their_metrics)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_grpo_loss_matches_trl(seed, dtype, loss_type):
    batch = token_batch(seed, dtype)  # has an empty row: TRL and rlhf_toy both count it in B
    for beta, epsilon_high, policy in SETTINGS:
        what = f"{loss_type}, beta={beta}, epsilon_high={epsilon_high}, {policy}"
        (ours, grad, metrics), (theirs, their_grad, their_metrics) = both_losses(
            batch, loss_type=loss_type, beta=beta, epsilon_high=epsilon_high, policy=policy
        )
        assert_same(ours, theirs, f"loss ({what})")
        assert_same(grad, their_grad, f"gradient ({what})")
        assert_same(metrics["clip_ratio"], their_metrics["clip_ratio/region_mean"], f"clip_ratio ({what})")
        assert_same(metrics["clip_ratio/low_mean"], their_metrics["clip_ratio/low_mean"], f"low clip ({what})")
        assert_same(metrics["clip_ratio/high_mean"], their_metrics["clip_ratio/high_mean"], f"high clip ({what})")
        if beta:
            assert_same(metrics["kl"], their_metrics["kl"], f"kl ({what})")
        else:
            assert "kl" not in metrics and "kl" not in their_metrics


def test_off_policy_inputs_clip_on_both_sides():
    """The inputs are far enough from old_logps that both clip sides bite (else the comparison proves less)."""
    batch = token_batch(0, torch.float64)
    _, (_, _, their_metrics) = both_losses(batch, loss_type="grpo", beta=0.0, epsilon_high=None, policy="off_policy")
    assert their_metrics["clip_ratio/low_mean"] > 0 and their_metrics["clip_ratio/high_mean"] > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("epsilon_high", [None, 0.28])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_sequence_level_ratio_matches_trl(seed, dtype, epsilon_high, beta):
    batch = token_batch(seed, dtype, spread=0.1)
    (ours, grad, metrics), (theirs, their_grad, their_metrics) = both_losses(
        batch,
        loss_type="grpo",
        beta=beta,
        epsilon_high=epsilon_high,
        policy="off_policy",
        importance_sampling_level="sequence",
    )
    assert_same(ours, theirs, "GSPO loss")
    assert_same(grad, their_grad, "GSPO gradient")
    assert_same(metrics["clip_ratio"], their_metrics["clip_ratio/region_mean"], "GSPO clip_ratio")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_use_bias_correction_kl_matches_importance_corrected_k3(seed, dtype):
    """With advantages 0 and beta = 1 TRL's loss is the KL term alone: w·k3 averaged over tokens (bnpo)."""
    batch = token_batch(seed, dtype)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    zero = torch.zeros_like(batch.advantages)
    theirs, _ = trl_grpo_loss(
        their_logps,
        batch.mask,
        zero,
        batch.old_logps,
        batch.ref_logps,
        loss_type="bnpo",
        beta=1.0,
        use_bias_correction_kl=True,
    )
    per_token = importance_corrected_k3(ours_logps, batch.ref_logps, batch.old_logps)
    ours = (per_token * batch.mask).sum() / batch.mask.sum()
    ours.backward()
    theirs.backward()
    assert_same(ours, theirs, "w·k3")
    assert_same(ours_logps.grad, their_logps.grad, "gradient of w·k3")
