"""docs/grpo.md: what the page says about TRL's GRPOTrainer, checked against the pinned TRL (and verl)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers.optimization
import trl.trainer.utils as trl_utils
import verl.trainer.ppo.core_algos as core_algos
from conformance.trl_private import trl_grpo_loss
from rlhf_toy.estimators.kl import kl_estimate
from transformers import Trainer
from trl import GRPOConfig, GRPOTrainer

from .pinned import DOCS, config, default_config, module_source, source


def test_grpo_config_defaults():
    # grpo.md “与论文 / TRL 的差异” table, column “TRL 1.16.0 GRPOTrainer（默认）”: beta 0.0, loss_type "dapo",
    # scale_rewards "group", num_iterations=1, epsilon=0.2 with epsilon_high unset; and “TRL 默认学习率 10^-6 量级”.
    # Also the box “你的运行：先定这五项” at the end of 一屏读完: “`loss_type="dapo"`：TRL 的默认” and
    # “`scale_rewards="group"`：TRL 的默认”. TRL 1.16.0 trl/trainer/grpo_config.py (the field defaults).
    args = default_config(GRPOConfig)
    assert (args.beta, args.loss_type, args.scale_rewards) == (0.0, "dapo", "group")
    assert (args.num_iterations, args.epsilon, args.epsilon_high) == (1, 0.2, None)
    assert args.learning_rate == 1e-6


def test_trl_does_not_load_a_reference_model_when_beta_is_0():
    # grpo.md table row KL 系数: “beta=0 时不加载参考模型”; 运行结果, 用清单的设置跑: “β = 0 就不要建这份副本（TRL 这时也
    # 不加载参考模型）”. TRL 1.16.0 trl/trainer/grpo_trainer.py:984.
    assert "if self.beta == 0.0: # If beta is 0.0, the reference model is not needed self.ref_model = None" in source(
        GRPOTrainer.__init__
    )


def test_epsilon_high_defaults_to_epsilon():
    # grpo.md table row 截断: “epsilon=0.2，epsilon_high 默认等于 epsilon”.
    assert "self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon" in source(
        GRPOTrainer.__init__
    )


def test_group_std_is_bessel_corrected_plus_1e_4():
    # grpo.md, 组内相对优势: “默认 10^-4，与 TRL 相同”; table row 标准差 “Bessel 校正，加 10^-4（写死在代码里，不能配置）”.
    assert "advantages = advantages / (std_rewards + 1e-4)" in source(GRPOTrainer)
    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    assert sorted(n for n in names if re.search(r"(^|_)eps", n) or "std" in n) == [
        "adam_epsilon",
        "epsilon",
        "epsilon_high",
    ]
    assert "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)" in source(GRPOTrainer)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert trl_utils.nanstd(rewards) == rewards.std(correction=1)


def test_grpo_config_refuses_one_generation():
    # grpo.md, G = 1 (the sentence “G = 1 时 … 优势同样是 0” and the table row G = 1): TRL does not train with
    # num_generations=1, GRPOConfig raises.
    with pytest.raises(ValueError, match="GRPO requires at least 2 generations per prompt"):
        config(GRPOConfig, num_generations=1)


def test_old_logps_are_the_current_ones_detached_when_not_computed():
    # grpo.md table row log π_old: “每批只更新一次时不计算，直接用 per_token_logps.detach()”.
    assert (
        "old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps"
        in source(GRPOTrainer._compute_loss)
    )


def test_old_logps_are_computed_when_generation_and_accumulation_do_not_align_or_with_vllm_correction():
    # grpo.md “原文和 TRL 默认下，截断都不起作用” and its exception: TRL computes old log-probs when
    # gradient_accumulation_steps is not a multiple of steps_per_generation × num_iterations (the ratio then differs
    # from 1), and with vLLM's importance-sampling correction, on by default (computed, but at the same parameters:
    # see test_vllm_mismatch_is_a_separate_factor_outside_the_clip).
    assert (
        "if self.args.gradient_accumulation_steps % generate_every != 0 or ( self.use_vllm and "
        "self.vllm_importance_sampling_correction ):" in source(GRPOTrainer)
    )
    assert default_config(GRPOConfig).vllm_importance_sampling_correction is True


def test_vllm_mismatch_is_a_separate_factor_outside_the_clip():
    # grpo.md “用 vLLM 生成、开着 vllm_importance_sampling_correction（默认开）时，TRL 也会用训练模型在 torch.no_grad() 下
    # 先算一遍旧策略的对数概率，但那时参数还没更新，比率 w 的值仍是 1；vLLM 与训练模型之间的差异另乘一个按
    # vllm_importance_sampling_mode 限幅或屏蔽后的权重 π_训练/π_vLLM，不经过 ε 截断”; grpo-variants.md says the same.
    text = source(GRPOTrainer)
    # old log-probs come from the training model (self.model) inside the no_grad block of the generation step
    no_grad = text.index("with torch.no_grad(), disable_gradient_checkpointing(self.model")
    old = text.index("old_per_token_logps, _, _ = self._get_per_token_logps_and_entropies( self.model,")
    assert no_grad < old
    assert "vllm_importance_sampling_ratio = torch.exp(logps_diff)" in text
    assert "per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask" in text
    assert 'if self.vllm_importance_sampling_mode in ["sequence_truncate", "token_truncate"]:' in text
    assert 'elif self.vllm_importance_sampling_mode in ["sequence_mask", "token_mask"]:' in text
    loss = source(GRPOTrainer._compute_loss)
    # the clipped ratio uses the trainer-computed old log-probs; the vLLM weight multiplies the loss afterwards
    assert "log_ratio = per_token_logps - old_per_token_logps" in loss
    assert "coef_1 = torch.exp(log_importance_weights)" in loss
    factor = 'per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]'
    assert factor in loss and loss.index("coef_1 = torch.exp(log_importance_weights)") < loss.index(factor)


def test_logged_kl_and_clip_ratio_metrics():
    # grpo.md “kl 和 clip_ratio 的含义与 TRL 相同”: kl is the masked token mean of k3, logged only when beta != 0;
    # the book's clip_ratio is TRL's clip_ratio/region_mean, and TRL also logs low_mean and high_mean.
    text = source(GRPOTrainer._compute_loss)
    assert 'if self.beta != 0.0: self._metrics[mode]["kl"].append(global_masked_mean(per_token_kl))' in text
    for name in ("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean"):
        assert f'self._metrics[mode]["{name}"]' in text
    assert '["clip_ratio"]' not in source(GRPOTrainer)


def test_kl_term_is_k3_in_the_loss():
    # grpo.md: the KL penalty is k3, added per token to the loss (“TRL GRPOTrainer 和 DeepSeekMath 都只在损失里加”).
    text = source(GRPOTrainer._compute_loss)
    assert (
        "per_token_kl = ( torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1 )"
        in text
    )
    assert "per_token_loss = per_token_loss + self.beta * per_token_kl" in text


def test_log_probs_are_computed_from_temperature_scaled_logits():
    # grpo.md “TRL 的对数概率还要先把 logits 除以采样温度”.
    # GRPOTrainer installs a fused LM head with the sampling temperature on the policy and the reference model;
    # that the head divides the logits by it is shown on a real model in test_tiny_lm_page.py.
    text = source(GRPOTrainer.__init__)
    assert (
        "add_fused_lm_head( self.model.get_base_model() if is_peft_model(self.model) else self.model, temperature=self.temperature,"
        in text
    )
    assert "add_fused_lm_head( self.ref_model, temperature=self.temperature" in text


def test_trl_multiplies_k3_by_the_ratio_by_default():
    # grpo.md table row “KL 的梯度 | … | use_bias_correction_kl=True：w k3，反向 KL” and “TRL 1.16.0 的 use_bias_correction_kl
    # 默认为 True：它把 k3 乘上带梯度的比率 w”; “use_bias_correction_kl=True 时 TRL 记录的是 w k3”: kl is logged after the product.
    # 该不该开 KL: “开了 KL，就用 TRL 默认的 w k3（上一节定义）。`use_bias_correction_kl=True` 是默认值，不用改。”
    assert default_config(GRPOConfig).use_bias_correction_kl is True
    text = source(GRPOTrainer._compute_loss)
    product = "if self.args.use_bias_correction_kl: per_token_kl = per_token_kl * coef_1"
    logged = 'self._metrics[mode]["kl"].append(global_masked_mean(per_token_kl))'
    assert product in text and text.index(product) < text.index(logged)
    assert "coef_1 = torch.exp(log_importance_weights)" in text  # w carries the gradient: no detach


def _verl_group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    index = np.zeros(len(rewards), dtype=object)  # one group
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        rewards.clone()[:, None], torch.ones(len(rewards), 1), index
    )
    return advantages[:, 0]


def test_trl_and_verl_do_not_zero_a_constant_group_of_inexact_rewards():
    # grpo.md “TRL 与 verl 没有这一步，照公式计算”, the printed “TRL 的公式（除以 σ + 1e-4）… 2.98e-04” and “verl 的公式
    # （除以 σ + 1e-6）… 0.0289”, and “frac_reward_zero_std 用 torch.isclose(std, 0) 判断 … 这组也不算‘标准差为 0’”.
    r = torch.full((8,), 0.35)
    text = source(GRPOTrainer)
    assert "advantages = rewards - mean_grouped_rewards" in text
    assert "advantages = advantages / (std_rewards + 1e-4)" in text
    assert "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))" in text
    std = trl_utils.nanstd(r.view(-1, 8), dim=1)
    trl_advantage = (r - torch.nanmean(r.view(-1, 8), dim=1)) / (std + 1e-4)
    assert f"{trl_advantage[0].item():.2e}" == "2.98e-04" and not torch.isclose(std, torch.zeros_like(std)).any()
    verl = _verl_group_advantages(r)
    assert torch.allclose(verl, (r - r.mean()) / (r.std() + 1e-6)) and f"{verl[0].item():.4f}" == "0.0289"


def test_trl_gives_zero_advantage_only_in_evaluation_with_one_generation():
    # grpo.md “只有评估时设 num_generations_eval=1 才会走到标准差取 0 的分支，优势也是 0”.
    text = source(GRPOTrainer)
    assert "else: # doesn't occur during training, but could occur in eval when num_generations_eval=1" in text
    assert "std_rewards = torch.zeros_like(rewards)" in text
    assert "num_generations_eval" in GRPOConfig.__dataclass_fields__


def test_verl_group_of_one_gets_its_reward():
    # grpo.md “verl 此时取 Â_i = r_i” (G = 1), and the table row 标准差 “verl 加 10^-6”.
    r = torch.tensor([1.0, 0.0, 0.5])
    index = np.arange(3).astype(object)
    advantages, _ = core_algos.compute_grpo_outcome_advantage(r.clone()[:, None], torch.ones(3, 1), index)
    assert torch.allclose(advantages[:, 0], r / (1 + 1e-6))
    assert inspect.signature(core_algos.compute_grpo_outcome_advantage).parameters["epsilon"].default == 1e-6


def test_trl_averages_logged_metrics_over_the_logging_window():
    # grpo.md table row 日志的汇总 and “TRL 把日志窗口（logging_steps，默认 10 个优化步）里每次算损失时记下的值取平均”;
    # “TRL 的一步是一个优化步，每 steps_per_generation × num_iterations 个优化步重新生成一次”.
    assert default_config(GRPOConfig).logging_steps == 10
    log = source(GRPOTrainer.log)
    assert "metrics[key] = sum(valid) / len(valid) if valid else None" in log
    assert "self._metrics[mode].clear()" in log
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in source(
        GRPOTrainer._prepare_inputs
    )


def test_multiple_reward_functions_are_summed_then_normalised():
    # grpo.md “reward_weights（默认全为 1）… 默认先加权求和再做组内标准化（multi_objective_aggregation="sum_then_normalize"）”.
    args = default_config(GRPOConfig)
    assert (args.reward_weights, args.multi_objective_aggregation) == (None, "sum_then_normalize")
    text = source(GRPOTrainer)
    assert "self.reward_weights = torch.ones(len(reward_funcs), dtype=torch.float32)" in text
    assert "rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)" in text


def test_trl_logs_the_fraction_of_clipped_completions():
    # grpo.md “TRL 还记录 completions/clipped_ratio，即写到 max_completion_length 还没结束 … 的回答的比例”.
    text = source(GRPOTrainer)
    assert "is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids], device=device)" in text
    assert 'self._metrics[mode]["completions/clipped_ratio"].append(agg_is_truncated.float().mean().item())' in text


def test_grpo_dropout_is_kept_by_default():
    # grpo.md (“比率 w 的值仍是 1（前提是两次前向相同……TRL 默认 disable_dropout=False”) and grpo-variants.md: TRL
    # disables dropout only when asked, so with vLLM the separate old-logps forward and the training forward of a model
    # with dropout use different masks.
    assert default_config(GRPOConfig).disable_dropout is False
    assert "if args.disable_dropout:" in source(GRPOTrainer.__init__)


def test_on_policy_loss_value_is_minus_the_mean_advantage_but_its_gradient_is_not_zero():
    # grpo.md 常见错误 “日志里的 loss 说明不了进度”: with w ≡ 1 (num_iterations=1, TRL's default: no old log-probs) and
    # beta = 0 the value of the loss is minus the (length-weighted, for token-level aggregation) mean advantage; each
    # group's advantages sum to 0, so it is 0 with equal lengths (and always for "grpo"), while the gradient is not.
    # TRL's own _compute_loss on one group of 4 answers, float64.
    advantages = torch.tensor([1.5, -0.5, -0.5, -0.5], dtype=torch.float64)
    equal, unequal = torch.ones(4, 3, dtype=torch.float64), torch.ones(4, 3, dtype=torch.float64)
    unequal[0, 1:] = 0  # the positive-advantage answer is 1 token long, the others 3
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        logps = torch.full((4, 3), -1.0, dtype=torch.float64, requires_grad=True)
        loss, _ = trl_grpo_loss(logps, equal, advantages, loss_type=loss_type, beta=0.0)
        (grad,) = torch.autograd.grad(loss, logps)
        assert abs(loss.item()) < 1e-12
        assert grad.abs().max().item() > 0.01
    logps = torch.full((4, 3), -1.0, dtype=torch.float64, requires_grad=True)
    assert abs(trl_grpo_loss(logps, unequal, advantages, loss_type="grpo", beta=0.0)[0].item()) < 1e-12
    dapo, _ = trl_grpo_loss(logps, unequal, advantages, loss_type="dapo", beta=0.0)
    lengths = unequal.sum(-1)
    assert dapo.item() == pytest.approx(-(lengths * advantages).sum().item() / lengths.sum().item(), abs=1e-12)
    assert dapo.item() > 0.1  # no longer 0: the long answers have negative advantages


def test_progress_metrics_are_trl_metric_names():
    # grpo.md 常见错误 “日志里的 loss 说明不了进度”: watch reward (the batch mean, averaged over the logging window:
    # test_trl_averages_logged_metrics_over_the_logging_window), frac_reward_zero_std (fraction of groups whose
    # rewards all agree), entropy (mean over completion tokens) and completions/mean_length; loss is the key under which
    # transformers' Trainer logs the training loss.
    text = source(GRPOTrainer)
    assert 'self._metrics[mode]["reward"].append(torch.nanmean(rewards).item())' in text
    assert "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))" in text
    assert 'self._metrics[mode]["frac_reward_zero_std"].append(is_std_zero.float().mean().item())' in text
    assert 'self._metrics[mode]["entropy"].append(global_masked_mean(entropies))' in text
    assert 'self._metrics[mode]["completions/mean_length"].append(agg_completion_lengths.float().mean().item())' in text
    assert 'logs["loss"] = ' in source(Trainer._maybe_log_save_evaluate)


def test_grpo_inherits_optimizer_and_precision_defaults():
    # grpo.md table row 优化器与数值 and the bullet “优化器与学习率不同”: AdamW (adamw_torch_fused, weight_decay=0), learning
    # rate 1e-6 decaying linearly to 0 (no warmup), gradient-norm clipping at 1.0, bf16 and gradient checkpointing on by
    # default (GRPOConfig's docstring lists the last two as differing from TrainingArguments).
    args = default_config(GRPOConfig)
    assert (args.optim, args.weight_decay, args.learning_rate) == ("adamw_torch_fused", 0.0, 1e-6)
    assert (args.lr_scheduler_type, args.warmup_steps, args.max_grad_norm) == ("linear", 0, 1.0)
    assert args.bf16 is True and args.fp16 is False and args.gradient_checkpointing is True
    assert "`bf16`: Defaults to `True` if `fp16` is not set, instead of `False`." in source(GRPOConfig)
    assert "`gradient_checkpointing`: Defaults to `True` instead of `False`." in source(GRPOConfig)
    linear = source(transformers.optimization._get_linear_schedule_with_warmup_lr_lambda)
    assert (
        "return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))"
        in linear
    )


def test_trl_dapo_normalises_like_verl_token_mean():
    # grpo.md, “与论文 / TRL 的差异” box, bullet on loss_type:
    # TRL 的 `dapo` 用整个生成批次的 token 数折算到一个优化步（生成批次里各优化步的平均）；
    # `steps_per_generation` 等于 `gradient_accumulation_steps`（默认）时就是这一步的 token 数，与 verl 的 `token-mean`
    # 一致. TRL divides the masked sum by num_items_in_batch (counted once per generation batch) rescaled by
    # gradient_accumulation_steps / steps_per_generation; verl's token-mean divides it by the step's own token count.
    # Also grpo.md, footnote [^batch-split]: “折算的算法是：这批生成的 token 总数 ÷ 进程数 × `gradient_accumulation_steps`
    # ÷ `steps_per_generation`。默认 `steps_per_generation` 等于 `gradient_accumulation_steps`，折算的结果就是这个优化步
    # 自己的 token 数（按进程平分）。” TRL 1.16.0 trl/trainer/grpo_trainer.py:3170-3172 (the two normalizer lines below)
    # and trl/trainer/grpo_config.py:1098-1099 (steps_per_generation defaults to gradient_accumulation_steps).
    text = source(GRPOTrainer._compute_loss)
    assert 'elif self.loss_type in ["cispo", "dapo", "vespo"]:' in text
    assert 'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes' in text
    assert "normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation" in text
    assert "loss = (per_token_loss * mask).sum() / normalizer" in text
    # num_items_in_batch is the loss-mask sum of the whole generation batch, computed where the batch is generated
    assert "num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()" in source(GRPOTrainer)
    args = default_config(GRPOConfig)
    assert args.steps_per_generation == args.gradient_accumulation_steps
    agg = source(core_algos.agg_loss)
    assert 'if loss_agg_mode == "token-mean":' in agg
    assert "loss = verl_F.masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size" in agg
    assert "batch_num_tokens: number of valid tokens in global batch" in agg


def test_steps_per_generation_defaults_to_gradient_accumulation_steps():
    # grpo.md, 动手前的清单, 你的配置里的一批: “一次生成的回答数是 `generation_batch_size`，等于
    # `per_device_train_batch_size` × 进程数 × `steps_per_generation`”; “`steps_per_generation` 是这批生成分几个小批
    # 做前向与反向，默认等于 `gradient_accumulation_steps`” (the page's worked example prints these from GRPOConfig).
    # TRL 1.16.0 trl/trainer/grpo_config.py:528-530 (the help text) and :1098-1100 (__post_init__).
    text = source(GRPOConfig.__post_init__)
    assert "if self.generation_batch_size is None and self.steps_per_generation is None:" in text
    assert "self.steps_per_generation = self.gradient_accumulation_steps" in text
    assert (
        "self.generation_batch_size = self.per_device_train_batch_size * num_processes * self.steps_per_generation"
        in text
    )
    args = config(GRPOConfig, per_device_train_batch_size=8, gradient_accumulation_steps=4)
    assert (args.steps_per_generation, args.generation_batch_size) == (4, 32)


def test_trl_bnpo_divides_by_each_micro_batch_token_count():
    # grpo.md, the same footnote: “`bnpo` 在每个进程的每个小批之内按它自己的 token 数平均，再对这些小批取平均”
    # (dapo: test_trl_dapo_normalises_like_verl_token_mean). TRL 1.16.0 trl/trainer/grpo_trainer.py:3158-3162: the
    # micro-batch's own mask sum, then divided by the number of accumulation steps (DDP averages over processes).
    text = source(GRPOTrainer._compute_loss)
    bnpo = text[text.index('elif self.loss_type == "bnpo":') : text.index('elif self.loss_type == "dr_grpo":')]
    assert "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)" in bnpo
    assert 'normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0' in bnpo
    assert "loss = loss / normalizer" in bnpo
    assert "num_items_in_batch" not in bnpo


def test_trl_default_batch_is_one_prompt_per_optimizer_step():
    # grpo.md table row 每步的提示词 × 回答: “单进程默认每个优化步 1 个提示词 × 8” (and 你的配置里的一批: “TRL 的默认在
    # 单卡上每次生成只有 1 道题”); the dr_grpo row: L = max_completion_length = 512; sampling at temperature 1.0.
    args = default_config(GRPOConfig)
    assert (args.num_generations, args.per_device_train_batch_size, args.generation_batch_size) == (8, 8, 8)
    assert (args.steps_per_generation, args.gradient_accumulation_steps) == (1, 1)
    assert (args.max_completion_length, args.temperature) == (512, 1.0)


def test_epsilon_high_does_nothing_while_the_ratio_is_1():
    # grpo.md, 动手前的清单: “它的 `epsilon_high`（clip-higher）只在比率不等于 1 时起作用”; “按本清单每批生成只做一个
    # 优化步，比率恒为 1，`epsilon_high` 设成多少都不起作用”. TRL 1.16.0's own _compute_loss (trl/trainer/grpo_trainer.py:
    # 3095, 3113-3120 build the clipped token loss from exp(logps - old_logps) with epsilon_low/epsilon_high; without old
    # log-probs, old = logps.detach(), test_old_logps_are_the_current_ones_detached_when_not_computed). float64.
    advantages = torch.tensor([1.5, -0.5, -0.5, -0.5], dtype=torch.float64)
    mask = torch.ones(4, 3, dtype=torch.float64)

    def loss_and_grad(epsilon_high, old_logps):
        logps = torch.full((4, 3), -1.0, dtype=torch.float64, requires_grad=True)
        loss, _ = trl_grpo_loss(
            logps, mask, advantages, old_logps, loss_type="dapo", beta=0.0, epsilon_high=epsilon_high
        )
        return loss.item(), torch.autograd.grad(loss, logps)[0]

    on_policy = [loss_and_grad(eps, None) for eps in (None, 0.28, 1.0)]
    assert all(loss == on_policy[0][0] and torch.equal(grad, on_policy[0][1]) for loss, grad in on_policy)
    stale = torch.full((4, 3), -1.0 - 0.25, dtype=torch.float64)  # ratio exp(0.25) ≈ 1.28 on every token
    (_, low), (_, high) = loss_and_grad(None, stale), loss_and_grad(0.3, stale)
    assert low[0].abs().max().item() == 0.0  # A > 0 and ratio above 1 + 0.2: clipped, no gradient
    assert high[0].abs().min().item() > 0.01  # epsilon_high = 0.3 keeps it


def test_lora_goes_to_the_trainer_as_peft_config_not_into_grpo_config():
    # grpo.md, 动手前的清单: “LoRA 本身不在 `GRPOConfig` 里。它是一个 `peft.LoraConfig`，作为 `peft_config` 交给
    # `GRPOTrainer`”. TRL 1.16.0 trl/trainer/grpo_trainer.py:319 (the peft_config parameter) and :439-442 (it must be a
    # peft.PeftConfig); no GRPOConfig field is about LoRA or peft.
    assert "peft_config" in inspect.signature(GRPOTrainer.__init__).parameters
    assert "if not isinstance(peft_config, PeftConfig):" in source(GRPOTrainer.__init__)
    assert not [f.name for f in dataclasses.fields(GRPOConfig) if "lora" in f.name or "peft" in f.name]


def test_mask_truncated_completions_defaults_to_false():
    # grpo.md 动手前的清单, 被截停的回答: “`mask_truncated_completions` 默认 `False`，写到长度上限的回答照常进损失”.
    # TRL 1.16.0 trl/trainer/grpo_config.py:836-837 (mask_truncated_completions: bool = field(default=False, ...)); the
    # masking itself is guarded by trl/trainer/grpo_trainer.py:2488 (`if self.mask_truncated_completions:`).
    assert default_config(GRPOConfig).mask_truncated_completions is False
    assert "if self.mask_truncated_completions:" in source(GRPOTrainer._generate_and_score_completions)


def test_trl_default_with_beta_keeps_group_scaling_and_corrected_k3():
    # grpo.md, 差异 box, KL bullet, after “TRL 1.16.0 的 use_bias_correction_kl 默认为 True”: TRL 默认还按组内标准差缩放
    # （scale_rewards="group"），so setting only beta > 0 gives the “只除以 c(p)” column at T = 1.
    args = config(GRPOConfig, beta=0.4)
    assert (args.scale_rewards, args.use_bias_correction_kl) == ("group", True)
    assert args.loss_type == "dapo"


def test_verl_low_var_kl_clamps_the_log_ratio_to_20_and_k3_to_10():
    # grpo.md, 差异 box, KL bullet: “verl 还先把 d 限幅到 ±20，再把 k3 的值限幅到 ±10，值超过 10 的 token 没有 KL 梯度”;
    # and the 运行结果 fold's control “限幅 k3（verl）”, which calls kl_estimate(..., log_ratio_clamp=20, value_clamp=10).
    # Also the gloss under 一屏读完's settings table: “verl 的 `low_var_kl` 则先把它截到 ±10，那是限幅的版本”.
    # verl 0.9.1: verl/trainer/ppo/core_algos.py:2239-2245 (kl_penalty_forward, branch "low_var_kl"/"k3").
    text = source(core_algos.kl_penalty_forward)
    assert 'if kl_penalty in ("low_var_kl", "k3"):' in text
    assert "kl = torch.clamp(kl, min=-20, max=20)" in text
    assert "return torch.clamp(kld, min=-10, max=10)" in text
    # The same numbers and gradients as the book's clamped k3, on log ratios d = -logps from -25 to 25 (both clamps
    # active; d = 0 is left out, where the gradient of k3 is 0 anyway).
    logps = torch.tensor([-25.0, -15, -5, -2, -1, 1, 2, 5, 15, 25], dtype=torch.float64)[:, None].requires_grad_(True)
    ref_logps = torch.zeros_like(logps)
    verl_kl = core_algos.kl_penalty(logps, ref_logps, "low_var_kl")
    (verl_grad,) = torch.autograd.grad(verl_kl.sum(), logps)
    book_kl = kl_estimate(logps, ref_logps, "k3", log_ratio_clamp=20, value_clamp=10)
    (book_grad,) = torch.autograd.grad(book_kl.sum(), logps)
    torch.testing.assert_close(verl_kl, book_kl, rtol=0, atol=0)
    torch.testing.assert_close(verl_grad, book_grad, rtol=0, atol=0)
    big = verl_kl.detach() >= 10
    assert big.any() and (verl_grad[big] == 0).all() and (verl_grad[~big] != 0).all()


def test_footnote_definitions_do_not_swallow_body_text():
    # E1 (review r2): Python-Markdown's footnotes extension joins a non-indented line right after `[^x]: ...` to the
    # footnote. On grpo.md every footnote definition is followed by a blank line, an indented line or another definition.
    lines = (DOCS / "grpo.md").read_text(encoding="utf-8").splitlines()
    bad = [
        (n + 2, nxt)
        for n, (line, nxt) in enumerate(zip(lines, lines[1:], strict=False))
        if re.match(r"^\[\^[^\]]+\]:", line) and nxt.strip() and not nxt.startswith("    ") and not nxt.startswith("[^")
    ]
    assert bad == []


def test_one_generation_batch_per_optimizer_step_example():
    # grpo.md, “与论文 / TRL 的差异” box, the exception to “截断都不起作用”: “per_device_train_batch_size=8、
    # gradient_accumulation_steps=4，steps_per_generation 取默认的 4 … 一批生成 32 条回答，正好喂一个优化步”;
    # “把 steps_per_generation 改成 8：一批生成 64 条回答，要用两个优化步”. TRL 1.16.0 trl/trainer/grpo_config.py:1098-1100
    # (generation_batch_size = per_device_train_batch_size × num_processes × steps_per_generation) and
    # grpo_trainer.py's `gradient_accumulation_steps % generate_every != 0` (test above) decide the ratio.
    base = config(GRPOConfig, per_device_train_batch_size=8, gradient_accumulation_steps=4)
    assert base.steps_per_generation == 4 and base.generation_batch_size == 32
    assert base.gradient_accumulation_steps % (base.steps_per_generation * base.num_iterations) == 0
    split = config(GRPOConfig, per_device_train_batch_size=8, gradient_accumulation_steps=4, steps_per_generation=8)
    assert split.generation_batch_size == 64
    assert split.generation_batch_size // (split.per_device_train_batch_size * split.gradient_accumulation_steps) == 2
    assert split.gradient_accumulation_steps % (split.steps_per_generation * split.num_iterations) != 0


def test_lora_1p5b_start_is_a_valid_grpo_config_counted_in_completions():
    # grpo.md, 动手前的清单, 你的配置里的一批: “`per_device_train_batch_size` 数的是一张卡一次前向与反向的**回答**条数
    # … 就设成 P×G”; “把 per_device_train_batch_size 减半、gradient_accumulation_steps 加倍 … 一批生成仍正好一个
    # 优化步，比率仍恒为 1”. TRL 1.16.0 trl/trainer/grpo_config.py:1098-1100.
    from rlhf_toy.studies.recipes import lora_1p5b_start

    kwargs = {k: v for k, v in lora_1p5b_start(G=8, P=4).items() if k not in ("bf16", "gradient_checkpointing")}
    args = config(GRPOConfig, **kwargs)
    assert args.generation_batch_size == 4 * 8 and args.generation_batch_size // args.num_generations == 4
    assert args.beta == 0.0 and args.loss_type == "dapo" and args.num_iterations == 1
    # the recipe's comment “小于 1 即比例”: transformers 5.24.0 training_args.py:2158-2159 (get_warmup_steps)
    assert args.get_warmup_steps(1000) == 100
    assert args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) == 0
    halved = config(GRPOConfig, **{**kwargs, "per_device_train_batch_size": 16, "gradient_accumulation_steps": 2})
    assert halved.generation_batch_size == 32 and halved.steps_per_generation == 2
    assert halved.gradient_accumulation_steps % (halved.steps_per_generation * halved.num_iterations) == 0
    with pytest.raises(ValueError, match="G must be"):
        lora_1p5b_start(G=1)


def test_kl_in_the_reward_is_a_verl_switch_not_a_trl_option():
    # grpo.md, 该不该开 KL: “TRL 1.16.0 的 `GRPOTrainer` 没有这个选项，`beta` 只进损失。”; “verl 有：
    # `algorithm.use_kl_in_reward=True`（默认 `False`），`algorithm.kl_penalty` 默认 `"kl"`，就是 k1。”; “KL 从奖励里扣时，
    # 扣过的奖励取连续值，再除以组内标准差” (verl's GRPO advantage). 常见错误 “KL 罚了两次”: “verl 两处都能开
    # （`algorithm.use_kl_in_reward` 与 `actor_rollout_ref.actor.use_kl_loss`）”.
    # TRL 1.16.0: GRPOConfig has no KL field besides use_bias_correction_kl; beta is used once as a coefficient,
    # trl/trainer/grpo_trainer.py:3150 (the other uses of self.beta only test it against 0).
    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    assert [n for n in names if "kl" in n.lower()] == ["use_bias_correction_kl"]
    text = source(GRPOTrainer)
    assert text.count("self.beta *") == 1
    assert "per_token_loss = per_token_loss + self.beta * per_token_kl" in source(GRPOTrainer._compute_loss)
    # verl 0.9.1: verl/trainer/config/algorithm.py:659-660; verl/trainer/ppo/ray_trainer.py:106 (apply_kl_penalty);
    # verl/trainer/ppo/core_algos.py:2228-2229 (kl_penalty "kl"), :304 and :326 (GRPO advantage of the summed
    # token rewards, divided by the group std); verl/workers/config/actor.py:171 (use_kl_loss).
    from verl.trainer.config.algorithm import AlgoConfig
    from verl.workers.config.actor import ActorConfig

    defaults = {f.name: f.default for f in dataclasses.fields(AlgoConfig)}
    assert (defaults["use_kl_in_reward"], defaults["kl_penalty"]) == (False, "kl")
    ray_trainer = module_source("verl.trainer.ppo.ray_trainer")  # read, not imported (it needs torchdata)
    assert "if self.config.algorithm.use_kl_in_reward: batch, kl_metrics = apply_kl_penalty(" in ray_trainer
    assert "token_level_rewards = token_level_scores - beta * kld" in ray_trainer
    logprob, ref_logprob = torch.tensor([[-0.5, -1.0]]), torch.tensor([[-0.7, -0.4]])
    assert torch.equal(core_algos.kl_penalty(logprob, ref_logprob, kl_penalty="kl"), logprob - ref_logprob)
    grpo_adv = source(core_algos.compute_grpo_outcome_advantage)
    assert "scores = token_level_rewards.sum(dim=-1)" in grpo_adv
    assert "scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)" in grpo_adv
    assert {f.name: f.default for f in dataclasses.fields(ActorConfig)}["use_kl_loss"] is False
    # the two switches' config paths, in verl's flattened trainer config (verl/trainer/config/_generated_ppo_trainer.yaml)
    import verl
    import yaml

    flat = yaml.safe_load(
        (Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text()
    )
    assert flat["algorithm"]["use_kl_in_reward"] is False and flat["actor_rollout_ref"]["actor"]["use_kl_loss"] is False


def test_trl_dr_grpo_is_dapo_times_total_length_over_b_l_even_with_equal_lengths():
    # grpo.md 小结: “`dr_grpo` 除以常数 BL，比 `dapo` 多乘一个因子 Σ_j|y_j|/(BL)，回答一样长时也不例外。”;
    # “有梯度裁剪（TRL 默认 `max_grad_norm=1.0`）时…”. TRL 1.16.0 trl/trainer/grpo_trainer.py:3164.
    assert "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)" in source(
        GRPOTrainer._compute_loss
    )
    assert default_config(GRPOConfig).max_grad_norm == 1.0
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.float64)  # two answers of equal length 3
    grads = {}
    for loss_type in ("dapo", "dr_grpo"):
        logps = torch.full((2, 3), -1.0, dtype=torch.float64, requires_grad=True)
        loss, _ = trl_grpo_loss(logps, mask, advantages, loss_type=loss_type, beta=0.0, max_completion_length=12)
        (grads[loss_type],) = torch.autograd.grad(loss, logps)
    assert torch.allclose(grads["dr_grpo"], grads["dapo"] * mask.sum() / (2 * 12))
    assert not torch.allclose(grads["dr_grpo"], grads["dapo"])


def test_trl_generates_the_whole_generation_batch_once_then_splits_it():
    # grpo.md, 动手前的清单, 你的配置里的一批: “这时 TRL 一次生成整批 256 条回答，再分 8 个小批做前向与反向。”
    # TRL 1.16.0 trl/trainer/grpo_trainer.py:1527-1528 (comment) and :1538-1546 (_prepare_inputs): one call to
    # _generate_and_score_completions per steps_per_generation × num_iterations micro-steps, split into
    # steps_per_generation pieces. The 256 and 8 are the page's GRPOConfig printout, checked here too.
    from rlhf_toy.studies.recipes import RECIPES, lora_1p5b_start

    text = source(GRPOTrainer._prepare_inputs)
    assert "Generates completions once for the entire generation batch and splits it into batches of size" in text
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in text
    assert "generation_batch = self._generate_and_score_completions(generation_batch)" in text
    assert "generation_batches = split_tensor_dict(generation_batch, self.args.steps_per_generation)" in text
    assert "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]" in text
    start = {k: v for k, v in lora_1p5b_start(G=8, P=4).items() if k not in ("bf16", "gradient_checkpointing")}
    target_P = RECIPES["DAPO"]["prompts_per_step"].value
    assert target_P == 32
    args = config(GRPOConfig, **{**start, "gradient_accumulation_steps": target_P // 4})
    assert (args.steps_per_generation, args.generation_batch_size) == (8, 256)
    assert args.generation_batch_size // args.num_generations == target_P
    # one optimizer step per generation: the ratio stays 1 (test_old_logps_are_computed_when_..., above)
    assert args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) == 0


def test_trl_grpo_trainer_computes_logps_without_the_full_logits():
    # grpo.md, 动手前的清单, the fold “深入：这个估计数的是什么”: “TRL 1.16 的 `GRPOTrainer` 给模型换上分块的输出层，
    # 不生成整个 (B, S, V) 的 logits。” TRL 1.16.0 trl/trainer/grpo_trainer.py:1066-1072 (GRPOTrainer.__init__ calls
    # add_fused_lm_head on the policy, its PEFT base model included) and trl/trainer/utils.py:1548-1561 (its docstring).
    init = source(GRPOTrainer.__init__)
    assert "# Compute the per-token log-probabilities in chunks, without materializing the full logits" in init
    assert "add_fused_lm_head( self.model.get_base_model() if is_peft_model(self.model) else self.model," in init
    doc = source(trl_utils.add_fused_lm_head)
    assert "without materializing the `(batch, seq_len, vocab)` logits" in doc
    assert "projects through the LM head, in tiles" in doc


def test_trl_loads_a_model_by_name_in_fp32_unless_model_init_kwargs_sets_dtype():
    # grpo.md, 动手前的清单, the fold “深入：这个估计数的是什么”: “TRL 1.16 按模型名加载模型时，`model_init_kwargs` 里
    # 不写 `dtype` 就用 fp32；`bf16=True` 只是自动混合精度”; “要按 bf16 加载，就在 `model_init_kwargs` 里写 `dtype`”.
    # TRL 1.16.0 trl/trainer/grpo_trainer.py:168-172 (GRPOTrainer's docstring, argument `model`) and
    # trl/trainer/utils.py's create_model_from_path (dtype read from the kwargs, default "float32"); autocast:
    # tests/claims/test_your_run_settings_page.py::test_trl_loads_the_model_in_fp32_and_runs_bf16_autocast.
    from trl.trainer.utils import create_model_from_path

    doc = source(GRPOTrainer)
    assert (
        "with the keyword arguments in `args.model_init_kwargs`. If `dtype` is not specified in "
        "`args.model_init_kwargs`, it defaults to `float32`." in doc
    )
    assert 'dtype = kwargs.get("dtype", "float32")' in source(create_model_from_path)
    assert default_config(GRPOConfig).model_init_kwargs is None


def test_a_forward_pass_need_not_hold_whole_groups():
    # grpo.md, 你的配置里的一批: “一次前向不必装下整组：TRL 只要求 `generation_batch_size`（见下一句）是 G 的倍数”;
    # “可以把 `per_device_train_batch_size` 降到 G 以下，用梯度累积补回，G 不必跟着减”; “每个优化步的题数 =
    # `per_device_train_batch_size` × 进程数 × `gradient_accumulation_steps` ÷ G”. TRL 1.16.0
    # trl/trainer/grpo_config.py:1129-1133: the only group check is generation_batch_size % num_generations.
    text = source(GRPOConfig.__post_init__)
    assert "if self.generation_batch_size % self.num_generations != 0:" in text
    assert "per_device_train_batch_size % self.num_generations" not in text
    args = config(GRPOConfig, num_generations=8, per_device_train_batch_size=4, gradient_accumulation_steps=4)
    assert (args.steps_per_generation, args.generation_batch_size) == (4, 16)
    assert args.per_device_train_batch_size * 1 * args.gradient_accumulation_steps // args.num_generations == 2


def test_grpo_config_checkpoints_activations_by_default_and_the_old_name_warns():
    # grpo.md, 动手前的清单: “TRL 的 `GRPOConfig` 默认就开着它”; “transformers 5.24 把它改名为
    # `activation_checkpointing`，旧名仍然有效，只是会给一条 FutureWarning”. TRL 1.16.0 grpo_config.py:410
    # (“`gradient_checkpointing`: Defaults to `True`”); transformers 5.24.0 training_args.py:1533-1543 (the old name is
    # a deprecated alias, copied to the new one with a FutureWarning).
    args = default_config(GRPOConfig)
    assert args.activation_checkpointing is True and args.gradient_checkpointing is True
    with pytest.warns(FutureWarning, match="`gradient_checkpointing` is deprecated"):  # not the helper: it hides the warning
        old = GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to="none", gradient_checkpointing=True)
    assert old.activation_checkpointing is True
