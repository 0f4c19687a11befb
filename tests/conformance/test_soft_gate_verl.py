"""SAPO in verl's convention: rlhf_toy `sapo_loss_verl` vs verl 0.9.1 `get_policy_loss_fn("sapo")`
(`compute_policy_loss_sapo`), value, gradient and `actor/ppo_kl`.

verl ignores `loss_agg_mode` for SAPO and always averages per completion, then over completions
(seq-mean-token-mean); those tests pass every mode to verl and compare with the one aggregation.
"""

from __future__ import annotations

import pytest
import torch

from rlhf_toy.losses.aggregate import aggregate_loss
from rlhf_toy.losses.soft_gate_verl import sapo_loss_verl, soft_gate

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .verl_policy_losses import grad_of, verl_config, verl_policy_loss, without_empty_rows

VERL_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", VERL_MODES)
@pytest.mark.parametrize(("tau_pos", "tau_neg"), [(1.0, 1.05), (0.5, 3.0)])
def test_sapo_loss_matches_verl_whatever_the_loss_agg_mode(seed, dtype, mode, tau_pos, tau_neg):
    batch = token_batch(seed, dtype)  # rows 2, 3: w = e^{±3}, far out on the gate's tails
    mask = without_empty_rows(batch.mask)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, metrics = sapo_loss_verl(ours_logps, batch.old_logps, batch.advantages, mask, tau_pos, tau_neg)
    config = verl_config(tau_pos=tau_pos, tau_neg=tau_neg)
    theirs, their_metrics = verl_policy_loss("sapo", batch, their_logps, mask, mode, config)
    assert_same(ours, theirs, f"SAPO loss (verl loss_agg_mode={mode})")
    assert_same(grad_of(ours, ours_logps), grad_of(theirs, their_logps), f"gradient of the SAPO loss ({mode})")
    assert_same(metrics["actor/ppo_kl"], their_metrics["actor/ppo_kl"], "actor/ppo_kl")
    assert their_metrics["actor/pg_clipfrac"] == 0.0


def test_verl_sapo_drops_empty_rows_like_its_seq_mean():
    """By design (docs/grpo-variants.md, “与 TRL / verl 对照”): rlhf_toy divides by B, verl by the non-empty count."""
    batch = token_batch(0, torch.float64)
    non_empty = int((batch.mask.sum(-1) > 0).sum())
    assert non_empty < batch.mask.shape[0]
    ours, _ = sapo_loss_verl(batch.logps.detach(), batch.old_logps, batch.advantages, batch.mask)
    theirs, _ = verl_policy_loss("sapo", batch, batch.logps.detach(), batch.mask, "token-mean", verl_config())
    assert_same(ours * batch.mask.shape[0] / non_empty, theirs, "SAPO rescaled to verl's count")


def test_sapo_per_token_loss_is_the_gate_times_the_advantage():
    batch = token_batch(2, torch.float64)
    ratio = (batch.logps.detach() - batch.old_logps).exp()
    adv = batch.advantages[:, None].expand_as(ratio)
    per_token = -soft_gate(ratio, torch.where(adv > 0, 1.0, 1.05).double()) * adv
    ours, _ = sapo_loss_verl(batch.logps.detach(), batch.old_logps, batch.advantages, batch.mask)
    assert_same(ours, aggregate_loss(per_token, batch.mask, "grpo"), "SAPO = grpo aggregation of the gated loss")
