"""SimPO: rlhf_toy `dpo_loss(loss_type="simpo")` vs TRL `CPOTrainer.cpo_loss` (trl.experimental.cpo).

`cpo_loss` receives log-probs already averaged over the completion (CPOTrainer's `average_log_prob=True` for simpo);
we pass sums and lengths. Compared: per-pair loss, gradient and the implicit rewards β·log π/|y|.
"""

from __future__ import annotations

import types

import pytest
import torch
from trl.experimental.cpo import CPOTrainer

from rlhf_toy import dpo_loss

from .same_inputs import DTYPES, SEEDS, assert_same


def trl_simpo(chosen_avg_logps, rejected_avg_logps, beta, simpo_gamma, label_smoothing):
    trainer = types.SimpleNamespace(
        alpha=0.0,
        loss_type="simpo",
        beta=beta,
        simpo_gamma=simpo_gamma,
        label_smoothing=label_smoothing,
        accelerator=types.SimpleNamespace(device=torch.device("cpu")),
    )
    return CPOTrainer.cpo_loss(trainer, chosen_avg_logps, rejected_avg_logps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("beta", "simpo_gamma", "label_smoothing"), [(2.0, 0.5, 0.0), (0.5, 1.0, 0.1)])
def test_simpo_matches_trl_cpo_loss(seed, dtype, beta, simpo_gamma, label_smoothing):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 9, (2, 8), generator=g).to(dtype)  # includes empty completions (length 0 → 1)
    sums = (-lengths * 2 * torch.rand(2, 8, generator=g, dtype=torch.float64).to(dtype)).requires_grad_(True)
    ours, metrics = dpo_loss(
        sums[0],
        sums[1],
        None,
        None,
        beta,
        loss_type="simpo",
        simpo_gamma=simpo_gamma,
        label_smoothing=label_smoothing,
        chosen_lengths=lengths[0],
        rejected_lengths=lengths[1],
    )
    (ours_grad,) = torch.autograd.grad(ours, sums)
    averages = sums / lengths.clamp(min=1)
    losses, chosen_rewards, rejected_rewards = trl_simpo(averages[0], averages[1], beta, simpo_gamma, label_smoothing)
    (their_grad,) = torch.autograd.grad(losses.mean(), sums)
    assert_same(ours, losses.mean(), "SimPO loss")
    assert_same(ours_grad, their_grad, "SimPO gradient")
    assert_same(metrics["rewards/chosen"], chosen_rewards.mean(), "rewards/chosen")
    assert_same(metrics["rewards/rejected"], rejected_rewards.mean(), "rewards/rejected")
    assert_same(metrics["rewards/margins"], (chosen_rewards - rejected_rewards).mean(), "rewards/margins")
