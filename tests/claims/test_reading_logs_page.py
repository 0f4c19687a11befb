"""docs/reading-logs.md: what TRL 1.16's GRPOTrainer logs, under which names, computed where.

Line numbers are those of the pinned trl 1.16.0 `trl/trainer/grpo_trainer.py`.
"""

from __future__ import annotations

import re
from pathlib import Path

import trl.trainer.grpo_trainer

GRPO = Path(trl.trainer.grpo_trainer.__file__).read_text(encoding="utf-8")


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
