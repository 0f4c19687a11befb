"""GPG's plain group policy gradient: rlhf_toy `gpg_loss` vs verl 0.9.1 `get_policy_loss_fn("gpg")`
(`compute_policy_loss_gpg`), value and gradient, every aggregation verl allows."""

from __future__ import annotations

import pytest

from rlhf_toy.losses.group_pg import gpg_loss

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .verl_policy_losses import AGGREGATIONS, grad_of, mask_for, verl_config, verl_policy_loss


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "mode"), AGGREGATIONS)
def test_gpg_loss_matches_verl(seed, dtype, loss_type, mode):
    batch = token_batch(seed, dtype)
    mask = mask_for(mode, batch.mask)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, _ = gpg_loss(ours_logps, batch.advantages, mask, loss_type=loss_type)
    theirs, their_metrics = verl_policy_loss("gpg", batch, their_logps, mask, mode, verl_config())
    assert their_metrics == {}
    assert_same(ours, theirs, f"GPG loss, {loss_type} vs {mode}")
    assert_same(grad_of(ours, ours_logps), grad_of(theirs, their_logps), f"gradient of the GPG loss ({mode})")


@pytest.mark.parametrize("dtype", DTYPES)
def test_verl_token_sum_is_token_count_times_bnpo(dtype):
    """verl's `token-sum` has no rlhf_toy loss_type: it is bnpo times the number of tokens in the mask."""
    batch = token_batch(0, dtype)
    ours, _ = gpg_loss(batch.logps.detach(), batch.advantages, batch.mask, loss_type="bnpo")
    theirs, _ = verl_policy_loss("gpg", batch, batch.logps.detach(), batch.mask, "token-sum", verl_config())
    assert_same(ours * batch.mask.sum(), theirs, "token-sum vs N·bnpo")
