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
