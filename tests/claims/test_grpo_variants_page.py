"""docs/grpo-variants.md: what the page says about TRL's GRPO options and verl's counterparts, checked against the
pinned libraries."""

from __future__ import annotations

import torch
import verl.trainer.ppo.core_algos as core_algos
from trl import GRPOConfig, GRPOTrainer
from trl.rewards import get_soft_overlong_punishment
from verl.trainer.config import AlgoConfig
from verl.workers.config import ActorConfig

from .pinned import default_config, module_exists, source

BOOK_LOSS_TYPES = {"grpo", "bnpo", "dr_grpo", "dapo"}
TRL_ONLY_LOSS_TYPES = {"cispo", "sapo", "luspo", "vespo"}  # TRL 1.16 loss types rlhf_toy does not implement


def test_loss_types_of_trl_grpo():
    # grpo-variants.md: “四种 loss_type（TRL 的 grpo、bnpo、dr_grpo、dapo）”; TRL 1.16 has four more.
    text = source(GRPOTrainer._compute_loss)
    for loss_type in BOOK_LOSS_TYPES | TRL_ONLY_LOSS_TYPES:
        assert f'"{loss_type}"' in text, loss_type
    assert default_config(GRPOConfig).loss_type == "dapo"  # “loss_type="dapo"：… （TRL 今天的默认）”


def test_options_the_book_does_not_implement_and_their_defaults():
    # grpo-variants.md “TRL 的 delta 是另一种两侧截断”; the TRL options outside the book's scope are off by default.
    args = default_config(GRPOConfig)
    assert (args.delta, args.top_entropy_quantile, args.off_policy_mask_threshold) == (None, 1.0, None)
    assert "coef_1 = torch.clamp(coef_1, max=self.args.delta)" in source(GRPOTrainer._compute_loss)


def test_clip_higher_names_and_metrics():
    # grpo-variants.md: “ε_low 是 TRL 的 epsilon，ε_high 是 epsilon_high（不设时等于 epsilon）” and “TRL 另外记录两侧各自的比例”.
    args = default_config(GRPOConfig)
    assert (args.epsilon, args.epsilon_high) == (0.2, None)
    text = source(GRPOTrainer._compute_loss)
    assert "is_low_clipped = (coef_1 < 1 - self.epsilon_low) & (advantages < 0)" in text
    assert "is_high_clipped = (coef_1 > 1 + self.epsilon_high) & (advantages > 0)" in text


def test_trl_warns_on_sequence_level_with_token_summed_loss():
    # grpo-variants.md: “TRL 在这种组合下发出警告并建议 loss_type="grpo"”.
    text = source(GRPOTrainer.__init__)
    assert (
        'if args.importance_sampling_level == "sequence" and args.loss_type in ["bnpo", "dr_grpo", "dapo", "cispo"]:'
        in text
    )
    assert "set `loss_type='grpo'`" in text


def test_frac_reward_zero_std_metric():
    # grpo-variants.md: “frac_reward_zero_std 是被丢掉的组的比例（TRL 的同名指标）”.
    assert 'self._metrics[mode]["frac_reward_zero_std"]' in source(GRPOTrainer)


def test_soft_overlong_punishment_reward_function_location():
    # grpo-variants.md table row 软超长惩罚: “奖励函数 trl.rewards.get_soft_overlong_punishment(max_completion_len,
    # soft_punish_cache)” (values compared in tests/conformance/test_overlong_punishment_trl.py).
    assert get_soft_overlong_punishment(max_completion_len=20, soft_punish_cache=5)(completion_ids=[[0] * 18]) == [-0.6]


def test_gspo_token_is_not_in_trl():
    # grpo-variants.md: “GSPO-token（TRL trl/experimental/gspo_token），本书没有实现”: TRL 1.16 has no such module.
    assert not module_exists("trl.experimental.gspo_token")


def test_verl_dual_clip_default():
    # grpo-variants.md: “verl 的负优势一侧总有 dual-clip … （clip_ratio_c=3.0）”; actor/pg_clipfrac_lower is its share.
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert actor.clip_ratio_c == 3.0
    assert '"actor/pg_clipfrac_lower"' in source(core_algos.compute_policy_loss_vanilla)


def test_verl_seq_mean_token_sum_norm_divides_by_the_padded_width():
    # grpo-variants.md: verl's seq-mean-token-sum-norm divides by loss_scale_factor, “默认是补齐后的宽度 T”.
    loss, mask = torch.ones(2, 5), torch.tensor([[1.0, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    assert core_algos.agg_loss(loss, mask, "seq-mean-token-sum-norm") == (2 + 4) / 2 / 5


def test_verl_gspo_follows_the_aggregation_it_is_given():
    # grpo-variants.md “verl 的 GSPO 是 GSPO-token 写法 … 并强制按回答平均”: the value and gradient form is checked
    # in tests/conformance/test_gspo_verl.py; the aggregation is not forced — seq-mean-token-mean is only the default.
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    old = torch.zeros(2, 4)
    logps = torch.tensor([[0.1, -0.1, 0.0, 0.0], [0.05, 0.0, 0.1, -0.2]])
    advantages = torch.tensor([[1.0] * 4, [-2.0] * 4])
    mask = torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1]])
    by_sequence, _ = core_algos.compute_policy_loss_gspo(old, logps, advantages, mask, "seq-mean-token-mean", actor)
    by_token, _ = core_algos.compute_policy_loss_gspo(old, logps, advantages, mask, "token-mean", actor)
    assert (by_sequence - by_token).abs() > 1e-3


def test_verl_filter_groups_option_exists():
    # grpo-variants.md: “verl 的 algorithm.filter_groups 这样做”.
    assert "filter_groups" in AlgoConfig.__dataclass_fields__
