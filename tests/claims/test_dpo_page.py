"""docs/dpo.md: what the page says about TRL's DPOTrainer, checked against the pinned TRL."""

from __future__ import annotations

import dataclasses
import re
import tempfile
import warnings

import torch
import trl
from transformers.trainer_callback import DefaultFlowCallback
from transformers.trainer_utils import IntervalStrategy
from trl import DPOConfig
from trl.trainer.base_config import _BaseConfig
from trl.trainer.dpo_trainer import DataCollatorForPreference, DPOTrainer
from trl.trainer.utils import FusedCausalLMOutput, disable_dropout_in_model, get_config_model_id

from .pinned import config, default_config, module_exists, source


def test_dpo_config_defaults():
    # dpo.md “与论文 / TRL 的差异”: “β 默认 0.1，与 TRL DPOConfig 相同”, “TRL 默认（False）在每一步用参考模型重新前向”
    # (precompute_ref_log_probs), “默认学习率 10^-6”; the default loss is sigmoid.
    args = default_config(DPOConfig)
    assert args.beta == 0.1
    assert args.precompute_ref_log_probs is False
    assert args.learning_rate == 1e-6
    assert args.loss_type == ["sigmoid"] and args.label_smoothing == 0.0
    # “TRL 的 DPOConfig 还沿用 transformers 的 num_train_epochs=3……默认不评估（eval_strategy="no"）”; 常见错误
    # “DPOConfig 默认不评估，要自己设 eval_strategy”.
    assert args.num_train_epochs == 3.0
    assert args.eval_strategy == IntervalStrategy.NO


def test_dpo_config_inherits_bf16_checkpointing_and_linear_decay():
    # dpo.md box “全批训练、学习率很大”: “它还继承 bf16=True（混合精度；只有 CPU 时要设 use_cpu=True）与
    # gradient_checkpointing=True。默认的 disable_dropout=True……；学习率线性衰减到 0、没有 warmup，梯度的全局范数限制在
    # 1.0（max_grad_norm=1.0）” (what disable_dropout leaves on: test_disable_dropout_leaves_config_attention_dropout_on).
    # (The use_cpu error is checked in test_reward_model_page.py::test_reward_config_inherits_bf16_and_needs_use_cpu_on_cpu.)
    args = default_config(DPOConfig)
    assert issubclass(DPOConfig, _BaseConfig)
    assert "self.bf16 = not (self.fp16) if self.bf16 is None else self.bf16" in source(_BaseConfig.__post_init__)
    assert args.bf16 is True
    assert args.gradient_checkpointing is True
    assert args.lr_scheduler_type == "linear" and args.warmup_steps == 0
    assert args.max_grad_norm == 1.0
    assert args.disable_dropout is True


def test_long_sequences_are_truncated_keeping_the_start():
    # dpo.md box “序列对数概率 = 逐 token 求和”: “TRL 默认 max_length=1024：提示词加回答超过它时，从尾部截掉
    # （truncation_mode="keep_start"）。这时 logps/*、rewards/* 与 Δ 都只是保留下来的那些 token 的和”.
    args = default_config(DPOConfig)
    assert args.max_length == 1024 and args.truncation_mode == "keep_start"
    init = source(DPOTrainer.__init__)
    assert (
        "data_collator = DataCollatorForPreference( pad_token_id=self._tokenizer.pad_token_id, "
        "max_length=args.max_length, truncation_mode=args.truncation_mode," in init
    )
    collate = source(DataCollatorForPreference.torch_call)
    assert 'prompt_chosen_ids = [example["prompt_ids"] + example["chosen_ids"] for example in examples]' in collate
    assert 'if self.truncation_mode == "keep_start": sl = slice(None, self.max_length)' in collate
    assert "chosen_mask = [m[sl] for m in chosen_mask]" in collate
    out = DataCollatorForPreference(pad_token_id=0, max_length=4)(
        [{"prompt_ids": [5, 6], "chosen_ids": [7, 8, 9], "rejected_ids": [3]}]
    )
    assert out["input_ids"][0].tolist() == [5, 6, 7, 8]  # the last chosen token is cut
    assert out["completion_mask"][0].tolist() == [0, 0, 1, 1]


def test_prompts_that_fill_max_length_are_dropped():
    # dpo.md box “序列对数概率 = 逐 token 求和”: “只有提示词本身就占满 max_length 的偏好对会被整对丢掉，否则回答一个 token
    # 都不剩”.
    prepare = source(DPOTrainer._prepare_dataset)
    assert (
        'if args.max_length is not None and args.truncation_mode == "keep_start": if isinstance(dataset, Dataset):'
        in prepare
    )
    assert 'dataset = dataset.filter(lambda example: len(example["prompt_ids"]) < args.max_length, **map_kwargs)' in (
        prepare
    )
    out = DataCollatorForPreference(pad_token_id=0, max_length=2)(
        [{"prompt_ids": [5, 6], "chosen_ids": [7, 8], "rejected_ids": [3]}]
    )
    assert out["completion_mask"].sum().item() == 0  # what the filter avoids: no completion token left


def test_other_logged_metrics():
    # dpo.md box: “它还记录 entropy、num_tokens、logits/chosen、logits/rejected 与 mean_token_accuracy”;
    # “logits/* 是回答各 token 上对词表取平均的原始 logit，不是对数概率”; “mean_token_accuracy 是被选回答逐 token 的
    # top-1 命中率，与偏好对是否排对无关”.
    text = source(DPOTrainer._compute_loss)
    for name in ("entropy", "num_tokens", "logits/chosen", "logits/rejected", "mean_token_accuracy"):
        assert f'self._metrics[mode]["{name}"]' in text
    assert "chosen_mean_logits, rejected_mean_logits = outputs.mean_logits[:, -seq_len:].chunk(2, dim=0)" in text
    assert "total_chosen_logits = chosen_mean_logits[chosen_mask.bool()].sum()" in text
    assert "avg_chosen_logits = total_chosen_logits / total_chosen_tokens" in text
    doc = re.sub(r"\s+", " ", FusedCausalLMOutput.__doc__)
    assert "Mean of the temperature-scaled next-token logits over the vocabulary, without gradient." in doc
    assert "Whether the label is the most likely next token." in doc
    assert "chosen_is_top1, _ = outputs.is_top1[:, -seq_len:].chunk(2, dim=0)" in text
    assert "correct_predictions = chosen_is_top1 & chosen_mask.bool()" in text
    assert 'self._metrics[mode]["mean_token_accuracy"].append(accuracy)' in text


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
    # dpo.md: “TRL 还记录 logps/chosen、logps/rejected（策略的序列对数概率的批平均，没有减去参考模型）”; 常见错误
    # “logps/chosen 是按 token 求和的对数概率，没有减去参考模型”, while rewards/chosen is β·(chosen_logps −
    # ref_chosen_logps); “在固定的评估集上看 eval_logps/chosen”.
    text = source(DPOTrainer._compute_loss)
    assert "logps = per_token_logps.sum(dim=1) # sum over sequence length" in text
    assert "chosen_logratios = chosen_logps - ref_chosen_logps" in text
    assert 'self._metrics[mode]["logps/chosen"].append(self.accelerator.gather(chosen_logps).mean().item())' in text
    assert 'self._metrics[mode]["logps/rejected"]' in text
    assert 'if mode == "eval": metrics = {f"eval_{key}": val for key, val in metrics.items()}' in source(DPOTrainer.log)


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


def test_ipo_regresses_the_per_token_margin():
    # dpo.md tip “接下来：DPO 家族”: “TRL 的 IPO 把按 token 平均的间隔推向 1/(2β)，而 rewards/margins 按 token 求和，
    # 回答多于一个 token 时一般不停在 1/2”.
    text = source(DPOTrainer._compute_loss)
    assert "chosen_avg_score = chosen_scores / chosen_mask.sum(dim=1).clamp(min=1.0)" in text
    assert "per_sequence_loss = (ipo_delta - 1 / (2 * self.beta)) ** 2" in text
    assert "chosen_rewards = self.beta * chosen_logratios.detach()" in text
    assert "chosen_logratios = chosen_logps - ref_chosen_logps" in text
    assert "logps = per_token_logps.sum(dim=1) # sum over sequence length" in text


def test_online_dpo_is_experimental():
    # dpo.md “本章没讲的”: “TRL 1.16.0 把这类训练器放在 trl.experimental.online_dpo”.
    assert module_exists("trl.experimental.online_dpo")
    assert not hasattr(trl, "OnlineDPOTrainer")


def test_reference_free_is_gone():
    # dpo.md: “TRL v0.28 及以前有这个选项，叫 reference_free……v0.29 重构 DPO 时移除”: no such DPOConfig field in TRL 1.16.
    assert "reference_free" not in {field.name for field in dataclasses.fields(DPOConfig)}


def _tiny_policy_changed_in_memory():
    """A tiny causal LM saved to disk, reloaded, then changed in memory (an SFT step that was not saved)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "a", "b", "c", "d"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    llama = LlamaConfig(
        vocab_size=6, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    path = tempfile.mkdtemp(prefix="rlhf_toy_claims_")
    LlamaForCausalLM(llama).save_pretrained(path)
    model = LlamaForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    return model, tokenizer, path


def _dpo_trainer(model, tokenizer, precompute):
    from datasets import Dataset

    dataset = Dataset.from_list([{"prompt": "a", "chosen": " b", "rejected": " c"}] * 2)
    args = config(
        DPOConfig, bf16=False, precompute_ref_log_probs=precompute, per_device_train_batch_size=2, disable_tqdm=True
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        return DPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)


def test_default_reference_is_reloaded_from_name_or_path():
    # dpo.md box “两种设置的参考模型不一定相同”: “不传 ref_model、也不用 PEFT 时，TRL 默认并不复制传进去的策略，而是按
    # 策略的 config._name_or_path 从磁盘重新加载一份作参考模型”; 常见错误 “以为 TRL 的参考模型就是传进去的策略”.
    text = source(DPOTrainer.__init__)
    assert (
        "if ref_model is None: if is_peft_model(self.model) or (args.precompute_ref_log_probs and not "
        "self.is_fsdp_enabled):" in text
    )
    assert (
        "ref_model_path = get_config_model_id(self.model.config) "
        "self.ref_model = create_model_from_path(ref_model_path, **ref_model_init_kwargs)" in text
    )
    assert 'return getattr(config, "_name_or_path", "")' in source(get_config_model_id)
    model, tokenizer, path = _tiny_policy_changed_in_memory()
    trainer = _dpo_trainer(model, tokenizer, precompute=False)
    assert trainer.ref_model is not None and trainer.ref_model is not model
    assert trainer.ref_model.config._name_or_path == path
    assert not torch.equal(trainer.ref_model.lm_head.weight.cpu(), model.lm_head.weight.cpu())


def test_precompute_takes_the_reference_from_the_policy_in_memory():
    # dpo.md box: “相当于 TRL 的 precompute_ref_log_probs=True：这时 TRL 在构造训练器时，用传进去的策略（内存里的那个模型）
    # 把参考对数概率算好。FSDP 下例外：TRL 仍从 _name_or_path 重新加载参考模型，再用它预先计算”.
    assert "model = self.ref_model or self.model" in source(DPOTrainer._precompute_ref_logps)
    assert "(args.precompute_ref_log_probs and not self.is_fsdp_enabled): " in source(DPOTrainer.__init__)
    model, tokenizer, _ = _tiny_policy_changed_in_memory()
    trainer = _dpo_trainer(model, tokenizer, precompute=True)
    assert trainer.ref_model is None
    assert "ref_chosen_logps" in trainer.train_dataset.column_names  # computed in __init__, before any step


def test_saving_does_not_change_name_or_path():
    # dpo.md box “两种设置的参考模型不一定相同”: “同一个进程里刚做完 SFT 就把模型交给 DPOTrainer：保存与否都一样，因为保存
    # 不改变 _name_or_path”; 常见错误 “save_pretrained 不改变内存里那个模型的 _name_or_path”, “TRL 的一条报错信息说它会
    # 把参考模型初始化成‘model 的副本’，实际并不是” (the reload itself: test_default_reference_is_reloaded_from_name_or_path).
    model, _, path = _tiny_policy_changed_in_memory()
    other = tempfile.mkdtemp(prefix="rlhf_toy_claims_")
    model.save_pretrained(other)
    assert get_config_model_id(model.config) == path != other
    assert "we'll initialize it to a copy of `model` for you." in source(DPOTrainer.__init__)


def _tiny_llama_rows(**llama_kwargs):
    """A saved tiny causal LM, its tokenizer and 16 preference rows of different lengths (so batches need padding)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "a", "b", "c", "d", "e", "f"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    llama = LlamaConfig(
        vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, pad_token_id=0, eos_token_id=1, **llama_kwargs,
    )  # fmt: skip
    path = tempfile.mkdtemp(prefix="rlhf_toy_claims_")
    LlamaForCausalLM(llama).save_pretrained(path)
    rows = [
        {"prompt": "a", "chosen": " b c d e", "rejected": " c"},
        {"prompt": "a b c", "chosen": " d", "rejected": " e f e f e"},
        {"prompt": "b", "chosen": " f", "rejected": " a b"},
        {"prompt": "c d", "chosen": " a a a", "rejected": " b"},
    ] * 4
    return tokenizer, path, rows


def _first_logged_step(tokenizer, path, rows, **kwargs):
    """Train one step with batches of 4 and return the step-1 log row (and the trainer)."""
    from datasets import Dataset
    from transformers import LlamaForCausalLM

    args = config(
        DPOConfig, per_device_train_batch_size=4, logging_steps=1, logging_first_step=True, max_steps=1,
        save_strategy="no", disable_tqdm=True, **kwargs,
    )  # fmt: skip
    assert args.seed == 42
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        trainer = DPOTrainer(
            model=LlamaForCausalLM.from_pretrained(path),
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
        )
        trainer.train()
    return trainer.state.log_history[0], trainer


def test_precompute_tie_needs_float32_or_the_same_batches():
    # dpo.md box: “预先计算按数据集原来的顺序分批，不打乱；训练时则打乱后重新分批。……在 TRL 默认的 bf16 混合精度下，
    # 它的对数概率的末位就可能不同，所以第 1 步的 Δ 可能只是接近 0，而不是恰为 0。关掉 bf16，或让两次分批相同
    # （train_sampling_strategy="sequential"），都恰为 0”; 常见错误 “TRL 预先计算参考对数概率时，默认的 bf16 下它也可能
    # 只是接近 0”. One logged step with precompute, default seed 42, batches of 4 out of 16 pairs.
    import math

    assert default_config(DPOConfig).train_sampling_strategy == "random"
    assert "shuffle=False," in source(DPOTrainer._precompute_ref_logps)
    tokenizer, path, rows = _tiny_llama_rows()
    first = {
        (bf16, sampling): _first_logged_step(
            tokenizer, path, rows, bf16=bf16, precompute_ref_log_probs=True, train_sampling_strategy=sampling
        )[0]
        for bf16, sampling in ((True, "random"), (False, "random"), (True, "sequential"))
    }
    for tie in ((False, "random"), (True, "sequential")):
        assert abs(first[tie]["loss"] - math.log(2)) < 1e-7
        assert first[tie]["rewards/margins"] == 0.0 and first[tie]["rewards/chosen"] == 0.0
    shuffled = first[True, "random"]
    assert shuffled["loss"] != first[False, "random"]["loss"]
    assert shuffled["rewards/margins"] != 0.0 and abs(shuffled["rewards/margins"]) < 1e-3


def test_disable_dropout_leaves_config_attention_dropout_on():
    # dpo.md box: “默认的 disable_dropout=True 只把 nn.Dropout 模块的概率设为 0，写在模型配置里的注意力 dropout（如
    # Llama 的 attention_dropout）仍然开着”; 常见错误 “训练开始时它为 0，前提是策略的前向里没有还开着的 dropout：策略在
    # 训练模式下前向，参考模型不在。TRL 只关掉 nn.Dropout 模块，写在模型配置里的注意力 dropout 仍然开着”.
    # Default setting (reference reloaded, no precompute), float32 so that only dropout can break the tie.
    from transformers.models.llama.modeling_llama import LlamaAttention

    assert "if isinstance(module, torch.nn.Dropout): module.p = 0" in source(disable_dropout_in_model)
    assert "if args.disable_dropout: disable_dropout_in_model(model)" in source(DPOTrainer.__init__)
    assert "dropout=0.0 if not self.training else self.attention_dropout," in source(LlamaAttention.forward)
    first = {}
    for attention_dropout in (0.3, 0.0):
        tokenizer, path, rows = _tiny_llama_rows(attention_dropout=attention_dropout)
        first[attention_dropout], trainer = _first_logged_step(tokenizer, path, rows, bf16=False)
        assert trainer.ref_model is not None and not trainer.ref_model.training
    assert first[0.0]["rewards/margins"] == 0.0 and first[0.0]["rewards/chosen"] == 0.0
    assert first[0.3]["rewards/margins"] != 0.0 and first[0.3]["rewards/chosen"] != 0.0
