"""PPO losses, GAE and whitening: rlhf_toy vs verl `compute_policy_loss_vanilla`, `compute_value_loss`,
`compute_gae_advantage_return` and `masked_whiten` (value, gradient, metrics)."""

from __future__ import annotations

import pytest
import torch
import verl.trainer.ppo.core_algos as core_algos
import verl.utils.torch_functional as verl_functional
from verl.workers.config import ActorConfig

from rlhf_toy import aggregate_loss, gae_advantages, ppo_policy_loss, ppo_value_loss, whiten
from rlhf_toy.losses.grpo import clipped_surrogate

from .same_inputs import DTYPES, SEEDS, assert_same, holes_mask, right_padded_mask, token_batch

NO_DUAL_CLIP = 1e9  # verl's clip_ratio_c (dual clip for A < 0); this large it never bites


def actor_config(epsilon=0.2, epsilon_high=None, clip_ratio_c=NO_DUAL_CLIP):
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=epsilon,
        clip_ratio_low=epsilon,
        clip_ratio_high=epsilon if epsilon_high is None else epsilon_high,
        clip_ratio_c=clip_ratio_c,
    )


def token_advantages(batch):
    """(B, T) advantages, as PPO has after GAE."""
    g = torch.Generator().manual_seed(7)
    return batch.advantages[:, None] + 0.5 * torch.randn(batch.mask.shape, generator=g).to(batch.mask.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_ppo_policy_loss_matches_verl_vanilla(seed, dtype):
    batch = token_batch(seed, dtype)
    advantages = token_advantages(batch)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, metrics = ppo_policy_loss(ours_logps, batch.old_logps, advantages, batch.mask, epsilon=0.2)
    # note verl's argument order: old_log_prob first
    theirs, their_metrics = core_algos.compute_policy_loss_vanilla(
        batch.old_logps, their_logps, advantages, batch.mask, loss_agg_mode="token-mean", config=actor_config()
    )
    assert_same(ours, theirs, "ppo policy loss")
    ours.backward()
    theirs.backward()
    assert_same(ours_logps.grad, their_logps.grad, "gradient of the ppo policy loss")
    assert_same(metrics["policy/clipfrac_avg"], their_metrics["actor/pg_clipfrac"], "clipfrac")
    assert_same(metrics["policy/approxkl_k1"], their_metrics["actor/ppo_kl"], "approx KL (k1)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "mode"), [("dapo", "token-mean"), ("grpo", "seq-mean-token-mean")])
def test_clip_higher_surrogate_matches_verl(seed, dtype, loss_type, mode):
    """epsilon_high (DAPO's clip-higher) is verl's clip_ratio_high; rows with a mask are all non-empty here."""
    batch = token_batch(seed, dtype)
    mask = batch.mask.clone()
    mask[mask.sum(-1) == 0, 0] = 1
    advantages = batch.advantages[:, None].expand_as(mask)
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    per_token_loss, _ = clipped_surrogate(ours_logps, batch.old_logps, advantages, 0.2, 0.28)
    ours = aggregate_loss(per_token_loss, mask, loss_type)
    theirs, _ = core_algos.compute_policy_loss_vanilla(
        batch.old_logps, their_logps, advantages, mask, loss_agg_mode=mode, config=actor_config(0.2, 0.28)
    )
    assert_same(ours, theirs, f"clip-higher {loss_type} vs {mode}")
    ours.backward()
    theirs.backward()
    assert_same(ours_logps.grad, their_logps.grad, f"gradient, clip-higher {loss_type} vs {mode}")


def test_verl_dual_clip_differs_from_ppo_policy_loss():
    """By design (docs/grpo-variants.md, “与 TRL / verl 对照”): verl's default clip_ratio_c=3 caps the loss at
    −3·A where A < 0; rlhf_toy and TRL have no dual clip."""
    batch = token_batch(0, torch.float64)
    logps = batch.logps.detach().clone()
    logps[:, :2] = batch.old_logps[:, :2] + 1.5  # ratio e^1.5 ≈ 4.5 > 3
    advantages = token_advantages(batch)
    theirs, _ = core_algos.compute_policy_loss_vanilla(
        batch.old_logps,
        logps,
        advantages,
        batch.mask,
        loss_agg_mode="token-mean",
        config=actor_config(clip_ratio_c=3.0),
    )
    per_token_loss, _ = clipped_surrogate(logps, batch.old_logps, advantages, 0.2)
    dual_clipped = torch.where(advantages < 0, torch.minimum(per_token_loss, -3.0 * advantages), per_token_loss)
    assert_same(aggregate_loss(dual_clipped, batch.mask, "bnpo"), theirs, "dual clip composed from our surrogate")
    ours, _ = ppo_policy_loss(logps, batch.old_logps, advantages, batch.mask)
    assert (ours - theirs).abs() > 1e-3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_ppo_value_loss_matches_verl(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    old_values = torch.randn(16, 7, generator=g, dtype=torch.float64).to(dtype)
    values = (old_values + 0.5 * torch.randn(16, 7, generator=g, dtype=torch.float64).to(dtype)).requires_grad_(True)
    returns = torch.randn(16, 7, generator=g, dtype=torch.float64).to(dtype)
    mask = right_padded_mask(16, 7, g, dtype)
    ours, metrics = ppo_value_loss(values, old_values, returns, mask, cliprange_value=0.2)
    (ours_grad,) = torch.autograd.grad(ours, values)
    theirs, clipfrac = core_algos.compute_value_loss(values, returns, old_values, mask, cliprange_value=0.2)
    (their_grad,) = torch.autograd.grad(theirs, values)
    assert_same(ours, theirs, "value loss")
    assert_same(ours_grad, their_grad, "gradient of the value loss")
    assert_same(metrics["val/clipfrac_avg"], clipfrac, "value clipfrac")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (0.99, 0.9), (1.0, 1.0)])
@pytest.mark.parametrize("mask_kind", ["right_padded", "holes"])
def test_gae_matches_verl_on_the_mask(seed, dtype, gamma, lam, mask_kind):
    """verl whitens the advantages inside compute_gae_advantage_return; we whiten separately. Compared where
    mask = 1 (verl leaves the carried-over values at masked positions, we write 0)."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(16, 7, generator=g, dtype=torch.float64).to(dtype)
    values = torch.randn(16, 7, generator=g, dtype=torch.float64).to(dtype)
    mask = (right_padded_mask if mask_kind == "right_padded" else holes_mask)(16, 7, g, dtype)
    advantages, returns = gae_advantages(rewards, values, mask, gamma=gamma, lam=lam)
    their_advantages, their_returns = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma, lam)
    on = mask.bool()
    assert_same(returns[on], their_returns[on], "GAE returns")
    assert_same(whiten(advantages, mask)[on], their_advantages[on], "whitened GAE advantages")
    assert torch.equal(advantages[~on], torch.zeros_like(advantages[~on]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shift_mean", [True, False])
def test_whiten_matches_verl_masked_whiten(seed, dtype, shift_mean):
    g = torch.Generator().manual_seed(seed)
    x = (10 * torch.randn(16, 7, generator=g, dtype=torch.float64) + 3).to(dtype)
    mask = right_padded_mask(16, 7, g, dtype)
    theirs = verl_functional.masked_whiten(x, mask, shift_mean=shift_mean)
    on = mask.bool()
    assert_same(whiten(x, mask, shift_mean=shift_mean)[on], theirs[on], f"whiten(shift_mean={shift_mean})")
