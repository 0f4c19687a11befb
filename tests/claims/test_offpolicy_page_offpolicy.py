"""Chapter 12 (offpolicy section): what the page says about TRL 1.16's vLLM importance sampling correction and
verl 0.9.1's rollout correction, checked against the pinned libraries."""

from __future__ import annotations

import importlib.util
import inspect
import re
import tempfile
from pathlib import Path

import pytest
from trl import GRPOConfig, GRPOTrainer

from rlhf_toy.estimators.importance import IS_MODES

from .pinned import config, default_config, module_source, source


def test_trl_correction_is_on_by_default_with_sequence_mask_and_cap_three():
    # offpolicy: “TRL 1.16 默认打开修正（vllm_importance_sampling_correction=True），模式 "sequence_mask"，
    # 上界 vllm_importance_sampling_clip_max=3.0，下界 None”.
    c = default_config(GRPOConfig)
    assert c.vllm_importance_sampling_correction is True
    assert c.vllm_importance_sampling_mode == "sequence_mask"
    assert c.vllm_importance_sampling_clip_max == 3.0
    assert c.vllm_importance_sampling_clip_min is None
    assert c.use_vllm is False
    assert c.off_policy_mask_threshold is None


def test_trl_modes_are_ours_and_an_unknown_mode_fails_only_at_generation():
    # offpolicy: “四种模式与本书的 IS_MODES 相同；未知的模式在 GRPOConfig 里不报错，要到（用 vLLM）生成时才报
    # ValueError（sourced: trl 1.16 grpo_trainer.py）”.
    text = source(GRPOTrainer._generate_and_score_completions)
    assert "Possible values are 'token_truncate', 'token_mask', 'sequence_truncate', and 'sequence_mask'." in text
    assert config(GRPOConfig, vllm_importance_sampling_mode="token").vllm_importance_sampling_mode == "token"
    for mode in IS_MODES:
        assert f'"{mode}"' in text


def test_trl_config_rejects_bad_bounds():
    # offpolicy: “clip_min ≥ clip_max、或截断模式两个界都是 None 时 GRPOConfig 报错（本书的函数同样报错）”.
    with pytest.raises(ValueError, match="must be less than"):
        config(GRPOConfig, vllm_importance_sampling_clip_min=3.0, vllm_importance_sampling_clip_max=2.0)
    with pytest.raises(ValueError, match="At least one of"):
        config(
            GRPOConfig,
            vllm_importance_sampling_mode="token_truncate",
            vllm_importance_sampling_clip_max=None,
        )


def test_trl_weight_multiplies_the_per_token_loss_only_with_vllm():
    # offpolicy: “权重乘在逐 token 损失上，只在 use_vllm 时（sourced: trl 1.16 grpo_trainer.py，_compute_loss）；
    # old_per_token_logps 由训练器自己重新计算”.
    text = source(GRPOTrainer._compute_loss)
    assert (
        'if self.use_vllm and self.vllm_importance_sampling_correction and self.loss_type != "vespo": '
        'per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]'
    ) in text
    gen = source(GRPOTrainer._generate_and_score_completions)
    assert "per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask" in gen
    assert "per_token_logps_diff = torch.nan_to_num(per_token_logps_diff, nan=0.0)" in gen
    assert "per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)" in gen
    assert 'self._metrics[mode]["sampling/importance_sampling_ratio/min"]' in gen


def test_trl_kl_term_is_added_after_the_weight_and_is_not_weighted():
    # offpolicy: “β > 0 时 TRL 把 β·k3 加在乘过权重的逐 token 损失之后，KL 项不乘权重”.
    text = source(GRPOTrainer._compute_loss)
    weight = 'per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]'
    kl = "if self.beta != 0.0: per_token_loss = per_token_loss + self.beta * per_token_kl"
    assert text.count(weight) == 1 and text.count(kl) == 1
    assert text.index(weight) < text.index(kl)
    assert "per_token_kl * inputs" not in text


def test_trl_kl_term_is_multiplied_by_the_ppo_ratio_by_default():
    # offpolicy：“KL 项是 β·r_t·k3，r_t = π_θ/π_old（use_bias_correction_kl 默认 True，importance_sampling_level
    # 默认 "token"）；它不乘 π_old/μ，所以在 μ 的样本上估计的不是 KL(π_θ‖π_ref)”.
    c = default_config(GRPOConfig)
    assert c.use_bias_correction_kl is True and c.importance_sampling_level == "token"
    text = source(GRPOTrainer._compute_loss)
    assert "log_ratio = per_token_logps - old_per_token_logps" in text
    assert "coef_1 = torch.exp(log_importance_weights)" in text
    assert "if self.args.use_bias_correction_kl: per_token_kl = per_token_kl * coef_1" in text
    assert "torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1" in text


def test_trl_async_grpo_has_no_reference_kl_and_logs_k3_to_the_sampler():
    # offpolicy 差异框：“异步训练器没有对参考模型的 KL 项（AsyncGRPOConfig 没有 beta）；它记录的 kl 是 π_θ 与采样器之间的 k3”.
    import dataclasses

    from trl.experimental.async_grpo import AsyncGRPOConfig

    assert "beta" not in {f.name for f in dataclasses.fields(AsyncGRPOConfig)}
    trainer = module_source("trl.experimental.async_grpo.async_grpo_trainer")
    assert "ref_model" not in trainer and "ref_per_token" not in trainer
    assert "log_ratio = log_probs - old_log_probs coef_1 = torch.exp(log_ratio)" in trainer
    assert "local_kl_sum = ((coef_1 - 1) - log_ratio).sum()" in trainer
    assert 'self._metrics["train"]["kl"].append((global_kl_sum / global_count).item())' in trainer
    # 没有 dual-clip：只有一个普通的截断，损失里也没有别的项
    assert (
        "per_token_loss1 = coef_1 * advantages per_token_loss2 = coef_2 * advantages "
        "per_token_loss = -torch.min(per_token_loss1, per_token_loss2) "
    ) in trainer
    assert "clip_ratio_c" not in trainer and "dual_clip" not in trainer.lower()


def test_verl_rollout_correction_defaults_and_rejection_modes():
    # offpolicy: “verl 0.9.1 的 RolloutCorrectionConfig 默认 rollout_is="sequence"、rollout_is_threshold=2.0、
    # 不做拒绝采样（rollout_rs=None）；rollout_rs 有 token_k1 … seq_max_k3 等按 KL 估计量丢样本的模式”.
    text = module_source("verl.trainer.config.algorithm")
    assert 'rollout_is: Optional[str] = "sequence"' in text
    assert "rollout_is_threshold: str | float = 2.0" in text
    assert "rollout_rs: Optional[str] = None" in text
    from verl.trainer.ppo.rollout_corr_helper import SUPPORTED_ROLLOUT_RS_OPTIONS

    assert {"token_k1", "seq_sum_k3", "seq_mean_k3", "seq_max_k2"} <= SUPPORTED_ROLLOUT_RS_OPTIONS


def test_trl_cap_is_the_deprecated_name_of_clip_max():
    # offpolicy: “vllm_importance_sampling_cap 是旧名，已弃用”.
    with pytest.warns(FutureWarning, match="vllm_importance_sampling_cap"):
        c = GRPOConfig(
            output_dir=tempfile.mkdtemp(prefix="rlhf_toy_claims_"),
            use_cpu=True,
            report_to="none",
            vllm_importance_sampling_cap=2.0,
        )
    assert c.vllm_importance_sampling_clip_max == 2.0


def test_trl_warns_when_the_vllm_server_returns_unprocessed_logprobs():
    # offpolicy 常见错误: “TRL 在 vLLM 服务器不是 --logprobs-mode processed_logprobs 时发警告”.
    text = source(GRPOTrainer.__init__)
    assert 'if logprobs_mode != "processed_logprobs": logger.warning(' in text


def test_trl_and_verl_scale_the_trainer_logits_by_the_sampling_temperature():
    # offpolicy: “采样温度不算 μ ≠ π：TRL 1.16 与 verl 0.9.1 在训练器里用同一个温度缩放 logits；
    # top-k / top-p 只在采样时用，训练器算的是全词表上的概率”.
    from trl.trainer.utils import add_fused_lm_head

    init = source(GRPOTrainer.__init__)
    assert "self.temperature = args.temperature" in init
    assert re.search(r"add_fused_lm_head\(.{0,120}?temperature=self\.temperature", init)
    assert "temperature" in inspect.signature(add_fused_lm_head).parameters
    assert not {"top_k", "top_p"} & set(inspect.signature(add_fused_lm_head).parameters)
    trainer = module_source("verl.trainer.ppo.ray_trainer")
    assert 'batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature' in trainer
    # verl.workers.engine imports peft at package import: read the file next to the verl package instead
    verl_root = Path(importlib.util.find_spec("verl").origin).parent
    engine = " ".join((verl_root / "workers/engine/fsdp/transformer_impl.py").read_text(encoding="utf-8").split())
    assert "return logits / temperature.clamp(min=1e-8).to(logits.dtype)" in engine
    assert 'temperature = micro_batch["temperature"]' in engine


def test_verl_bypass_mode_reuses_the_rollout_logps_and_is_off_by_default():
    # offpolicy: “verl 的 bypass_mode=True 把采样器的对数概率当成 old_log_prob 放进 PPO 比率；
    # RolloutCorrectionConfig 默认 bypass_mode=False（解耦）”.
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    assert RolloutCorrectionConfig().bypass_mode is False
    assert RolloutCorrectionConfig.bypass_ppo_clip().bypass_mode is True
    text = module_source("verl.trainer.config.algorithm")
    assert "True: Bypass mode - reuse rollout_log_prob as old_log_prob (2 policies)" in text
    assert "False: Decoupled mode - compute old_log_prob separately (3 policies)" in text


def test_verl_dual_clip_caps_negative_advantage_tokens_at_clip_ratio_c():
    # offpolicy: “优势为负的样本在比率超过 verl 的 dual-clip 上界 clip_ratio_c（默认 3.0）之前不受限，超过之后梯度也为 0”.
    import dataclasses

    import torch
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.workers.config.actor import ActorConfig

    assert {f.name: f.default for f in dataclasses.fields(ActorConfig)}["clip_ratio_c"] == 3.0
    assert "pg_losses3 = -advantages * clip_ratio_c" in module_source("verl.trainer.ppo.core_algos")
    grads = []
    for ratio in (1.5, 2.5, 5.0):
        log_prob = torch.tensor([[float(torch.tensor(ratio).log())]], requires_grad=True)
        config = ActorConfig(
            strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=0.2, clip_ratio_c=3.0
        )
        loss, _ = compute_policy_loss_vanilla(
            old_log_prob=torch.zeros(1, 1),
            log_prob=log_prob,
            advantages=-torch.ones(1, 1),
            response_mask=torch.ones(1, 1),
            loss_agg_mode="token-mean",
            config=config,
        )
        loss.backward()
        grads.append(round(log_prob.grad.item(), 3))
    assert grads == [1.5, 2.5, 0.0]


def test_verl_icepop_level_comes_from_rollout_is():
    # offpolicy: “rollout_is="token" 配 "0.5_2.0" 是逐 token 的双侧掩码（IcePop）；默认 rollout_is="sequence" 时是序列级的”.
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    assert RolloutCorrectionConfig().rollout_is == "sequence"
    icepop = RolloutCorrectionConfig.decoupled_token_icepop()
    assert icepop.rollout_is == "token"
    assert icepop.rollout_is_threshold == "0.5_5.0"


def test_verl_ships_with_rollout_correction_off():
    # offpolicy: “verl 自带的配置里 rollout_is: null：默认不乘重要性权重、只记指标”.
    import dataclasses
    import importlib.util
    from pathlib import Path

    from omegaconf import OmegaConf
    from verl.trainer.config.algorithm import AlgoConfig

    assert {f.name: f.default for f in dataclasses.fields(AlgoConfig)}["rollout_correction"] is None
    root = Path(importlib.util.find_spec("verl").origin).parent
    shipped = OmegaConf.load(root / "trainer/config/_generated_ppo_trainer.yaml").algorithm.rollout_correction
    assert shipped.rollout_is is None and shipped.rollout_rs is None


def test_trl_grpo_syncs_vllm_before_generating_and_computes_old_logps_right_after():
    # offpolicy 差异框：“GRPOTrainer 在每次生成之前把新参数同步给 vLLM，生成之后立刻用同一份参数算 old_per_token_logps；
    # 它的权重只修正引擎与训练器的差异，几步的过时交给 PPO 比率”.
    single = source(GRPOTrainer._generate_single_turn)
    assert (
        'if self.state.global_step != self._last_loaded_step: with profiling_context(self, "sync_weights"): '
        "self.vllm_generation.sync_weights()"
    ) in single
    gen = source(GRPOTrainer._generate_and_score_completions)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in gen
    assert "old_per_token_logps, _, _ = self._get_per_token_logps_and_entropies( self.model," in gen
    assert "per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask" in gen


def test_trl_async_grpo_uses_the_sampler_logprobs_as_old_and_drops_stale_samples():
    # offpolicy 差异框：“trl.experimental.async_grpo 把采样器的对数概率直接当 old_log_probs 放进截断的比率，
    # 没有另乘的权重；丢掉落后超过 max_staleness（默认 4）步的样本”.
    worker = module_source("trl.experimental.async_grpo.async_rollout_worker")
    assert "old_log_probs: list[float] # sampled logprobs" in worker
    trainer = module_source("trl.experimental.async_grpo.async_grpo_trainer")
    assert "log_ratio = log_probs - old_log_probs coef_1 = torch.exp(log_ratio)" in trainer
    assert "coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)" in trainer
    assert "importance_sampling" not in trainer
    assert "if staleness > self.max_staleness:" in trainer
    assert "max_staleness: int = field( default=4," in module_source("trl.experimental.async_grpo.async_grpo_config")


def test_verl_labels_token_weights_biased_and_sequence_weights_unbiased():
    # offpolicy 式 (is-ratios) 之后：“verl 的配置说明把逐 token 权重标成有偏、序列权重标成无偏”；
    # 解耦模式的说明把“几步之前的参数”列为要修正的来源之一.
    text = module_source("verl.trainer.config.algorithm")
    assert '"token": Per-token IS weights (low variance, biased)' in text
    assert '"sequence": Per-sequence IS weights (unbiased, high variance)' in text
    assert "2. Model update staleness: Rollout data collected from older policy checkpoints" in text


def test_verl_bypass_reinforce_multiplies_log_prob_by_the_weight():
    # offpolicy 差异框：“bypass 模式的 loss_type="reinforce"（预设 bypass_pg_is()）不截断比率，
    # 损失是 −w·A·log π，w 是限幅后的 π_θ/μ”.
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    assert RolloutCorrectionConfig().loss_type == "ppo_clip"
    preset = RolloutCorrectionConfig.bypass_pg_is()
    assert (preset.bypass_mode, preset.loss_type, preset.rollout_is) == (True, "reinforce", "sequence")
    assert "pg_losses = -advantages * log_prob * rollout_is_weights" in module_source("verl.trainer.ppo.core_algos")


def test_verl_seq_mis_preset_rejects_sequences_from_the_response_mask():
    # offpolicy 差异框：“verl 预设里的 Seq-MIS（decoupled_seq_is_rs()）是序列 TIS 加 rollout_rs="seq_sum_k1" 的拒绝：
    # 被拒的序列从 response_mask 里去掉，不进 token 平均的分母；TRL 的 sequence_mask 是权重置 0”.
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    preset = RolloutCorrectionConfig.decoupled_seq_is_rs()
    assert (preset.rollout_is, preset.rollout_is_threshold) == ("sequence", 2.0)
    assert (preset.rollout_rs, preset.rollout_rs_threshold) == ("seq_sum_k1", "0.5_2.0")
    assert "decoupled_seq_is_rs() # Seq-MIS" in module_source("verl.trainer.config.algorithm")
    helper = module_source("verl.trainer.ppo.rollout_corr_helper")
    assert "modified_response_mask: torch.Tensor = (response_mask * final_mask).to(dtype=response_mask.dtype)" in helper
    assert 'batch.batch["response_mask"] = modified_response_mask' in helper
