"""docs/tiny-lm.md: what the page says about TRL's GRPOTrainer, checked against the pinned TRL."""

from __future__ import annotations

import inspect

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from .pinned import default_config, source


def test_chapter_config_is_trl_default():
    # tiny-lm.md: “beta=0、loss_type="dapo"（TRL 今天的默认）”; max_completion_length is TRL's name for L.
    args = default_config(GRPOConfig)
    assert (args.beta, args.loss_type) == (0.0, "dapo")
    assert args.max_completion_length == 512


def test_grpo_trainer_lives_in_trl_trainer_grpo_trainer():
    # tiny-lm.md, heading of the mapping table: “TRL GRPOTrainer（trl/trainer/grpo_trainer.py）”.
    assert inspect.getsourcefile(GRPOTrainer).endswith("trl/trainer/grpo_trainer.py")


def test_trl_log_probs_divide_the_logits_by_the_temperature():
    # tiny-lm.md: “TRL 计算对数概率时也先把 logits 除以 τ”. In TRL 1.16 this is the fused LM head that
    # GRPOTrainer installs with temperature=args.temperature (not a line in _get_per_token_logps_and_entropies).
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=16,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=8,
        )
    )
    input_ids = torch.randint(0, 16, (2, 6))
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits[:, :-1]
        add_fused_lm_head(model, temperature=0.7)
        fused = model(input_ids=input_ids, labels=input_ids, fused_lm_head=True)
    expected = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, input_ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(fused.log_probs, expected, atol=1e-5, rtol=1e-5)


def test_entropy_is_logged_and_kl_only_with_beta():
    # tiny-lm.md: “TRL 日志里的 entropy” and “beta=0 时 TRL 不记录 kl”.
    text = source(GRPOTrainer._compute_loss)
    assert 'self._metrics[mode]["entropy"].append(global_masked_mean(entropies))' in text
    assert 'if self.beta != 0.0: self._metrics[mode]["kl"]' in text


def test_mapping_table_names_exist():
    # tiny-lm.md, the mapping table: RepeatSampler lives in trl/trainer/utils.py; the GRPOTrainer methods it names exist.
    import trl.trainer.utils as trl_utils

    assert inspect.getsourcefile(trl_utils.RepeatSampler).endswith("trl/trainer/utils.py")
    for name in (
        "_prepare_inputs",
        "_generate_and_score_completions",
        "_calculate_rewards",
        "_get_per_token_logps_and_entropies",
        "_compute_loss",
    ):
        assert callable(getattr(GRPOTrainer, name)), name
    assert "attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)" in source(GRPOTrainer._compute_loss)
    # the record row: TRL logs the batch reward and the mean completion length under these names.
    text = source(GRPOTrainer)
    assert 'self._metrics[mode]["reward"]' in text
    assert '"completions/mean_length"' in text


def test_training_log_probs_come_from_the_fused_head_with_masked_labels():
    # tiny-lm.md, table row for policy.logps: “它调 model(..., labels=labels, fused_lm_head=True) … PR #7077 之前是先
    # logits /= temperature 再 selective_log_softmax”: at 1.16 the labels are -100 outside the attention mask and the
    # prompt, and grpo_trainer.py no longer calls selective_log_softmax.
    text = source(GRPOTrainer._get_per_token_logps_and_entropies)
    assert "labels = input_ids_batch.masked_fill(attention_mask_batch == 0, -100)" in text
    assert "labels[:, :-logits_to_keep] = -100" in text
    assert "outputs = model(**model_inputs, labels=labels, fused_lm_head=True)" in text
    assert "selective_log_softmax" not in inspect.getsource(inspect.getmodule(GRPOTrainer))


def test_training_forward_passes_no_position_ids():
    # tiny-lm.md: “TRL 1.16 训练时的前向只传 input_ids 与 attention_mask、不传 position_ids，模型（例如 Qwen2）于是从 0 数起”;
    # HF generate derives them from the mask (“position_ids = attention_mask.cumsum(-1) - 1”).
    import transformers.generation.utils as generation_utils
    import transformers.models.qwen2.modeling_qwen2 as qwen2

    text = source(GRPOTrainer._get_per_token_logps_and_entropies)
    assert 'model_inputs = {"input_ids": input_ids_batch, "attention_mask": attention_mask_batch}' in text
    assert '"position_ids"' not in text
    assert (
        "position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens"
        in source(qwen2.Qwen2Model.forward)
    )
    assert "position_ids = attention_mask.long().cumsum(-1) - 1" in inspect.getsource(generation_utils)


def test_fused_head_returns_zero_outside_the_mask():
    # tiny-lm.md: “TRL 1.16 的融合输出层在标签为 −100 的位置（掩码外，包括 EOS 之后）也返回 0”.
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=16,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=8,
        )
    )
    input_ids = torch.randint(0, 16, (2, 6))
    labels = input_ids.clone()
    labels[0, 4:] = -100  # “EOS 之后”的填充
    add_fused_lm_head(model, temperature=1.0)
    with torch.no_grad():
        fused = model(input_ids=input_ids, labels=labels, fused_lm_head=True)
    assert torch.equal(fused.log_probs[0, 3:], torch.zeros(2))  # 标签 −100 的位置（右移一位后）恰为 0
    assert (fused.log_probs[1] < 0).all()


def test_gpt2_counts_positions_from_0_and_opt_from_the_mask():
    # tiny-lm.md: “GPT-2 这类用绝对位置嵌入、前向又不从掩码推位置编号的模型 … OPT 自己从掩码算位置，不受影响”.
    from transformers.models.gpt2.modeling_gpt2 import GPT2Model
    from transformers.models.opt.modeling_opt import OPTLearnedPositionalEmbedding

    gpt2 = source(GPT2Model.forward)
    assert "if position_ids is None:" in gpt2
    assert "position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens" in gpt2
    assert "position_embeds = self.wpe(position_ids)" in gpt2
    assert "position_ids = torch.cumsum(attention_mask, dim=1)" in source(OPTLearnedPositionalEmbedding.forward)
