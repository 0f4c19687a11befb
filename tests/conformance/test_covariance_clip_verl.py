"""Clip-Cov and KL-Cov: rlhf_toy `clip_cov_loss` / `kl_cov_loss` vs verl 0.9.1 `get_policy_loss_fn("clip_cov")` /
`get_policy_loss_fn("kl_cov")`, value, gradient and metrics, every aggregation verl allows.

Clip-Cov picks its tokens with `torch.randperm` on the global generator: both sides are called right after
`torch.manual_seed(s)`, so they draw the same permutation, and the selected set is compared token by token
(recovered from verl's gradient: a selected token is inside the mask, not PPO-clipped, and gets gradient 0).
KL-Cov picks the top-k covariances with `torch.topk`: deterministic.
"""

from __future__ import annotations

import pytest
import torch

from rlhf_toy.losses.covariance_clip import clip_cov_loss, clip_cov_selection, kl_cov_loss, token_covariance
from rlhf_toy.losses.grpo import clipped_surrogate

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch
from .verl_policy_losses import AGGREGATIONS, grad_of, mask_for, verl_config, verl_policy_loss

CLIP_COV = [  # (clip_cov_ratio, lb, ub): verl's defaults (picks 1 token), a random subset, all candidates
    (0.0002, 1.0, 5.0),
    (0.1, 0.2, 3.0),
    (1.0, 0.2, 3.0),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "mode"), AGGREGATIONS)
@pytest.mark.parametrize(("ratio", "lb", "ub"), CLIP_COV)
def test_clip_cov_loss_matches_verl(seed, dtype, loss_type, mode, ratio, lb, ub):
    batch = token_batch(seed, dtype)
    mask = mask_for(mode, batch.mask)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    torch.manual_seed(seed)
    ours, metrics = clip_cov_loss(
        ours_logps, batch.old_logps, batch.advantages, mask, 0.2, 0.28, ratio, lb, ub, loss_type=loss_type
    )
    config = verl_config(0.2, 0.28, clip_cov_ratio=ratio, clip_cov_lb=lb, clip_cov_ub=ub)
    torch.manual_seed(seed)
    theirs, their_metrics = verl_policy_loss("clip_cov", batch, their_logps, mask, mode, config)
    assert_same(ours, theirs, f"Clip-Cov loss, {loss_type} vs {mode}")
    their_grad = grad_of(theirs, their_logps)
    assert_same(grad_of(ours, ours_logps), their_grad, f"gradient of the Clip-Cov loss ({mode})")
    for name in ("actor/pg_clipfrac", "actor/ppo_kl"):
        assert_same(metrics[name], their_metrics[name], name)

    # the selected set itself, token by token
    adv = batch.advantages[:, None].expand_as(mask)
    _, is_clipped = clipped_surrogate(batch.logps.detach(), batch.old_logps, adv, 0.2, 0.28)
    candidates = mask.bool() & ~is_clipped
    torch.manual_seed(seed)
    selected = clip_cov_selection(token_covariance(batch.logps, adv, mask), candidates, ratio, lb, ub)
    theirs_selected = candidates & (their_grad == 0) & (adv != 0)
    assert torch.equal(selected, theirs_selected)
    assert selected.sum() >= 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "mode"), AGGREGATIONS)
@pytest.mark.parametrize(("ratio", "coef"), [(0.0002, 0.1), (0.1, 1.0), (0.5, 0.1)])
def test_kl_cov_loss_matches_verl(seed, dtype, loss_type, mode, ratio, coef):
    batch = token_batch(seed, dtype)
    mask = mask_for(mode, batch.mask)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, metrics = kl_cov_loss(ours_logps, batch.old_logps, batch.advantages, mask, ratio, coef, loss_type=loss_type)
    config = verl_config(kl_cov_ratio=ratio, ppo_kl_coef=coef)
    theirs, their_metrics = verl_policy_loss("kl_cov", batch, their_logps, mask, mode, config)
    assert_same(ours, theirs, f"KL-Cov loss, {loss_type} vs {mode}")
    assert_same(grad_of(ours, ours_logps), grad_of(theirs, their_logps), f"gradient of the KL-Cov loss ({mode})")
    assert_same(metrics["actor/ppo_kl"], their_metrics["actor/ppo_kl"], "actor/ppo_kl (|log w| for KL-Cov)")
    num = mask.sum()
    assert_same(metrics["kl_cov_fraction"], max(1, int(num * ratio)) / num, "selected fraction")


def test_clip_cov_with_a_fixed_generator_is_reproducible_and_differs_between_seeds():
    batch = token_batch(0, torch.float64)
    args = (batch.logps.detach(), batch.old_logps, batch.advantages, batch.mask, 0.2, 0.28, 0.1, 0.2, 3.0)
    first, _ = clip_cov_loss(*args, generator=torch.Generator().manual_seed(1))
    again, _ = clip_cov_loss(*args, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, again)
    others = {clip_cov_loss(*args, generator=torch.Generator().manual_seed(s))[0].item() for s in range(2, 8)}
    assert len(others | {first.item()}) > 1  # a random subset: different seeds pick different tokens
