"""docs/comparison.md: what the page says about TRL and verl, checked against the pinned TRL and verl."""

from __future__ import annotations

import pytest
import trl
import verl.trainer.ppo.core_algos as core_algos
from trl import GRPOConfig, GRPOTrainer

from .pinned import config, default_config, module_exists, module_source, source


def test_frac_reward_zero_std_is_logged():
    # comparison.md: “TRL 把同一个量的样本估计记为 frac_reward_zero_std”.
    text = source(GRPOTrainer)
    assert "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))" in text
    assert 'self._metrics[mode]["frac_reward_zero_std"].append(is_std_zero.float().mean().item())' in text


def test_frac_reward_zero_std_counts_groups_only_with_group_or_none_scaling():
    # comparison.md: “（scale_rewards="group" 或 "none" 时；"batch" 时 TRL 用整批的标准差判断，含义不同）”.
    text = source(GRPOTrainer._generate_and_score_completions)
    assert (
        'if self.scale_rewards in ["group", "none"]: # If self.scale_rewards = "none", we\'ll only use std_rewards '
        "to check for zero std for logging if num_generations > 1: "
        "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)" in text
    )
    assert (
        'elif self.scale_rewards == "batch": # Compute global std if rewards.numel() > 1: '
        "std_rewards = nanstd(rewards).expand_as(rewards)" in text
    )


def test_grpo_clip_metrics_are_split_by_side():
    # comparison.md, after the health table: “TRL 1.16 把截断比例分开记，有 clip_ratio/region_mean（两侧合计）、
    # clip_ratio/low_mean、clip_ratio/high_mean，另有 clip_ratio/low_min、clip_ratio/high_max（逐条回答的比例，取全部进程上的
    # 最小值、最大值）”.
    text = source(GRPOTrainer._compute_loss)
    for name in ("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean"):
        assert f'self._metrics[mode]["{name}"]' in text
    assert "is_region_clipped = is_low_clipped | is_high_clipped" in text
    assert "gathered_low_clip = self.accelerator.gather(masked_seq_mean(is_low_clipped.float()))" in text
    assert 'self._metrics[mode]["clip_ratio/low_min"].append(nanmin(gathered_low_clip).item())' in text
    assert 'self._metrics[mode]["clip_ratio/high_max"].append(nanmax(gathered_high_clip).item())' in text


def test_grpo_clip_metrics_are_recorded_on_every_inner_iteration_and_averaged():
    # comparison.md, after the health table: “TRL 每次内循环都记一次，连第一遍也算在内，再在 logging_steps 步之内平均”
    # (and the lr_too_high note “TRL 会把第一遍的 0 一起平均进去”). Every optimisation pass calls compute_loss → _compute_loss,
    # which appends the clip ratios with no condition on the iteration; one generated batch is reused num_iterations times;
    # log() averages what was appended.
    assert "return self._compute_loss(model, inputs)" in source(GRPOTrainer.compute_loss)
    text = source(GRPOTrainer._compute_loss)
    assert (
        'if self.loss_type in ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]: # Compute the clipped probability ratios'
        in text
    )
    assert "repeat_count=self.num_iterations * self.args.steps_per_generation" in source(GRPOTrainer)
    assert "metrics[key] = sum(valid) / len(valid) if valid else None" in source(GRPOTrainer.log)


def test_grpo_advantage_adds_1e_4_to_the_group_std():
    # comparison.md, footnote to the algorithm table: “ε_std = 10^{-4} 防止除以 0，与 TRL 相同”.
    assert "advantages = advantages / (std_rewards + 1e-4)" in source(GRPOTrainer)


def test_online_dpo_trainer_lives_in_trl_experimental():
    # comparison.md: “在线 DPO（TRL 1.16 的 trl.experimental.online_dpo.OnlineDPOTrainer）才是每步从当前策略采样”.
    assert module_exists("trl.experimental.online_dpo")
    assert "class OnlineDPOTrainer(" in module_source("trl.experimental.online_dpo.online_dpo_trainer")
    assert not hasattr(trl, "OnlineDPOTrainer")


def test_grpo_beta_default_is_zero():
    # comparison.md: “TRL 1.16 的 GRPOTrainer 默认 beta=0.0”.
    assert default_config(GRPOConfig).beta == 0.0


def test_a_group_of_one_cannot_be_configured_in_trl():
    # comparison.md, zero_variance row: “TRL 的 GRPOConfig 拒绝 num_generations < 2，所以这里用的是奖励函数恒为 0”.
    with pytest.raises(ValueError, match="at least 2 generations"):
        config(GRPOConfig, num_generations=1)


def test_ppo_metric_names_cannot_be_checked_in_trl_1_16_and_verl_names_them_differently():
    # comparison.md, health table: the PPO metric names are the book's, after TRL's old PPOTrainer (removed in
    # PR #7020, so TRL 1.16 cannot show them); verl logs the explained variance as critic/vf_explained_var.
    assert not module_exists("trl.experimental.ppo") and not hasattr(trl, "PPOTrainer")
    assert '"critic/vf_explained_var":' in module_source("verl.trainer.ppo.metric_utils")


def test_verl_clamps_k3_to_plus_minus_10():
    # comparison.md, the note after the broken-configuration table (lr_too_high): “这一项在 verl 与 TRL 里都炸不起来。
    # verl 的 low_var_kl（即 k3）限幅在 [-10, 10]”.
    text = source(core_algos.kl_penalty_forward)
    assert 'if kl_penalty in ("low_var_kl", "k3"):' in text
    assert "return torch.clamp(kld, min=-10, max=10)" in text


def test_trl_multiplies_k3_by_the_ratio_under_bias_correction():
    # comparison.md, the note after the broken-configuration table (lr_too_high): “TRL 1.16 默认 beta=0；beta>0 时，
    # 默认的 use_bias_correction_kl=True 把 k3 乘上 w”; also the footnote to the algorithm table, the GRPO bullet of the
    # over-optimisation section (“TRL 1.16 在 beta > 0 时默认把 k3 乘上比率 w”), 常见错误 and 小结.
    assert default_config(GRPOConfig).beta == 0.0
    assert default_config(GRPOConfig).use_bias_correction_kl is True
    text = source(GRPOTrainer._compute_loss)
    assert "if self.args.use_bias_correction_kl: per_token_kl = per_token_kl * coef_1" in text


def test_rloo_logs_frac_reward_zero_std_and_entropy():
    # comparison.md health table, row REINFORCE / RLOO: “`reward`、`kl`、`frac_reward_zero_std`、`entropy`” are what TRL's
    # RLOOTrainer logs.
    text = source(trl.RLOOTrainer)
    for name in ("reward", "kl", "frac_reward_zero_std", "entropy"):
        assert f'self._metrics[mode]["{name}"].append(' in text, name
    assert 'self._metrics[mode]["frac_reward_zero_std"].append(is_std_zero.float().mean().item())' in text


def test_rloo_checks_the_group_std_of_the_kl_shaped_reward():
    # comparison.md, the paragraph after the health table: “TRL 的 RLOOTrainer 记录的 frac_reward_zero_std 与本章的不同：
    # beta > 0 时，它先从奖励里扣掉 KL，再判断组内标准差”.
    text = source(trl.RLOOTrainer._generate_and_score_completions)
    shaped = text.index("rewards = rewards - self.beta * kl")
    guard = text.rindex("if self.beta != 0.0:", 0, shaped)  # the guard of the KL penalty, not an earlier one
    assert "Include the KL penalty in the reward" in text[text.rindex("#", 0, guard) - 80 : guard]
    assert (
        shaped
        < text.index("grouped_rewards = rewards.view(-1, num_generations)")
        < text.index("std_rewards = nanstd(grouped_rewards, dim=1)")
        < text.index("is_std_zero = torch.isclose(std_rewards")
    )
    assert default_config(trl.RLOOConfig).beta == 0.05
    # and “前提是模型没有 dropout。TRL 默认 disable_dropout=False”.
    assert default_config(trl.RLOOConfig).disable_dropout is False
