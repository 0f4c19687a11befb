"""DRO's quadratic log-ratio penalty: rlhf_toy `dro_loss` vs verl 0.9.1 `get_policy_loss_fn("dro")`
(`compute_policy_loss_dro`), value, gradient and `actor/ppo_kl`, every aggregation verl allows."""

from __future__ import annotations

import pytest
import torch

from rlhf_toy.losses.group_pg import gpg_loss
from rlhf_toy.losses.log_ratio_penalty import dro_loss

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .verl_policy_losses import AGGREGATIONS, grad_of, mask_for, verl_config, verl_policy_loss


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "mode"), AGGREGATIONS)
@pytest.mark.parametrize("beta", [0.05, 1.0])
def test_dro_loss_matches_verl(seed, dtype, loss_type, mode, beta):
    batch = token_batch(seed, dtype)  # rows 2 and 3 have |log w| = 3: the penalty is large there
    mask = mask_for(mode, batch.mask)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, metrics = dro_loss(ours_logps, batch.old_logps, batch.advantages, mask, beta=beta, loss_type=loss_type)
    theirs, their_metrics = verl_policy_loss("dro", batch, their_logps, mask, mode, verl_config(dro_beta=beta))
    assert_same(ours, theirs, f"DRO loss, {loss_type} vs {mode}")
    assert_same(grad_of(ours, ours_logps), grad_of(theirs, their_logps), f"gradient of the DRO loss ({mode})")
    assert_same(metrics["actor/ppo_kl"], their_metrics["actor/ppo_kl"], "actor/ppo_kl")


@pytest.mark.parametrize("beta", [None, 0.0])
def test_verl_dro_needs_a_positive_beta(beta):
    """verl's default `policy_loss.dro_beta` is None: loss_mode="dro" fails until the reader sets it (> 0).
    rlhf_toy accepts beta = 0, where DRO is GPG."""
    batch = token_batch(0, torch.float64)
    with pytest.raises(ValueError, match="dro_beta must be a positive value"):
        verl_policy_loss("dro", batch, batch.logps.detach(), batch.mask, "token-mean", verl_config(dro_beta=beta))
    ours, _ = dro_loss(batch.logps.detach(), batch.old_logps, batch.advantages, batch.mask, beta=0.0)
    assert_same(ours, gpg_loss(batch.logps.detach(), batch.advantages, batch.mask)[0], "DRO at beta = 0 vs GPG")
