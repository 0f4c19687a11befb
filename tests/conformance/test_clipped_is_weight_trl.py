"""CISPO: rlhf_toy `clipped_is_weight_loss` vs TRL 1.16 `GRPOTrainer._compute_loss(loss_type="cispo")`.

beta ∈ {0, 0.04} × importance_sampling_level ∈ {token, sequence} × epsilon_high ∈ {unset (TRL falls back to epsilon = 0.2),
5.0 (TRL's recommendation), 1.5}: loss, gradient and the logged `cispo_clip_ratio` and `kl`.
"""

from __future__ import annotations

import itertools

import pytest

from rlhf_toy.losses.clipped_is_weight import clipped_is_weight_loss

from .new_loss_types import BETAS, compare
from .same_inputs import DTYPES, SEEDS, token_batch

SETTINGS = list(itertools.product(BETAS, ["token", "sequence"], [None, 5.0, 1.5]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_cispo_matches_trl(seed, dtype):
    batch = token_batch(seed, dtype)
    for beta, level, epsilon_high in SETTINGS:
        ours_cap = 0.2 if epsilon_high is None else epsilon_high  # TRL: epsilon_high unset -> epsilon
        compare(
            batch,
            clipped_is_weight_loss,
            dict(epsilon_high=ours_cap, importance_sampling_level=level),
            dict(loss_type="cispo", epsilon_high=epsilon_high, importance_sampling_level=level),
            beta=beta,
            what=f"cispo, beta={beta}, {level}, epsilon_high={epsilon_high}",
            metric_names=["cispo_clip_ratio"],
        )


def test_the_cap_acts_on_these_inputs():
    """Some tokens have w > 5 and A > 0 (else the comparison would not exercise the cap)."""
    batch = token_batch(0, DTYPES[0])
    (_, _, metrics), _ = compare(
        batch, clipped_is_weight_loss, {}, dict(loss_type="cispo", epsilon_high=5.0), beta=0.0, what="cap"
    )
    assert metrics["cispo_clip_ratio"] > 0
