"""docs/overview.md: what the page says about TRL, checked against the pinned TRL."""

from __future__ import annotations

from trl import DPOConfig, GRPOConfig, GRPOTrainer

from .pinned import default_config, source


def test_grpo_defaults_to_no_kl_and_no_reference_model():
    # overview.md: “TRL 的 GRPO 现在默认 β = 0，这时连参考模型都不加载”.
    assert default_config(GRPOConfig).beta == 0.0
    assert "if self.beta == 0.0: # If beta is 0.0, the reference model is not needed self.ref_model = None" in source(
        GRPOTrainer.__init__
    )


def test_trl_logs_the_sampled_reward_as_reward():
    # overview.md: “TRL 的日志里只有这个采样估计，名字就叫 reward”.
    assert 'self._metrics[mode]["reward"].append(torch.nanmean(rewards).item())' in source(GRPOTrainer)


def test_history_keys_are_trl_metric_names():
    # overview.md: “键名与 TRL 的日志相同（reward、kl、clip_ratio、loss、rewards/margins 等）”: TRL 1.16's GRPO logs
    # clip_ratio/region_mean (plus low_mean/high_mean), not a plain clip_ratio; the book's clip_ratio is region_mean.
    grpo = source(GRPOTrainer)
    for name in ("reward", "kl", "clip_ratio/region_mean"):
        assert f'self._metrics[mode]["{name}"]' in grpo
    assert 'self._metrics[mode]["clip_ratio"]' not in grpo
    assert default_config(DPOConfig).loss_type == ["sigmoid"]


def test_loss_type_is_the_option_for_the_denominator():
    # overview.md: “逐 token 损失按什么分母平均（TRL 的 loss_type）”.
    assert "loss_type" in GRPOConfig.__dataclass_fields__
