"""Chapter 14 (continued), docs/reading-logs-more.md: what the page says about the metrics TRL 1.16 and transformers log,
checked against the pinned libraries (line numbers are trl 1.16 / the pinned transformers; the tests match source text,
not line numbers)."""

from __future__ import annotations

import re
from pathlib import Path

import transformers.trainer
import trl.trainer.dpo_trainer
import trl.trainer.grpo_trainer
from transformers import TrainingArguments
from trl import GRPOConfig, GRPOTrainer

from .pinned import default_config, source

GRPO = Path(trl.trainer.grpo_trainer.__file__).read_text(encoding="utf-8")
DPO = Path(trl.trainer.dpo_trainer.__file__).read_text(encoding="utf-8")
TRAINER = Path(transformers.trainer.__file__).read_text(encoding="utf-8")


def test_dpo_trainer_logs_the_implicit_rewards_and_the_batch_mean_log_probs():
    # reading-logs-more, DPO 一节: “DPOTrainer 每步记录 rewards/chosen（β(log π_θ − log π_ref) 的批平均）、rewards/margins、
    # logps/chosen、logps/rejected（整条回答对数概率的批平均）” — trl/trainer/dpo_trainer.py:1582-1601
    assert "chosen_rewards = self.beta * chosen_logratios.detach()" in DPO
    assert 'self._metrics[mode]["rewards/chosen"].append(agg_chosen_rewards.mean().item())' in DPO
    assert "margins = chosen_rewards - rejected_rewards" in DPO
    assert 'self._metrics[mode]["rewards/margins"].append(agg_margins.mean().item())' in DPO
    assert 'self._metrics[mode]["logps/chosen"].append(self.accelerator.gather(chosen_logps).mean().item())' in DPO
    assert 'self._metrics[mode]["logps/rejected"].append(self.accelerator.gather(rejected_logps).mean().item())' in DPO


def test_sampling_metrics_only_with_vllm_and_the_correction_which_is_on_by_default():
    # reading-logs-more, 采样器一节: “用 vLLM 生成、并开着 vllm_importance_sampling_correction（TRL 1.16 的默认）时，
    # GRPOTrainer 多记两类指标”；差值是 |log π_old − log μ| 在掩码内的平均 — grpo_trainer.py:2859-2896
    text = source(GRPOTrainer._generate_and_score_completions)
    block = text[text.index("if self.use_vllm and self.vllm_importance_sampling_correction:") :]
    assert block.index("delta = torch.abs(old_per_token_logps - sampling_per_token_logps)") < block.index(
        '"sampling/sampling_logp_difference/mean"'
    )
    assert block.index('"sampling/importance_sampling_ratio/mean"') < block.index("output = {")
    args = default_config(GRPOConfig)
    assert args.vllm_importance_sampling_correction is True and args.use_vllm is False
    # “TRL 1.16 的默认模式是 sequence_mask（上界 3，无下界）”: grpo_config.py:934-935, 948-961 — the docstring at
    # grpo_config.py:331 marks token_truncate as “(default)”, the field says otherwise
    assert args.vllm_importance_sampling_mode == "sequence_mask"
    assert (args.vllm_importance_sampling_clip_max, args.vllm_importance_sampling_clip_min) == (3.0, None)
    # “按整条回答的权重 exp(Σ_t (log π_old − log μ))，越界的回答权重记 0，指标是回答上的平均” — grpo_trainer.py:2667-2703
    assert 'sequence_level_is = self.vllm_importance_sampling_mode in ["sequence_mask", "sequence_truncate"]' in GRPO
    assert "per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)" in GRPO
    assert "vllm_importance_sampling_ratio = torch.exp(logps_diff)" in GRPO
    assert re.search(r"vllm_importance_sampling_ratio\.masked_fill\(\s*invalid_mis_mask, value=0\.0\s*\)", GRPO)


def test_trl_passes_its_own_top_k_top_p_to_the_sampler_but_not_to_the_trainer_log_probs():
    # reading-logs-more, 采样器一节: “TRL 把 top_p、top_k、min_p 交给 vLLM 与 generate（默认 top_p=1.0、top_k=0，
    # 即不截）；训练器的对数概率是整个分布上的” — grpo_trainer.py:1133-1135 (vLLM), 1162-1164 (generate);
    # grpo_config.py:536-544 (defaults)
    assert re.search(r"top_p=self\.top_p,\s*top_k=self\.top_k,\s*min_p=self\.min_p,", GRPO)
    assert re.search(r'"top_p": self\.top_p,\s*"top_k": self\.top_k,\s*"min_p": self\.min_p,', GRPO)
    args = default_config(GRPOConfig)
    assert (args.top_p, args.top_k, args.min_p) == (1.0, 0, None)
    logps = source(GRPOTrainer._get_per_token_logps_and_entropies)
    assert "top_k" not in logps and "top_p" not in logps


def test_clip_ratio_metrics_and_their_definitions():
    # reading-logs-more, 截断一节: region = low ∪ high；low 是 w < 1 − ε 且 Â < 0，high 是 w > 1 + ε_high 且 Â > 0
    # — grpo_trainer.py:3273-3279；“TRL 记的是每次内循环的平均”：每次 _compute_loss 追加一次，log 时取平均
    assert "is_low_clipped = (coef_1 < 1 - self.epsilon_low) & (advantages < 0)" in GRPO
    assert "is_high_clipped = (coef_1 > 1 + self.epsilon_high) & (advantages > 0)" in GRPO
    assert "is_region_clipped = is_low_clipped | is_high_clipped" in GRPO
    for name in ("region", "low", "high"):
        assert f'self._metrics[mode]["clip_ratio/{name}_mean"].append(' in source(GRPOTrainer._compute_loss)
    assert "metrics[key] = sum(valid) / len(valid) if valid else None" in GRPO


def test_the_same_temperature_scales_the_trainer_and_goes_to_vllm():
    # reading-logs-more, 采样器一节: “TRL 把同一个 temperature 交给 vLLM，也用它缩放训练器的 logits”
    # — grpo_trainer.py:789 (self.temperature = args.temperature), 1068-1070 (the LM head), 1132 (vLLM)
    assert "self.temperature = args.temperature" in GRPO
    assert re.search(r"add_fused_lm_head\(\s*[^)]*temperature=self\.temperature", GRPO)
    assert GRPO.count("temperature=self.temperature,") >= 2


def test_grad_norm_is_measured_before_clipping_with_max_grad_norm_one():
    # reading-logs-more, 梯度范数一节: “grad_norm 由 transformers 的 Trainer 记录……在按 max_grad_norm（默认 1.0）
    # 限幅之前量” — transformers/trainer.py: _clip_grad_norm “Returns the pre-clip gradient norm.”
    assert "Clip gradients to max_grad_norm. Returns the pre-clip gradient norm." in TRAINER
    assert "grad_norm = self._clip_grad_norm(model)" in TRAINER
    assert TrainingArguments.__dataclass_fields__["max_grad_norm"].default == 1.0


def test_grpo_defaults_the_page_relies_on():
    # reading-logs-more: “scale_rewards="group"，TRL 的默认”；“num_iterations=1（TRL 的默认）时比率恒为 1”；
    # “TRL 记录 rewards/<函数名>/mean 与 /std” — grpo_trainer.py:2823-2825
    args = default_config(GRPOConfig)
    assert (args.scale_rewards, args.num_iterations) == ("group", 1)
    assert 'self._metrics[mode][f"rewards/{reward_func_name}/mean"]' in GRPO
    assert 'self._metrics[mode][f"rewards/{reward_func_name}/std"]' in GRPO
