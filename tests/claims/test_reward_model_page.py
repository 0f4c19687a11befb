"""docs/reward-model.md: what chapter 3 says about TRL's RewardTrainer, checked against the pinned TRL 1.16.0 and
transformers 5.24.0."""

from __future__ import annotations

import re
import tempfile
import warnings

import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    EarlyStoppingCallback,
    LlamaConfig,
    LlamaForSequenceClassification,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)
from transformers.modeling_layers import GenericForSequenceClassification
from transformers.models.llama.modeling_llama import LlamaAttention
from transformers.trainer_callback import DefaultFlowCallback
from transformers.trainer_utils import IntervalStrategy
from transformers.utils import is_torch_bf16_gpu_available
from trl import RewardConfig, RewardTrainer
from trl.trainer.base_config import _BaseConfig
from trl.trainer.utils import disable_dropout_in_model

from .pinned import config, default_config, source


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
    # reward-model.md table row 日志: “每批算一次，每 logging_steps（默认 10）步记一次这些值的不加权平均；评估集上加前缀，
    # 记作 eval_accuracy 等”; row eval_accuracy: “各个评估批准确率的不加权平均” (compute_loss appends one accuracy per
    # batch, see test_logged_metrics_strict_accuracy_and_margin_without_m; log averages the list without weights).
    assert default_config(RewardConfig).logging_steps == 10
    text = source(RewardTrainer.log)
    assert "metrics = {key: sum(val) / len(val) for key, val in self._metrics[mode].items()}" in text
    assert 'if mode == "eval": metrics = {f"eval_{key}": val for key, val in metrics.items()}' in text


def test_reward_config_inherits_bf16_and_needs_use_cpu_on_cpu():
    # reward-model.md table row 精度: “继承 bf16=True：前向在 bf16 混合精度下算，分数、margin 与 accuracy 都来自 bf16
    # 的输出；只有 CPU 时要设 use_cpu=True，否则构造配置就报错”; 常见错误 “TRL 默认在 bf16 混合精度下算分数”.
    assert default_config(RewardConfig).bf16 is True
    assert "self.bf16 = not (self.fp16) if self.bf16 is None else self.bf16" in source(_BaseConfig.__post_init__)
    assert issubclass(RewardConfig, _BaseConfig)
    assert (
        "if not self.use_cpu and not is_torch_bf16_gpu_available() and not is_torch_xla_available(): "
        "error_message = \"Your setup doesn't support bf16/gpu. You need to assign use_cpu"
    ) in source(TrainingArguments._validate_args)
    if not is_torch_bf16_gpu_available():
        with pytest.raises(ValueError, match="use_cpu"), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            RewardConfig(output_dir=tempfile.mkdtemp(prefix="rlhf_toy_claims_"), report_to="none")
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "a", "b", "c"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    llama = LlamaConfig(
        vocab_size=5, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, num_labels=1, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    dataset = Dataset.from_list([{"prompt": "a", "chosen": " b", "rejected": " c"}] * 2)
    trainer = RewardTrainer(
        model=LlamaForSequenceClassification(llama),
        args=config(RewardConfig, disable_tqdm=True),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    assert trainer.accelerator.mixed_precision == "bf16"


def test_reward_config_inherited_optimizer_and_schedule():
    # reward-model.md table row 训练默认值: “学习率……线性衰减到 0、无 warmup；融合实现的 AdamW（adamw_torch_fused）、
    # 梯度的全局范数限制在 1.0（max_grad_norm=1.0）；开着梯度检查点（gradient_checkpointing=True）；把模型里 nn.Dropout
    # 模块的概率设为 0（disable_dropout=True）”; “过度自信与居中”: “学习率默认线性衰减到 0、没有 warmup”.
    args = default_config(RewardConfig)
    assert args.lr_scheduler_type == "linear"
    assert args.warmup_steps == 0
    assert args.optim == "adamw_torch_fused"
    assert args.max_grad_norm == 1.0
    assert args.gradient_checkpointing is True
    assert args.disable_dropout is True  # what it leaves on: test_disable_dropout_leaves_config_attention_dropout_on


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


def test_early_stopping_keeps_the_last_model_unless_load_best_model_at_end():
    # reward-model.md: “还要设 load_best_model_at_end=True（保存策略要与评估策略一致），否则训练结束时留下的是最后一步的
    # 模型，不是最好的那个”; table row 训练默认值 “并设 load_best_model_at_end=True 才会留下最好的模型”.
    # EarlyStoppingCallback only stops training; the best checkpoint is reloaded only under load_best_model_at_end.
    assert default_config(RewardConfig).load_best_model_at_end is False
    assert 'logger.warning( "Using EarlyStoppingCallback without load_best_model_at_end=True. "' in source(
        EarlyStoppingCallback.on_train_begin
    )
    assert "control.should_training_stop = True" in source(EarlyStoppingCallback.on_evaluate)
    assert (
        "if self.args.load_best_model_at_end and self.state.best_model_checkpoint is not None: "
        "self._load_best_model()" in source(Trainer._finalize_training)
    )
    with pytest.raises(ValueError, match="requires the save and eval strategy to match"):
        config(RewardConfig, load_best_model_at_end=True, eval_strategy="epoch", save_strategy="steps")


def test_disable_dropout_leaves_config_attention_dropout_on():
    # reward-model.md table row 训练默认值: “把模型里 nn.Dropout 模块的概率设为 0（disable_dropout=True），写在配置里的
    # 注意力 dropout（如 Llama 的 attention_dropout）不受影响，需要时在模型配置里设为 0”. Three train-mode forwards of
    # the trainer's model: Llama's attention_dropout is a config float passed to the attention kernel, not a module.
    assert default_config(RewardConfig).disable_dropout is True
    assert "if isinstance(module, torch.nn.Dropout): module.p = 0" in source(disable_dropout_in_model)
    assert "if args.disable_dropout: disable_dropout_in_model(model)" in source(RewardTrainer.__init__)
    assert "dropout=0.0 if not self.training else self.attention_dropout," in source(LlamaAttention.forward)
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "a", "b", "c"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    dataset = Dataset.from_list([{"prompt": "a", "chosen": " b", "rejected": " c"}] * 2)
    scores = {}
    for attention_dropout in (0.3, 0.0):
        torch.manual_seed(0)
        llama = LlamaConfig(
            vocab_size=5, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=2, num_labels=1, pad_token_id=0, eos_token_id=1, attention_dropout=attention_dropout,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = RewardTrainer(
                model=LlamaForSequenceClassification(llama),
                args=config(RewardConfig, disable_tqdm=True),
                train_dataset=dataset,
                processing_class=tokenizer,
            )
        model = trainer.model.train()
        with torch.no_grad():
            scores[attention_dropout] = [model(input_ids=torch.tensor([[2, 3, 4, 1]])).logits.item() for _ in range(3)]
    assert len(set(scores[0.3])) > 1  # still stochastic after disable_dropout=True
    assert len(set(scores[0.0])) == 1


def test_reward_config_learning_rate_overrides_transformers():
    # reward-model.md table row 训练默认值: “学习率 10^-4，不是 transformers 的 5×10^-5”.
    assert default_config(RewardConfig).learning_rate == 1e-4
    assert default_config(TrainingArguments).learning_rate == 5e-5


def test_long_pairs_are_dropped_not_truncated():
    # reward-model.md table row 过长的偏好对: “被选或被拒的整条序列（提示词 + 回答 + 补上的 EOS，对话数据还含模板）超过
    # max_length（默认 1024 个 token）时，整对丢弃，不截断”: the prompt is joined to each answer before tokenising.
    assert default_config(RewardConfig).max_length == 1024
    doc = re.sub(r"\s+", " ", RewardConfig.__doc__)
    assert "Samples are filtered out if either chosen or rejected sequence exceeds this value." in doc
    prepare = source(RewardTrainer._prepare_dataset)
    assert (
        'dataset = dataset.filter( lambda example: ( len(example["chosen_ids"]) <= args.max_length '
        'and len(example["rejected_ids"]) <= args.max_length ), **map_kwargs, )' in prepare
    )
    assert "truncat" not in prepare
    assert (
        'if "prompt" in example: # explicit prompt case example["chosen"] = example["prompt"] + example["chosen"]'
        in prepare
    )
    assert 'example["chosen"] = example["chosen"] + eos_token' in prepare
    assert 'chosen_ids = _tokenize( processing_class, example["chosen"], **apply_chat_template_kwargs, )' in prepare


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
