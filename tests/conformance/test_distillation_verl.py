"""On-policy distillation with a policy gradient: rlhf_toy `onpolicy_distillation_loss` vs verl 0.9.1.

verl `distillation_loss` (use_policy_gradient=True) feeds `advantages = -kl_penalty(log_prob, teacher_logprobs,
loss_mode)` to the policy loss `policy_loss_mode` ("vanilla" by default). With loss_mode="k1", on-policy
(old_log_prob = log_prob) and token-mean aggregation this is our loss, value and gradient.
"""

from __future__ import annotations

import pytest
import verl.trainer.ppo.core_algos as core_algos
from verl.workers.config import DistillationLossConfig

from rlhf_toy.losses.distillation import onpolicy_distillation_loss, reverse_kl_advantages

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_advantage_is_minus_verl_k1(seed, dtype):
    b = token_batch(seed, dtype)
    logps = b.logps.detach()
    ours = reverse_kl_advantages(logps, b.ref_logps, b.mask)
    theirs = -core_algos.kl_penalty(logps, b.ref_logps, "k1")
    assert_same(ours[b.mask == 1], theirs[b.mask == 1], "advantage vs -verl k1")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_loss_matches_verl_vanilla_policy_loss_on_policy(seed, dtype):
    b = token_batch(seed, dtype)
    config = DistillationLossConfig(loss_mode="k1")
    ours_logps, their_logps = b.fresh_logps(), b.fresh_logps()
    ours, _ = onpolicy_distillation_loss(ours_logps, b.ref_logps, b.mask)
    advantages = -core_algos.kl_penalty(their_logps, b.ref_logps, "k1").detach()
    theirs, _ = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=their_logps.detach(),
        log_prob=their_logps,
        advantages=advantages,
        response_mask=b.mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    assert_same(ours, theirs, "loss vs verl vanilla")
    ours.backward()
    theirs.backward()
    assert_same(ours_logps.grad, their_logps.grad, "gradient vs verl vanilla")
