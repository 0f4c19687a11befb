"""Which policy losses verl 0.9.1 registers, which a reader can select, and which rlhf_toy function matches each.

verl's trainer (`verl/workers/utils/losses.py::ppo_loss`) reads `actor_rollout_ref.actor.policy_loss.loss_mode`
(a plain string in `PolicyLossConfig`, default "vanilla", not validated when the config is built) and looks it up
with `get_policy_loss_fn`: every registered name is selectable from the config, and nothing else is.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import verl.trainer.ppo.core_algos as core_algos
import verl.workers.utils.losses as verl_losses
from verl.workers.config import ActorConfig, PolicyLossConfig

from rlhf_toy.losses.covariance_clip import kl_cov_loss

from .same_inputs import assert_same, token_batch
from .verl_policy_losses import verl_policy_loss

# registered name -> the rlhf_toy function and the conformance test that compares them
MATCHED = {
    "vanilla": "losses.ppo.ppo_policy_loss / losses.grpo.clipped_surrogate (test_ppo_verl.py)",
    "gspo": "losses.grpo.grpo_loss(importance_sampling_level='sequence') (test_gspo_verl.py)",
    "gpg": "losses.group_pg.gpg_loss (test_group_pg_verl.py)",
    "dro": "losses.log_ratio_penalty.dro_loss (test_log_ratio_penalty_verl.py)",
    "cispo": "losses.clipped_is_weight_verl.cispo_loss_verl (test_clipped_is_weight_verl.py)",
    "sapo": "losses.soft_gate_verl.sapo_loss_verl (test_soft_gate_verl.py)",
    "dppo_tv": "losses.divergence_mask.dppo_loss(divergence='tv') (test_divergence_mask_verl.py)",
    "dppo_kl": "losses.divergence_mask.dppo_loss(divergence='kl') (test_divergence_mask_verl.py)",
    "clip_cov": "losses.covariance_clip.clip_cov_loss (test_covariance_clip_verl.py)",
    "kl_cov": "losses.covariance_clip.kl_cov_loss (test_covariance_clip_verl.py)",
    "geo_mean": "losses.geometric_mean.gmpo_loss_verl (test_geometric_mean_verl.py)",
}
NOT_A_LOSS = {"bypass_mode"}  # dispatches to vanilla or REINFORCE after rollout correction; no idea of its own


def default_actor():
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)


def test_registered_policy_losses_are_exactly_these():
    assert set(core_algos.POLICY_LOSS_REGISTRY) == set(MATCHED) | NOT_A_LOSS


def test_the_trainer_selects_the_loss_by_policy_loss_loss_mode():
    source = inspect.getsource(verl_losses.ppo_loss)
    assert 'loss_mode = config.policy_loss.get("loss_mode", "vanilla")' in source
    assert "policy_loss_fn = get_policy_loss_fn(loss_mode)" in source
    assert PolicyLossConfig().loss_mode == "vanilla"
    assert PolicyLossConfig(loss_mode="no_such_loss").loss_mode == "no_such_loss"  # accepted here ...
    with pytest.raises(ValueError, match="Unsupported loss mode: no_such_loss"):  # ... fails at the lookup
        core_algos.get_policy_loss_fn("no_such_loss")


@pytest.mark.parametrize("name", sorted(set(MATCHED) | NOT_A_LOSS))
def test_every_registered_loss_runs_on_cpu_with_the_default_actor_config(name):
    """All run on CPU with float32 inputs and the default ActorConfig, except dro: its dro_beta defaults to None."""
    batch = token_batch(0, torch.float32)
    logps = batch.fresh_logps()
    if name == "dro":
        with pytest.raises(ValueError, match="dro_beta"):
            verl_policy_loss(name, batch, logps, batch.mask, "token-mean", default_actor())
        return
    loss, _ = verl_policy_loss(name, batch, logps, batch.mask, "token-mean", default_actor())
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logps.grad).all()


def test_bypass_mode_with_the_default_rollout_correction_is_vanilla():
    batch = token_batch(1, torch.float64)
    bypass, metrics = verl_policy_loss(
        "bypass_mode", batch, batch.logps.detach(), batch.mask, "token-mean", default_actor()
    )
    vanilla, _ = verl_policy_loss("vanilla", batch, batch.logps.detach(), batch.mask, "token-mean", default_actor())
    assert_same(bypass, vanilla, "bypass_mode vs vanilla")
    assert any(key.startswith("rollout_corr/") for key in metrics)


def test_kl_cov_coefficient_is_the_config_default_0_1_not_the_function_fallback_1():
    batch = token_batch(2, torch.float64)
    theirs, _ = verl_policy_loss("kl_cov", batch, batch.logps.detach(), batch.mask, "token-mean", default_actor())
    ours, _ = kl_cov_loss(batch.logps.detach(), batch.old_logps, batch.advantages, batch.mask)
    assert default_actor().policy_loss.ppo_kl_coef == 0.1
    assert_same(ours, theirs, "KL-Cov with verl's default config")
