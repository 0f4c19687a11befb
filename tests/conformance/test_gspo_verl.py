"""Sequence-level importance ratios (GSPO): rlhf_toy `grpo_loss(importance_sampling_level="sequence")` vs verl
`compute_policy_loss_gspo`.

verl writes the GSPO-token form, log s_{i,t} = log π_θ − sg(log π_θ) + sg(log s_i): the same value as s_i, and with
seq-mean-token-mean aggregation the same gradient as our s_i = exp(mean of the log-ratios), whose derivative
spreads 1/|o_i| over the completion's tokens.
"""

from __future__ import annotations

import pytest
import torch
import verl.trainer.ppo.core_algos as core_algos

from rlhf_toy import grpo_loss, sequence_log_ratio

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .test_ppo_verl import actor_config


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("epsilon_high", [None, 0.28])
def test_sequence_level_loss_matches_verl_gspo(seed, dtype, epsilon_high):
    batch = token_batch(seed, dtype, spread=0.1)
    mask = batch.mask.clone()
    mask[mask.sum(-1) == 0, 0] = 1  # verl drops empty rows from seq-mean (see test_loss_aggregation_verl.py)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, _ = grpo_loss(
        ours_logps,
        batch.old_logps,
        None,
        batch.advantages,
        mask,
        epsilon=0.2,
        epsilon_high=epsilon_high,
        beta=0.0,
        loss_type="grpo",
        importance_sampling_level="sequence",
    )
    advantages = batch.advantages[:, None].expand_as(mask)
    theirs, _ = core_algos.compute_policy_loss_gspo(
        batch.old_logps,
        their_logps,
        advantages,
        mask,
        loss_agg_mode="seq-mean-token-mean",
        config=actor_config(0.2, epsilon_high),
    )
    assert_same(ours, theirs, "GSPO loss")
    ours.backward()
    theirs.backward()
    assert_same(ours_logps.grad, their_logps.grad, "gradient of the GSPO loss")


def test_sequence_log_ratio_is_the_masked_mean_verl_uses():
    batch = token_batch(0, torch.float64)
    log_s = sequence_log_ratio(batch.logps.detach(), batch.old_logps, batch.mask)
    per_token = (batch.logps.detach() - batch.old_logps) * batch.mask
    assert_same(log_s[:, 0], per_token.sum(-1) / batch.mask.sum(-1).clamp(min=1), "log s_i")
