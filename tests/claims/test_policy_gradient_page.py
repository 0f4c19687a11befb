"""docs/policy-gradient.md: what the page says about TRL's RLOOTrainer, checked against the pinned TRL."""

from __future__ import annotations

import pytest
from trl import RLOOConfig, RLOOTrainer

from .pinned import config, default_config, source


def test_rloo_config_defaults():
    # policy-gradient.md: “β 是 KL 系数（beta，TRL 默认 0.05）”, “按 TRL RLOOConfig 的默认取 β = 0.05”, and the table
    # row “TRL num_generations=2”.
    args = default_config(RLOOConfig)
    assert (args.beta, args.num_generations) == (0.05, 2)


def test_rloo_config_refuses_one_generation():
    # policy-gradient.md, “组内只有 1 个回答时 … TRL 此时除以 k−1 = 0 得到 NaN 再置 0”: TRL 1.16 does not get there,
    # RLOOConfig raises; only evaluation with num_generations_eval=1 reaches the zero-std branch.
    with pytest.raises(ValueError, match="RLOO requires at least 2 generations per prompt"):
        config(RLOOConfig, num_generations=1)
    assert "doesn't occur during training, but could occur in eval when num_generations_eval=1" in source(RLOOTrainer)


def test_rloo_kl_goes_into_the_sequence_reward():
    # policy-gradient.md: “TRL RLOOTrainer … 把 KL 惩罚并进序列奖励”.
    assert "rewards = rewards - self.beta * kl" in source(RLOOTrainer)


def test_rloo_loss_uses_a_sequence_level_ratio():
    # policy-gradient.md table row 损失: “TRL：序列级比率 w_i = exp(Σ_t m log π_θ − Σ_t m log π_old)，按 ε 截断”.
    text = source(RLOOTrainer)
    assert "logps = (per_token_logps * completion_mask).sum(1)" in text
    assert "log_ratio = logps - old_logps" in text
    assert "coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)" in text


def test_rloo_logged_kl_is_a_token_mean():
    # policy-gradient.md: the book's kl is a per-sequence sum; TRL RLOOTrainer logs a token mean of the KL.
    assert (
        'torch.stack([(per_token_kl * completion_mask).sum(), completion_mask.sum().float()]), reduction="sum" ) '
        'self._metrics[mode]["kl"].append((kl_stats[0] / kl_stats[1].clamp(min=1.0)).item())' in source(RLOOTrainer)
    )
