"""GMPO: rlhf_toy `geometric_mean_ratio_loss` vs TRL 1.16 `trl.experimental.gmpo.GMPOTrainer._compute_loss`.

beta ∈ {0, 0.04} × epsilon_high ∈ {None, 0.6} with GMPOConfig's epsilon = 0.4 (log space): gradient, the three
`clip_ratio/*_mean` metrics and `kl` are equal. GMPO has no importance_sampling_level or loss_type (TRL's GMPO does not
read them). The value differs on purpose for all-masked rows: TRL's geometric mean of no tokens is e^0 = 1, so such a
row adds the constant −A_i/B; rlhf_toy adds 0 (geometric_mean_ratio.py's module docstring).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from rlhf_toy.losses.geometric_mean_ratio import geometric_mean_ratio_loss

from .new_loss_types import BETAS, both
from .same_inputs import DTYPES, SEEDS, assert_same, token_batch

SETTINGS = list(itertools.product(BETAS, [None, 0.6]))
CLIP_METRICS = ["clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_gmpo_matches_trl(seed, dtype):
    batch = token_batch(seed, dtype)  # row 0 is all-masked
    empty = batch.mask.sum(-1) == 0
    assert empty.any()
    for beta, epsilon_high in SETTINGS:
        what = f"gmpo, beta={beta}, epsilon_high={epsilon_high}"
        settings = dict(epsilon=0.4, epsilon_high=epsilon_high)
        (ours, grad, metrics), (theirs, their_grad, their_metrics) = both(
            batch, geometric_mean_ratio_loss, settings, settings, beta=beta, gmpo=True
        )
        trl_constant = -(batch.advantages * empty).sum() / len(empty)  # −Σ_{empty rows} A_i / B
        assert_same(ours + trl_constant, theirs, f"loss ({what})")
        assert_same(grad, their_grad, f"gradient ({what})")
        for name in CLIP_METRICS + (["kl"] if beta else []):
            assert_same(metrics[name], their_metrics[name], f"{name} ({what})")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gmpo_value_is_trls_without_empty_rows(dtype):
    batch = token_batch(1, dtype)
    mask = batch.mask.clone()
    mask[:, 0] = 1.0  # every row has at least one token
    (ours, grad, _), (theirs, their_grad, _) = both(
        batch, geometric_mean_ratio_loss, {}, {}, beta=0.04, gmpo=True, mask=mask
    )
    assert_same(ours, theirs, "loss without empty rows")
    assert_same(grad, their_grad, "gradient without empty rows")


def test_tokens_clip_on_both_sides_on_these_inputs():
    batch = token_batch(0, torch.float64)
    (_, _, metrics), _ = both(batch, geometric_mean_ratio_loss, {}, {}, beta=0.0, gmpo=True)
    assert metrics["clip_ratio/low_mean"] > 0 and metrics["clip_ratio/high_mean"] > 0
