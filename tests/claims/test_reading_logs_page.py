"""docs/reading-logs.md: what TRL 1.16's GRPOTrainer logs, under which names, computed where.

Line numbers are those of the pinned trl 1.16.0 `trl/trainer/grpo_trainer.py` and `grpo_config.py`, and of the pinned
transformers 5.24.0 `transformers/trainer.py`.
"""

from __future__ import annotations

import re
from pathlib import Path

import transformers.trainer
import trl.trainer.grpo_trainer
from transformers import Trainer, TrainingArguments
from trl import DPOConfig, GRPOConfig, GRPOTrainer

from .pinned import default_config, source

GRPO = Path(trl.trainer.grpo_trainer.__file__).read_text(encoding="utf-8")
TRAINER = Path(transformers.trainer.__file__).read_text(encoding="utf-8")


def _logged(name: str) -> str:
    """The source line that appends to the metric `name` (exactly one)."""
    lines = [line for line in GRPO.splitlines() if f'self._metrics[mode]["{name}"].append(' in line]
    assert len(lines) == 1, (name, lines)
    return lines[0]


def test_reward_metrics_are_logged_after_scoring():
    # page, table "TRL 记录的指标": reward、reward_std（整批，不分组）、frac_reward_zero_std
    # grpo_trainer.py:2828-2830
    assert "torch.nanmean(rewards)" in _logged("reward")
    assert "nanstd(rewards)" in _logged("reward_std")  # the whole batch, not per group
    assert "is_std_zero.float().mean()" in _logged("frac_reward_zero_std")
    # grpo_trainer.py:2767-2772 (scale_rewards "group"/"none"): is_std_zero is per group, torch.isclose(std, 0)
    assert "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)" in GRPO
    assert "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))" in GRPO
    # grpo_trainer.py:2773-2776: with scale_rewards="batch" the std is the batch's (page, differences box)
    assert re.search(
        r'elif self\.scale_rewards == "batch":\s*# Compute global std\s*if rewards\.numel\(\) > 1:\s*'
        r"std_rewards = nanstd\(rewards\)\.expand_as\(rewards\)",
        GRPO,
    )


def test_completion_metrics_count_eos_and_truncation():
    # page: TRL 的 completions/mean_length 含 EOS；clipped_ratio 是最后一个 token 不是 EOS 或 pad 的回答比例
    # grpo_trainer.py:2296, 2301-2304
    assert "agg_completion_lengths.float().mean()" in _logged("completions/mean_length")
    # grpo_trainer.py:1885-1887, 2279: the kept ids run up to and including the first EOS; the length is len(ids)
    assert "completion_mask = (sequence_indices <= eos_idx.unsqueeze(1)).int()" in GRPO
    assert "completion_lengths = torch.tensor([len(ids) for ids in completion_ids], device=device)" in GRPO
    assert "is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids]" in GRPO
    assert "agg_is_truncated.float().mean()" in _logged("completions/clipped_ratio")


def test_entropy_kl_clip_are_logged_in_the_loss_and_kl_only_with_beta():
    # page: TRL 的 entropy、kl（只在 β ≠ 0 时）、clip_ratio/region_mean 在算损失时记录，掩码内平均
    # grpo_trainer.py:3267-3270, 3279
    assert re.search(
        r'if self\.beta != 0\.0:\s*self\._metrics\[mode\]\["kl"\]\.append\(global_masked_mean\(per_token_kl\)\)', GRPO
    )
    assert "global_masked_mean(entropies)" in _logged("entropy")
    assert "global_masked_mean(is_region_clipped.float())" in _logged("clip_ratio/region_mean")
    assert GRPO.index('["entropy"].append') > GRPO.index("def _compute_loss")


def test_one_log_row_averages_logging_steps_optimizer_steps_and_grad_norm_is_the_last_steps():
    # page, 日志从哪里来: “每 logging_steps 个优化步一行（TRL 1.16 的默认是 10）；TRL 自己的指标与 loss 是这段的
    # 平均，grad_norm 只是最后一步的值”
    # trl grpo_config.py:409 (“logging_steps: Defaults to 10”), the same for DPOConfig
    assert default_config(GRPOConfig).logging_steps == 10
    assert default_config(DPOConfig).logging_steps == 10
    # grpo_trainer.py:3302-3321: log() averages every value appended since the last log, then clears them
    log = source(GRPOTrainer.log)
    assert "metrics[key] = sum(valid) / len(valid) if valid else None" in log
    assert log.index("super().log(logs, start_time)") < log.index("self._metrics[mode].clear()")
    # transformers trainer.py:2262: loss is the sum since the last log divided by the number of steps
    assert 'logs["loss"] = tr_loss_scalar / (self.state.global_step - self._globalstep_last_logged)' in TRAINER
    # trainer.py:1937-1940, 1957-1960, 2263-2264: grad_norm is recomputed (overwritten) every optimizer step and the
    # logging call gets only the current step's value
    assert "grad_norm = self._get_grad_norm(model, grad_norm=grad_norm)" in TRAINER
    assert re.search(r"self\._maybe_log_save_evaluate\(\s*self\._tr_loss,\s*grad_norm,", TRAINER)
    assert 'logs["grad_norm"] = grad_norm.item() if isinstance(grad_norm, torch.Tensor) else grad_norm' in TRAINER


def test_trainer_state_json_is_written_with_each_checkpoint_or_by_save_state():
    # page: “每次保存检查点时写进 checkpoint-*/trainer_state.json；要在 output_dir 里也有一份，调用 trainer.save_state()”
    # transformers trainer.py:246, 3363-3417 (_save_checkpoint); trainer_pt_utils.py:1282-1292 (save_state)
    assert 'TRAINER_STATE_NAME = "trainer_state.json"' in TRAINER
    assert "self.state.save_to_json(os.path.join(output_dir, TRAINER_STATE_NAME))" in source(Trainer._save_checkpoint)
    assert 'path = os.path.join(self.args.output_dir, "trainer_state.json")' in source(Trainer.save_state)
    assert "save_state" not in source(Trainer.train) and "save_state" not in source(Trainer._inner_training_loop)


def test_the_logged_kl_is_multiplied_by_the_ratio_by_default():
    # page, table: “TRL 1.16 默认 use_bias_correction_kl=True，记录之前先乘比率 w”
    # grpo_config.py:972-973; grpo_trainer.py:3100-3105 (per_token_kl *= coef_1), 3268 (logged after that)
    assert default_config(GRPOConfig).use_bias_correction_kl is True
    loss = source(GRPOTrainer._compute_loss)
    assert re.search(r"if self\.args\.use_bias_correction_kl:\s*per_token_kl = per_token_kl \* coef_1", loss)
    assert loss.index("per_token_kl = per_token_kl * coef_1") < loss.index('self._metrics[mode]["kl"].append(')


def test_the_ratio_is_one_with_one_iteration_only_if_generation_matches_accumulation():
    # page: “num_iterations=1、且 steps_per_generation 等于 gradient_accumulation_steps（TRL 的默认）时比率恒为 1”
    # grpo_trainer.py:2642-2656: old_per_token_logps is computed (so the ratio is not 1) when
    # gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0, or with vLLM and its IS correction
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in GRPO
    assert re.search(
        r"if self\.args\.gradient_accumulation_steps % generate_every != 0 or \(\s*"
        r"self\.use_vllm and self\.vllm_importance_sampling_correction\s*\):\s*old_per_token_logps, _, _ =",
        GRPO,
    )
    args = default_config(GRPOConfig)
    assert (args.num_iterations, args.steps_per_generation, args.gradient_accumulation_steps) == (1, 1, 1)


def test_eval_on_start_evaluates_before_the_first_step():
    # page, symptom 5: “用 TRL 时设 eval_on_start=True” — transformers training_args.py:1135 (eval_on_start, default
    # False); trainer.py:1655-1656 evaluates once before the epoch loop when it is set
    assert TrainingArguments.__dataclass_fields__["eval_on_start"].default is False
    assert re.search(r"if args\.eval_on_start:\s*self\._evaluate\(", TRAINER)
