"""docs/reward-model.md: what chapter 3 says about TRL's RewardTrainer, checked against the pinned TRL 1.16.0 and
transformers 5.24.0."""

from __future__ import annotations

import re

import torch
from transformers import EarlyStoppingCallback, LlamaConfig, LlamaForSequenceClassification, TrainingArguments
from transformers.modeling_layers import GenericForSequenceClassification
from transformers.trainer_callback import DefaultFlowCallback
from transformers.trainer_utils import IntervalStrategy
from trl import RewardConfig, RewardTrainer

from .pinned import default_config, source


def test_loss_is_bradley_terry_with_optional_margin_and_centring():
    # reward-model.md eq. rm-loss “奖励模型的损失（TRL `RewardTrainer.compute_loss`）”, “TRL 在数据集有 `margin` 列时
    # 使用”, and the table row 损失 “TRL：对偏好对取批平均”.
    text = source(RewardTrainer.compute_loss)
    assert (
        'if "margin" in inputs: loss = -nn.functional.logsigmoid(rewards_chosen - rewards_rejected - inputs["margin"]).mean()'
        in text
    )
    assert "else: loss = -nn.functional.logsigmoid(rewards_chosen - rewards_rejected).mean()" in text
    assert (
        "if self.args.center_rewards_coefficient is not None: loss += self.args.center_rewards_coefficient * "
        "torch.mean((rewards_chosen + rewards_rejected) ** 2)" in text
    )


def test_centring_is_off_by_default_and_001_is_recommended():
    # reward-model.md “TRL `center_rewards_coefficient`，推荐 c = 0.01” and table row 居中系数 “默认 `None`（不加）”.
    assert default_config(RewardConfig).center_rewards_coefficient is None
    assert "Recommended value: `0.01`" in RewardConfig.__doc__


def test_logged_metrics_strict_accuracy_and_margin_without_m():
    # reward-model.md table row 日志: `accuracy`、`margin`、`min_reward`、`mean_reward`、`max_reward`; “TRL 与本书都用
    # 严格大于”; “TRL 日志里的 `margin` 是分差 r_w − r_l 的平均（不减 m）”.
    text = source(RewardTrainer.compute_loss)
    for name in ("min_reward", "mean_reward", "max_reward", "accuracy", "margin"):
        assert f'self._metrics[mode]["{name}"].append(' in text
    assert "mean_accuracy = (rewards_chosen > rewards_rejected).float().mean()" in text
    assert "mean_margin = (rewards_chosen - rewards_rejected).mean()" in text


def test_mean_reward_pools_chosen_and_rejected_scores():
    # reward-model.md “过度自信与居中”: “`mean_reward` 与 `max_reward` 是训练对里出现的分数（被选与被拒合在一起，
    # 一个回答出现几次算几次）的平均与最大值，与 TRL 相同”.
    text = source(RewardTrainer.compute_loss)
    assert "rewards_chosen, rewards_rejected = torch.chunk(outputs.logits.squeeze(-1), chunks=2)" in text
    assert "all_rewards = self.accelerator.gather(outputs.logits)" in text
    assert 'self._metrics[mode]["mean_reward"].append(all_rewards.mean().item())' in text


def test_metrics_are_averaged_over_logging_steps_and_prefixed_eval():
    # reward-model.md table row 日志: “TRL 每 `logging_steps`（默认 10）步记一次平均值”; “`eval_accuracy` 也是 TRL 在
    # 评估集上记录的名字”.
    assert default_config(RewardConfig).logging_steps == 10
    text = source(RewardTrainer.log)
    assert "metrics = {key: sum(val) / len(val) for key, val in self._metrics[mode].items()}" in text
    assert 'if mode == "eval": metrics = {f"eval_{key}": val for key, val in metrics.items()}' in text


def test_reward_config_trains_three_epochs_by_default():
    # reward-model.md “过度自信与居中”: “TRL 的 `RewardConfig` 沿用 transformers 的默认 `num_train_epochs=3`”.
    assert default_config(RewardConfig).num_train_epochs == 3.0


def test_reward_config_has_no_weight_decay_and_no_evaluation():
    # reward-model.md “过度自信与居中”: “权重衰减默认是 0”, “它默认也不评估（eval_strategy="no"）：传了 eval_dataset，
    # 训练中也不会记 eval_accuracy。要看留出准确率，得自己设 eval_strategy 与 eval_steps”; table row 训练默认值.
    # transformers' DefaultFlowCallback asks for an evaluation only under the "steps" and "epoch" strategies.
    args = default_config(RewardConfig)
    assert args.weight_decay == 0.0
    assert args.eval_strategy == IntervalStrategy.NO
    flow = source(DefaultFlowCallback)
    assert flow.count("control.should_evaluate = True") == 3
    assert flow.count("args.eval_strategy == IntervalStrategy.STEPS") == 2
    assert "if args.eval_strategy == IntervalStrategy.EPOCH and args.eval_delay <= state.epoch:" in flow


def test_early_stopping_needs_an_eval_strategy():
    # reward-model.md: “要早停，还得加上 EarlyStoppingCallback，并用 metric_for_best_model 指定看哪个指标”; table row
    # 训练默认值 “早停要自己打开”.
    assert default_config(RewardConfig).metric_for_best_model is None
    text = source(EarlyStoppingCallback.on_train_begin)
    assert "assert args.metric_for_best_model is not None" in text
    assert "assert args.eval_strategy != IntervalStrategy.NO" in text


def test_reward_config_learning_rate_overrides_transformers():
    # reward-model.md table row 训练默认值: “学习率 10^-4，不是 transformers 的 5×10^-5”.
    assert default_config(RewardConfig).learning_rate == 1e-4
    assert default_config(TrainingArguments).learning_rate == 5e-5


def test_long_pairs_are_dropped_not_truncated():
    # reward-model.md table row 过长的偏好对: “被选或被拒回答超过 max_length（默认 1024 个 token）的偏好对整对丢弃，不截断”.
    assert default_config(RewardConfig).max_length == 1024
    doc = re.sub(r"\s+", " ", RewardConfig.__doc__)
    assert "Samples are filtered out if either chosen or rejected sequence exceeds this value." in doc
    prepare = source(RewardTrainer._prepare_dataset)
    assert (
        'dataset = dataset.filter( lambda example: ( len(example["chosen_ids"]) <= args.max_length '
        'and len(example["rejected_ids"]) <= args.max_length ), **map_kwargs, )' in prepare
    )
    assert "truncat" not in prepare


def test_lora_reward_head_should_be_in_modules_to_save():
    # reward-model.md table row 模型: “从因果语言模型加载并用 LoRA 时，TRL 的文档建议把新加的 score 头写进
    # modules_to_save，保证它得到训练”.
    doc = re.sub(r"\s+", " ", RewardTrainer.__doc__)
    assert (
        'if the loaded model is a causal LM, it\'s highly recommended to set `modules_to_save=["score"]` in the PEFT '
        "configuration to ensure that the reward head is properly trained" in doc
    )


def test_model_is_a_sequence_classifier_with_one_label():
    # reward-model.md table row 模型: “`AutoModelForSequenceClassification`，1 个 logit”.
    text = source(RewardTrainer.__init__)
    assert 'model_init_kwargs["num_labels"] = 1' in text
    assert "create_model_from_path(model, AutoModelForSequenceClassification" in text


def test_eos_is_appended_to_non_conversational_text_and_pad_falls_back_to_eos():
    # reward-model.md box: “TRL 对非对话文本会在末尾补 EOS”; “分词器没有 pad 时，TRL 用 eos 充当 pad”.
    prepare = source(RewardTrainer._prepare_dataset)
    assert "if not is_conversational(first_example):" in prepare
    assert 'example["chosen"] = example["chosen"] + eos_token' in prepare
    assert "pad_token = args.pad_token or processing_class.pad_token or processing_class.eos_token" in source(
        RewardTrainer.__init__
    )


def test_score_is_read_on_the_last_token_that_is_not_pad():
    # reward-model.md box: “transformers 的序列分类头把分数读在最后一个不等于 pad 的 token 上，所以只有 pad ≠ eos
    # 时分数才读在 EOS 上；pad = eos 时补上的 EOS 被当成填充，分数读在它前一个 token 上”.
    assert "we take the rightmost token that is not equal to pad_token_id" in source(
        GenericForSequenceClassification.forward
    )

    def score(pad_token_id, ids):
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=2, num_labels=1, pad_token_id=pad_token_id, eos_token_id=2,
        )  # fmt: skip
        with torch.no_grad():
            return LlamaForSequenceClassification(config).eval()(input_ids=torch.tensor([ids])).logits.item()

    eos = 2
    assert score(eos, [5, 6, 7, eos]) == score(eos, [5, 6, 7])  # pad == eos: the EOS is skipped
    assert score(0, [5, 6, 7, eos]) != score(0, [5, 6, 7])  # pad != eos: the score is read on the EOS
