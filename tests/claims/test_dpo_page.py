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
from trl.trainer.dpo_trainer import DPOTrainer
from trl.trainer.utils import get_config_model_id

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
    # 把参考对数概率算好”.
    assert "model = self.ref_model or self.model" in source(DPOTrainer._precompute_ref_logps)
    model, tokenizer, _ = _tiny_policy_changed_in_memory()
    trainer = _dpo_trainer(model, tokenizer, precompute=True)
    assert trainer.ref_model is None
    assert "ref_chosen_logps" in trainer.train_dataset.column_names  # computed in __init__, before any step
