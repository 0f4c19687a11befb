"""GMPO in verl's convention: rlhf_toy `gmpo_loss_verl` vs verl 0.9.1 `get_policy_loss_fn("geo_mean")`
(`compute_policy_loss_geo_mean`): value, gradient and metrics, ratios e^{±3} so both one-sided clips act.

verl ignores `loss_agg_mode` here and takes the plain mean over all B completions (empty rows included, like
rlhf_toy's grpo), so the batch keeps its empty rows and every mode gives the same loss.
"""

from __future__ import annotations

import pytest
import torch

from rlhf_toy.losses.geometric_mean import gmpo_gradient_weight_verl, gmpo_loss_verl

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .verl_policy_losses import grad_of, verl_config, verl_policy_loss

VERL_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
METRICS = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", VERL_MODES)
@pytest.mark.parametrize(("epsilon", "epsilon_high"), [(0.2, None), (0.4, 0.4), (0.1, 0.3)])
@pytest.mark.parametrize("token_level", [False, True])
def test_gmpo_loss_matches_verl(seed, dtype, mode, epsilon, epsilon_high, token_level):
    batch = token_batch(seed, dtype)
    assert (batch.mask.sum(-1) == 0).any()
    advantages = batch.advantages[:, None].expand_as(batch.mask)
    if token_level:  # verl averages token-level advantages per completion; signs may differ inside a completion
        g = torch.Generator().manual_seed(seed)
        advantages = advantages + torch.randn(batch.mask.shape, generator=g, dtype=torch.float64).to(dtype)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, metrics = gmpo_loss_verl(ours_logps, batch.old_logps, advantages, batch.mask, epsilon, epsilon_high)
    config = verl_config(epsilon, epsilon_high)
    theirs, their_metrics = verl_policy_loss("geo_mean", batch, their_logps, batch.mask, mode, config, advantages)
    assert_same(ours, theirs, f"GMPO loss (verl loss_agg_mode={mode})")
    ours_grad, their_grad = grad_of(ours, ours_logps), grad_of(theirs, their_logps)
    assert_same(ours_grad, their_grad, f"gradient of the GMPO loss ({mode})")
    assert_same(
        gmpo_gradient_weight_verl(batch.logps.detach(), batch.old_logps, advantages, batch.mask, epsilon, epsilon_high)
        / batch.mask.shape[0],
        their_grad,
        "closed-form gradient",
    )
    for name in METRICS:
        assert_same(metrics[name], their_metrics[name], name)
    assert metrics["actor/pg_clipfrac"] > 0 and metrics["actor/pg_clipfrac_lower"] > 0
