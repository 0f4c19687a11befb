"""docs/comparison.md: what the page says about TRL, checked against the pinned TRL."""

from __future__ import annotations

import pytest
import trl
from trl import GRPOConfig, GRPOTrainer

from .pinned import config, default_config, module_exists, source


def test_frac_reward_zero_std_is_logged():
    # comparison.md: “TRL 把同一个量的样本估计记为 frac_reward_zero_std”.
    text = source(GRPOTrainer)
    assert "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))" in text
    assert 'self._metrics[mode]["frac_reward_zero_std"].append(is_std_zero.float().mean().item())' in text


def test_online_dpo_trainer_lives_in_trl_experimental():
    # comparison.md: “在线 DPO（TRL OnlineDPOTrainer）才是每步从当前策略采样”: in TRL 1.16 it is
    # trl.experimental.online_dpo.OnlineDPOTrainer, not trl.OnlineDPOTrainer.
    assert module_exists("trl.experimental.online_dpo")
    assert not hasattr(trl, "OnlineDPOTrainer")


def test_grpo_beta_default_is_zero():
    # comparison.md: “TRL GRPOTrainer 今天的默认 beta=0.0”.
    assert default_config(GRPOConfig).beta == 0.0


def test_a_group_of_one_cannot_be_configured_in_trl():
    # comparison.md, the zero-variance broken configuration (GRPO with num_generations=1): TRL refuses it.
    with pytest.raises(ValueError, match="at least 2 generations"):
        config(GRPOConfig, num_generations=1)
