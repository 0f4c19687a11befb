"""Calling verl 0.9.1's registered policy losses (`get_policy_loss_fn(name)`) the way its trainer does.

verl's `workers/utils/losses.py::ppo_loss` reads `actor.policy_loss.loss_mode`, looks the function up with
`get_policy_loss_fn` and calls it with keyword arguments, token-level advantages `(B, T)`, a boolean
`response_mask` and the actor config (`global_batch_info` is empty on one process).
"""

from __future__ import annotations

import torch
import verl.trainer.ppo.core_algos as core_algos
from verl.workers.config import ActorConfig, PolicyLossConfig

from .test_ppo_verl import NO_DUAL_CLIP

# (rlhf_toy loss_type, verl loss_agg_mode): the pairs that agree (tests/conformance/test_loss_aggregation_verl.py)
AGGREGATIONS = [
    ("bnpo", "token-mean"),
    ("dapo", "token-mean"),
    ("grpo", "seq-mean-token-mean"),
    ("dr_grpo", "seq-mean-token-sum-norm"),
]
SEQUENCE_MODES = ("seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-mean-token-sum")


def verl_config(epsilon=0.2, epsilon_high=None, clip_ratio_c=NO_DUAL_CLIP, tau_pos=1.0, tau_neg=1.05, **policy_loss):
    """The real `ActorConfig` (gspo, sapo and cispo assert its type), with `policy_loss` fields as keywords."""
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=epsilon,
        clip_ratio_low=epsilon,
        clip_ratio_high=epsilon if epsilon_high is None else epsilon_high,
        clip_ratio_c=clip_ratio_c,
        tau_pos=tau_pos,
        tau_neg=tau_neg,
        policy_loss=PolicyLossConfig(**policy_loss),
    )


def verl_policy_loss(name, batch, logps, mask, loss_agg_mode, config, advantages=None):
    """verl's registered loss `name` on the batch; `advantages` default to the per-completion ones, broadcast."""
    if advantages is None:
        advantages = batch.advantages[:, None].expand_as(mask)
    return core_algos.get_policy_loss_fn(name)(
        old_log_prob=batch.old_logps,
        log_prob=logps,
        advantages=advantages,
        response_mask=mask.bool(),  # as verl's ppo_loss passes it
        loss_agg_mode=loss_agg_mode,
        config=config,
    )


def without_empty_rows(mask):
    """verl's seq-mean modes drop completions whose mask is all zero; rlhf_toy and TRL count them."""
    mask = mask.clone()
    mask[mask.sum(-1) == 0, 0] = 1
    return mask


def mask_for(mode, mask):
    return without_empty_rows(mask) if mode in SEQUENCE_MODES else mask


def grad_of(loss, logps):
    (grad,) = torch.autograd.grad(loss, logps)
    return grad
