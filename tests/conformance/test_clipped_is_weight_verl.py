"""CISPO in verl's convention: rlhf_toy `cispo_loss_verl` vs verl 0.9.1 `get_policy_loss_fn("cispo")`
(`compute_policy_loss_cispo`): value, gradient and metrics, ratios far from 1 on both sides, every aggregation.

verl clips the (stop-gradient) ratio to [1 − clip_ratio_low, 1 + clip_ratio_high], both sides; TRL's
`loss_type="cispo"` caps it at the absolute value `epsilon_high` with no lower bound (see the module docstring).
"""

from __future__ import annotations

import pytest
import torch

from rlhf_toy.losses.clipped_is_weight_verl import cispo_loss_verl

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .verl_policy_losses import AGGREGATIONS, grad_of, mask_for, verl_config, verl_policy_loss


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "mode"), AGGREGATIONS)
@pytest.mark.parametrize(("epsilon", "epsilon_high"), [(0.2, None), (0.2, 0.28), (1.0, 4.0)])
def test_cispo_loss_matches_verl(seed, dtype, loss_type, mode, epsilon, epsilon_high):
    batch = token_batch(seed, dtype)
    mask = mask_for(mode, batch.mask)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, metrics = cispo_loss_verl(
        ours_logps, batch.old_logps, batch.advantages, mask, epsilon, epsilon_high, loss_type=loss_type
    )
    config = verl_config(epsilon, epsilon_high)
    theirs, their_metrics = verl_policy_loss("cispo", batch, their_logps, mask, mode, config)
    assert_same(ours, theirs, f"CISPO loss, {loss_type} vs {mode}")
    assert_same(grad_of(ours, ours_logps), grad_of(theirs, their_logps), f"gradient of the CISPO loss ({mode})")
    for name in ("actor/pg_clipfrac", "actor/ppo_kl"):
        assert_same(metrics[name], their_metrics[name], name)
    assert metrics["actor/pg_clipfrac"] > 0  # the ratio is clipped somewhere


def test_verl_cispo_clips_the_lower_side_too():
    """A token whose ratio fell to e^-3 still has a gradient, but with coefficient (1 − 0.2)·A, not e^-3·A."""
    batch = token_batch(0, torch.float64)
    logps = batch.fresh_logps()
    loss, _ = verl_policy_loss("cispo", batch, logps, batch.mask, "token-mean", verl_config())
    grad = grad_of(loss, logps)
    row, n = 3, batch.mask.sum()
    assert batch.mask[row, 0] == 1
    assert_same(grad[row, 0], -(1 - 0.2) * batch.advantages[row] / n, "gradient where w = e^-3")
