"""docs/ppo.md: what the page says about TRL's PPOTrainer and verl's PPO, checked against the pinned libraries."""

from __future__ import annotations

import torch
import trl
import verl.trainer.ppo.core_algos as core_algos
import verl.utils.torch_functional as verl_functional
from verl.trainer.config import AlgoConfig

from .pinned import module_exists, module_source, source


def test_trl_has_no_ppo_trainer():
    # ppo.md, table header “TRL PPOTrainer（trl/experimental/ppo）” and the TRL defaults quoted on the page (kl_coef 0.05,
    # cliprange, vf_coef 0.1, num_ppo_epochs 4, …): TRL 1.16 has no PPOTrainer at all, so none of these can be checked
    # against the pinned TRL; the page has to name the version it took them from.
    assert not module_exists("trl.experimental.ppo")
    assert not hasattr(trl, "PPOTrainer") and not hasattr(trl, "PPOConfig")


def test_verl_places_the_score_on_the_last_valid_token_in_the_reward_manager():
    # ppo.md “分数放在哪里。本书与 verl … 一样，把分数加在最后一个真实 token（EOS）上”: in verl the reward manager
    # does it; apply_kl_penalty only subtracts β·KL from token_level_scores, and only with use_kl_in_reward=True.
    assert "reward_tensor[i, valid_response_length - 1] = reward" in module_source("verl.workers.reward_manager.naive")
    ray_trainer = module_source("verl.trainer.ppo.ray_trainer")
    assert "token_level_rewards = token_level_scores - beta * kld" in ray_trainer
    assert AlgoConfig().use_kl_in_reward is False


def test_verl_gae_defaults_and_masking():
    # ppo.md: “γ 是折扣（TRL 默认 1.0），λ …（TRL 默认 0.95，verl 默认 1.0）”; table rows GAE 的掩码 “verl 跳过掩码为 0
    # 的位置” and 优势白化 “verl 白化” (values compared in tests/conformance/test_ppo_verl.py).
    assert (AlgoConfig().gamma, AlgoConfig().lam) == (1.0, 1.0)
    gae = source(core_algos.compute_gae_advantage_return)
    assert "nextvalues = values[:, t] * response_mask[:, t] + (1 - response_mask[:, t]) * nextvalues" in gae
    assert "advantages = verl_F.masked_whiten(advantages, response_mask)" in gae


def test_verl_whitening_uses_the_bessel_corrected_variance():
    # ppo.md: “优势白化 … Bessel 校正，同 TRL masked_whiten”; the table: verl whitens.
    x, mask = torch.tensor([1.0, 2.0, 3.0, 9.0]), torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert verl_functional.masked_var(x, mask) == torch.tensor([1.0, 2.0, 3.0]).var(correction=1)


def test_verl_value_loss_is_half_the_clipped_max():
    # ppo.md table row 价值损失: “½ max(·,·) … verl 同形”.
    text = source(core_algos.compute_value_loss)
    assert "clipped_vf_losses = torch.max(vf_losses1, vf_losses2)" in text
    assert "vf_loss = 0.5 * agg_loss(" in text


def test_verl_explained_variance_metric_name():
    # ppo.md, metrics: the book's val/explained_variance is its own name; verl logs critic/vf_explained_var.
    assert '"critic/vf_explained_var":' in module_source("verl.trainer.ppo.metric_utils")
