"""VESPO: rlhf_toy `gamma_weight_loss` vs TRL 1.16 `GRPOTrainer._compute_loss(loss_type="vespo")`.

beta ∈ {0, 0.04} × TRL's importance_sampling_level ∈ {token, sequence} (rlhf_toy has no such argument: TRL's vespo
branch always sums the token log-ratios, so both levels must give rlhf_toy's one answer) × (k, λ) ∈ {TRL's defaults,
other values}: loss, gradient, `vespo/phi_seq_mean` and `kl`. A separate test drives the log-ratios past TRL's clamps.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from rlhf_toy.losses.gamma_weight import gamma_weight, gamma_weight_loss

from .new_loss_types import BETAS, compare
from .same_inputs import DTYPES, SEEDS, token_batch

SHAPES = [{}, dict(vespo_k_pos=1.5, vespo_lambda_pos=0.5, vespo_k_neg=4.0, vespo_lambda_neg=1.0)]
SETTINGS = list(itertools.product(BETAS, ["token", "sequence"], range(len(SHAPES))))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_vespo_matches_trl(seed, dtype):
    batch = token_batch(seed, dtype)
    for beta, level, shape in SETTINGS:
        compare(
            batch,
            gamma_weight_loss,
            SHAPES[shape],
            dict(loss_type="vespo", importance_sampling_level=level, **SHAPES[shape]),
            beta=beta,
            what=f"vespo, beta={beta}, {level}, shape={SHAPES[shape]}",
            metric_names=["vespo/phi_seq_mean"],
        )


def test_the_weights_are_far_from_one_on_these_inputs():
    batch = token_batch(0, torch.float64)
    phi = gamma_weight(batch.logps.detach() - batch.old_logps, batch.mask, batch.advantages)
    assert phi.min() < 0.2 and phi.max() > 1.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_clamped_log_ratios_match_trl(dtype):
    """Token log-ratios of ±25 (clamped to ±20) and sequence sums beyond 20 and below log 1e-8."""
    batch = token_batch(0, dtype)
    logps = batch.logps.detach().clone()
    logps[4, :2] = batch.old_logps[4, :2] + 25.0
    logps[5, :2] = batch.old_logps[5, :2] - 25.0
    batch.logps = logps.requires_grad_(True)
    batch.mask[4:6, :2] = 1.0
    for beta in BETAS:
        compare(
            batch,
            gamma_weight_loss,
            {},
            dict(loss_type="vespo"),
            beta=beta,
            what=f"vespo clamps, beta={beta}",
            metric_names=["vespo/phi_seq_mean"],
        )
