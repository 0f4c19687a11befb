"""docs/dpo.md: what the page says about TRL's DPOTrainer, checked against the pinned TRL."""

from __future__ import annotations

import dataclasses
import re

import trl
from transformers.trainer_callback import DefaultFlowCallback
from trl import DPOConfig
from trl.trainer.dpo_trainer import DPOTrainer

from .pinned import default_config, module_exists, source


def test_dpo_config_defaults():
    # dpo.md “与论文 / TRL 的差异”: “β 默认 0.1，与 TRL DPOConfig 相同”, “TRL 默认（False）在每一步用参考模型重新前向”
    # (precompute_ref_log_probs), “默认学习率 10^-6”; the default loss is sigmoid.
    args = default_config(DPOConfig)
    assert args.beta == 0.1
    assert args.precompute_ref_log_probs is False
    assert args.learning_rate == 1e-6
    assert args.loss_type == ["sigmoid"] and args.label_smoothing == 0.0


def test_sigmoid_loss_has_no_label_smoothing():
    # dpo.md “sigmoid 损失没有标签平滑。TRL 1.16.0 的 loss_type="sigmoid" 就是式 (dpo-loss)” (the value is compared
    # with rlhf_toy in tests/conformance/test_dpo_loss_trl.py::test_trl_sigmoid_ignores_label_smoothing).
    assert 'if loss_type == "sigmoid": per_sequence_loss = -F.logsigmoid(self.beta * delta_score) elif' in source(
        DPOTrainer._compute_loss
    )


def test_sequence_log_prob_is_the_masked_sum():
    # dpo.md: “TRL DPOTrainer 把回答部分逐 token 对数概率在掩码内求和”.
    assert "logps = per_token_logps.sum(dim=1) # sum over sequence length" in source(DPOTrainer._compute_loss)


def test_rewards_metrics_names_and_definitions():
    # dpo.md, the table of the four metrics: “四个指标的定义与 TRL DPOTrainer 完全相同”; accuracy is a strict >.
    text = source(DPOTrainer._compute_loss)
    assert "chosen_rewards = self.beta * chosen_logratios.detach()" in text
    assert "rejected_rewards = self.beta * rejected_logratios.detach()" in text
    assert "reward_accuracies = (chosen_rewards > rejected_rewards).float()" in text
    assert "margins = chosen_rewards - rejected_rewards" in text
    for name in ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"):
        assert f'self._metrics[mode]["{name}"]' in text


def test_metrics_are_logged_every_ten_steps():
    # dpo.md: the step-1 row of the book's history; TRL logs every logging_steps=10 steps, averaged since the
    # last log, so a TRL user never sees a step-1 row (“TRL 1.16.0 默认每 logging_steps=10 步才写一次日志，写的是这 10 步的平均，
    # 所以 TRL 用户看不到‘第 1 步’这一行（除非设了 logging_first_step=True，它默认是 False）”; transformers'
    # DefaultFlowCallback logs step 1 only when logging_first_step is set).
    args = default_config(DPOConfig)
    assert args.logging_steps == 10
    assert args.logging_first_step is False
    assert "if state.global_step == 1 and args.logging_first_step:" in source(DefaultFlowCallback.on_step_end)
    text = source(DPOTrainer.log)
    assert "metrics = {key: sum(val) / len(val) for key, val in self._metrics[mode].items()}" in text
    assert "self._metrics[mode].clear()" in text


def test_logps_metrics_are_logged():
    # dpo.md: “TRL 还记录 logps/chosen、logps/rejected（策略的序列对数概率的批平均）”.
    text = source(DPOTrainer._compute_loss)
    assert 'self._metrics[mode]["logps/chosen"].append(self.accelerator.gather(chosen_logps).mean().item())' in text
    assert 'self._metrics[mode]["logps/rejected"]' in text


def test_precompute_ref_log_probs_saves_memory_and_refuses_sync_ref_model():
    # dpo.md: precompute_ref_log_probs “主要是为了省显存（TRL 的文档就是这么说的）”, “不能和 sync_ref_model（TR-DPO）同用，
    # TRL 对这个组合直接报错”.
    doc = re.sub(r"\s+", " ", DPOConfig.__doc__)
    assert (
        "This allows to save memory during training, as the reference model does not need to be kept in memory" in doc
    )
    assert "You cannot use `sync_ref_model=True` together with `precompute_ref_log_probs=True`." in source(
        DPOTrainer.__init__
    )


def test_online_dpo_is_experimental():
    # dpo.md “本章没讲的”: “TRL 1.16.0 把这类训练器放在 trl.experimental.online_dpo”.
    assert module_exists("trl.experimental.online_dpo")
    assert not hasattr(trl, "OnlineDPOTrainer")


def test_reference_free_is_gone():
    # dpo.md: “TRL v0.28 及以前有这个选项，叫 reference_free……v0.29 重构 DPO 时移除”: no such DPOConfig field in TRL 1.16.
    assert "reference_free" not in {field.name for field in dataclasses.fields(DPOConfig)}
