"""Group-relative and leave-one-out advantages: rlhf_toy vs verl's outcome-advantage estimators.

verl takes token-level rewards and a response mask and returns (B, T); one reward per completion in a (B, 1)
tensor with mask 1 is the outcome-reward case, and the (B, 1) result is compared with our (B,).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import verl.trainer.ppo.core_algos as core_algos

from rlhf_toy import group_advantages, rloo_advantages

from .same_inputs import DTYPES, SEEDS, assert_same, group_rewards


def verl_outcome(estimator, rewards: torch.Tensor, num_generations: int, **kwargs) -> torch.Tensor:
    index = np.repeat(np.arange(len(rewards) // num_generations), num_generations).astype(object)
    scores = rewards.clone()[:, None]
    advantages, returns = estimator(scores, torch.ones_like(scores), index, **kwargs)
    assert torch.equal(advantages, returns)
    return advantages[:, 0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("eps", [1e-6, 1e-4])
def test_group_advantages_std_scaled_match_verl(seed, dtype, eps):
    rewards = group_rewards(seed, dtype)
    theirs = verl_outcome(core_algos.compute_grpo_outcome_advantage, rewards, 8, epsilon=eps)
    assert_same(group_advantages(rewards, 8, scale_rewards="group", eps=eps), theirs, "scale_rewards='group'")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_group_advantages_without_std_match_verl_dr_grpo(seed, dtype):
    rewards = group_rewards(seed, dtype)
    theirs = verl_outcome(core_algos.compute_grpo_outcome_advantage, rewards, 8, norm_adv_by_std_in_grpo=False)
    assert_same(group_advantages(rewards, 8, scale_rewards="none"), theirs, "scale_rewards='none'")


def test_default_eps_differs_from_verl():
    """By design (docs/grpo.md, the table in “与 TRL 的差异”): eps 1e-4 as TRL; verl adds 1e-6 to the std."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    ours = group_advantages(rewards, 4)
    theirs = verl_outcome(core_algos.compute_grpo_outcome_advantage, rewards, 4)
    std = rewards.std()
    assert_same(ours, (rewards - 0.25) / (std + 1e-4), "ours, eps 1e-4")
    assert_same(theirs, (rewards - 0.25) / (std + 1e-6), "verl, eps 1e-6")
    assert (ours - theirs).abs().max() > 1e-5


def test_group_of_one_differs_from_verl():
    """By design (docs/grpo.md: G = 1): our advantage is 0; verl uses mean 0 and std 1, i.e. Â = r/(1 + 1e-6)."""
    rewards = torch.tensor([0.5, -2.0, 3.0], dtype=torch.float64)
    theirs = verl_outcome(core_algos.compute_grpo_outcome_advantage, rewards, 1)
    assert torch.equal(group_advantages(rewards, 1), torch.zeros(3, dtype=torch.float64))
    assert_same(theirs, rewards / (1 + 1e-6), "verl at G = 1")
    assert torch.equal(rloo_advantages(rewards, 1), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(verl_outcome(core_algos.compute_rloo_outcome_advantage, rewards, 1), rewards)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("num_generations", [2, 8])
def test_rloo_advantages_match_verl(seed, dtype, num_generations):
    rewards = group_rewards(seed, dtype)
    theirs = verl_outcome(core_algos.compute_rloo_outcome_advantage, rewards, num_generations)
    assert_same(rloo_advantages(rewards, num_generations), theirs, "rloo")
