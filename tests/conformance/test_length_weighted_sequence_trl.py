"""LUSPO: rlhf_toy `length_weighted_sequence_loss` vs TRL 1.16 `GRPOTrainer._compute_loss(loss_type="luspo")`.

beta ∈ {0, 0.04} × importance_sampling_level ∈ {sequence (the paper's), token (TRL's default; it only warns)} ×
epsilon_high ∈ {None, 0.28}: loss, gradient, the three `clip_ratio/*_mean` metrics and `kl`.
"""

from __future__ import annotations

import itertools

import pytest

from rlhf_toy.losses.length_weighted_sequence import length_weighted_sequence_loss

from .new_loss_types import BETAS, compare
from .same_inputs import DTYPES, SEEDS, token_batch

SETTINGS = list(itertools.product(BETAS, ["sequence", "token"], [None, 0.28]))
CLIP_METRICS = ["clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_luspo_matches_trl(seed, dtype):
    batch = token_batch(seed, dtype)
    for beta, level, epsilon_high in SETTINGS:
        settings = dict(epsilon=0.2, epsilon_high=epsilon_high, importance_sampling_level=level)
        compare(
            batch,
            length_weighted_sequence_loss,
            settings,
            dict(loss_type="luspo", max_completion_length=9, **settings),
            beta=beta,
            what=f"luspo, beta={beta}, {level}, epsilon_high={epsilon_high}",
            metric_names=CLIP_METRICS,
        )


def test_sequences_clip_on_both_sides_on_these_inputs():
    batch = token_batch(0, DTYPES[0])
    (_, _, metrics), _ = compare(
        batch,
        length_weighted_sequence_loss,
        {},
        dict(loss_type="luspo", importance_sampling_level="sequence"),
        beta=0.0,
        what="clip",
        metric_names=CLIP_METRICS,
    )
    assert metrics["clip_ratio/low_mean"] > 0 and metrics["clip_ratio/high_mean"] > 0
