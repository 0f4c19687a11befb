"""docs/grpo.md: what the page says about TRL's GRPOTrainer, checked against the pinned TRL (and verl)."""

from __future__ import annotations

import pytest
import torch
import trl.trainer.utils as trl_utils
from trl import GRPOConfig, GRPOTrainer

from .pinned import config, default_config, source


def test_grpo_config_defaults():
    # grpo.md “与论文 / TRL 的差异” table, column “TRL GRPOTrainer（今天的默认）”: beta 0.0, loss_type "dapo",
    # scale_rewards "group", num_iterations=1, epsilon=0.2 with epsilon_high unset; and “TRL 默认学习率 10^-6 量级”.
    args = default_config(GRPOConfig)
    assert (args.beta, args.loss_type, args.scale_rewards) == (0.0, "dapo", "group")
    assert (args.num_iterations, args.epsilon, args.epsilon_high) == (1, 0.2, None)
    assert args.learning_rate == 1e-6


def test_epsilon_high_defaults_to_epsilon():
    # grpo.md table row 截断: “epsilon=0.2，epsilon_high 默认等于 epsilon”.
    assert "self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon" in source(
        GRPOTrainer.__init__
    )


def test_group_std_is_bessel_corrected_plus_1e_4():
    # grpo.md:51 “代码里的 eps，与 TRL 一样默认 10^-4” and table row 标准差 “Bessel 校正，加 10^-4”.
    assert "advantages = advantages / (std_rewards + 1e-4)" in source(GRPOTrainer)
    assert "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)" in source(GRPOTrainer)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert trl_utils.nanstd(rewards) == rewards.std(correction=1)


def test_grpo_config_refuses_one_generation():
    # grpo.md, G = 1 (the sentence “G = 1 时 … 优势同样是 0” and the table row G = 1): TRL does not train with
    # num_generations=1, GRPOConfig raises.
    with pytest.raises(ValueError, match="GRPO requires at least 2 generations per prompt"):
        config(GRPOConfig, num_generations=1)


def test_old_logps_are_the_current_ones_detached_when_not_computed():
    # grpo.md table row log π_old: “每批只更新一次时不计算，直接用 per_token_logps.detach()”.
    assert (
        "old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps"
        in source(GRPOTrainer._compute_loss)
    )


def test_old_logps_are_computed_when_generation_and_accumulation_do_not_align_or_with_vllm_correction():
    # grpo.md “原文和 TRL 默认下，截断都不起作用”: true for the defaults only. TRL also computes old log-probs when
    # gradient_accumulation_steps is not a multiple of steps_per_generation × num_iterations, and with vLLM's
    # importance-sampling correction, which is on by default.
    assert (
        "if self.args.gradient_accumulation_steps % generate_every != 0 or ( self.use_vllm and "
        "self.vllm_importance_sampling_correction ):" in source(GRPOTrainer)
    )
    assert default_config(GRPOConfig).vllm_importance_sampling_correction is True


def test_logged_kl_and_clip_ratio_metrics():
    # grpo.md “kl 和 clip_ratio 的含义与 TRL 相同”: kl is the masked token mean of k3, logged only when beta != 0;
    # the book's clip_ratio is TRL's clip_ratio/region_mean, and TRL also logs low_mean and high_mean.
    text = source(GRPOTrainer._compute_loss)
    assert 'if self.beta != 0.0: self._metrics[mode]["kl"].append(global_masked_mean(per_token_kl))' in text
    for name in ("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean"):
        assert f'self._metrics[mode]["{name}"]' in text
    assert '["clip_ratio"]' not in source(GRPOTrainer)


def test_kl_term_is_k3_in_the_loss():
    # grpo.md: the KL penalty is k3, added per token to the loss (“TRL GRPOTrainer 和 DeepSeekMath 都只在损失里加”).
    text = source(GRPOTrainer._compute_loss)
    assert (
        "per_token_kl = ( torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1 )"
        in text
    )
    assert "per_token_loss = per_token_loss + self.beta * per_token_kl" in text


def test_log_probs_are_computed_from_temperature_scaled_logits():
    # grpo.md “TRL 的对数概率还要先把 logits 除以采样温度”.
    # GRPOTrainer installs a fused LM head with the sampling temperature on the policy and the reference model;
    # that the head divides the logits by it is shown on a real model in test_tiny_lm_page.py.
    text = source(GRPOTrainer.__init__)
    assert (
        "add_fused_lm_head( self.model.get_base_model() if is_peft_model(self.model) else self.model, temperature=self.temperature,"
        in text
    )
    assert "add_fused_lm_head( self.ref_model, temperature=self.temperature" in text
