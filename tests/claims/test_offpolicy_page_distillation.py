"""Claims on chapter 12's distillation section (.ch12/distillation/page.md, 与 TRL / verl 的差异) against TRL 1.16 / verl 0.9.1."""

from __future__ import annotations

import dataclasses

from trl.experimental.gold import GOLDConfig
from trl.trainer.distillation_config import DistillationConfig


def fields(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def test_trl_distillation_config_beta_defaults_to_reverse_kl_and_has_no_lmbda():
    # "TRL 1.16 的 DistillationConfig.beta 默认 1.0（反向 KL）；它总在学生样本上训练，没有 lmbda"
    f = fields(DistillationConfig)
    assert f["beta"] == 1.0
    assert "lmbda" not in f


def test_trl_gold_config_has_the_on_policy_fraction_lmbda():
    # "同策略比例 lmbda 在 trl.experimental.gold 的 GOLDConfig 里，默认 0.5"
    assert fields(GOLDConfig)["lmbda"] == 0.5


def test_verl_distillation_defaults_policy_gradient_with_k3():
    # "verl 0.9.1 默认 use_policy_gradient=True、loss_mode='k3'、policy_loss_mode='vanilla'，loss_max_clamp=10"
    from verl.workers.config import DistillationLossConfig

    f = fields(DistillationLossConfig)
    assert f["use_policy_gradient"] is True
    assert f["loss_mode"] == "k3"
    assert f["policy_loss_mode"] == "vanilla"
    assert f["loss_max_clamp"] == 10.0
