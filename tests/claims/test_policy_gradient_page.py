"""docs/policy-gradient.md: what the page says about TRL's RLOOTrainer, checked against the pinned TRL."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
from trl import GRPOTrainer, RLOOConfig, RLOOTrainer

from .pinned import (
    assert_refuses_cpu_only_machine_without_use_cpu,
    config,
    default_config,
    module_source,
    source,
    trainer_mixed_precision,
)


def test_rloo_config_defaults():
    # policy-gradient.md: “β 是 KL 系数（beta，TRL 默认 0.05）”, “β 取 TRL RLOOConfig 的默认 0.05；G = 4 是本书的默认
    # （TRL 默认 num_generations=2）”, and the table row “TRL num_generations=2”.
    args = default_config(RLOOConfig)
    assert (args.beta, args.num_generations) == (0.05, 2)
    assert args.learning_rate == 1e-6  # table row 优化: “学习率 10^-6 量级”


def test_rloo_config_inherits_decay_clipping_bf16_and_checkpointing():
    # policy-gradient.md table row 优化: “学习率 10^-6，线性衰减到 0；梯度范数上限 1.0（`max_grad_norm`，全局范数超过就按比例缩小）；bf16
    # 混合精度”; the fold
    # “深入：TRL、verl、OpenRLHF 的细节”: “TRL 还默认打开梯度检查点”, “设了之后仍按 bf16 自动混合精度跑”, and “TRL 默认开着
    # bf16 混合精度，这个误差是 bf16 的”.
    args = config(RLOOConfig)
    assert args.lr_scheduler_type == "linear" and args.max_grad_norm == 1.0
    assert args.bf16 is True and args.gradient_checkpointing is True
    assert trainer_mixed_precision(args) == "bf16"  # use_cpu=True, and still bf16 autocast


def test_rloo_default_config_refuses_a_cpu_only_machine_without_use_cpu():
    # policy-gradient.md fold “深入：TRL、verl、OpenRLHF 的细节”: “只有 CPU 的机器上，默认配置不设 use_cpu=True 就报错；
    # 设了之后仍按 bf16 自动混合精度跑”.
    assert_refuses_cpu_only_machine_without_use_cpu(RLOOConfig)


def test_rloo_config_refuses_one_generation():
    # policy-gradient.md fold “深入：TRL、verl、OpenRLHF 的细节”: “组内只有 1 个回答时 … TRL 的 RLOOConfig 直接拒绝
    # num_generations < 2 … 只有评估时 num_generations_eval=1 才会走到 G = 1，那时 TRL 把优势置 0”.
    with pytest.raises(ValueError, match="RLOO requires at least 2 generations per prompt"):
        config(RLOOConfig, num_generations=1)
    text = source(RLOOTrainer)
    assert "doesn't occur during training, but could occur in eval when num_generations_eval=1" in text
    assert (
        "else: # this case doesn't occur during training, but could in eval when num_generations_eval=1 "
        "advantages = torch.zeros_like(rewards)" in text
    )


def test_rloo_kl_goes_into_the_sequence_reward():
    # policy-gradient.md: “TRL RLOOTrainer … 把 KL 惩罚并进序列奖励，再对并进去的奖励做留一法”; table row KL 惩罚:
    # “式 (pg-kl-reward)，beta=0.05，k_1 按序列求和” (k_1 on π_old, summed over the completion, before the baseline).
    text = source(RLOOTrainer)
    assert "per_token_kl = old_per_token_logps - ref_per_token_logps" in text
    assert "kl = (per_token_kl * completion_mask).sum(-1)" in text
    assert "rewards = rewards - self.beta * kl" in text
    assert text.index("rewards = rewards - self.beta * kl") < text.index("baselines = (grouped_sum - grouped_rewards)")


def test_rloo_loss_uses_the_whole_answer_ratio():
    # policy-gradient.md table row 损失: “TRL：整条回答的比率 w_i = exp(Σ_t m log π_θ − Σ_t m log π_old)（不开 |y_i|
    # 次方，与第 6 章 GSPO 的序列级比率 s_i 不同），按 ε 截断”.
    text = source(RLOOTrainer)
    assert "logps = (per_token_logps * completion_mask).sum(1)" in text
    assert "log_ratio = logps - old_logps" in text
    # no length normalisation between the log-ratio and its exp
    between = text[text.index("log_ratio = logps - old_logps") : text.index("coef_1 = torch.exp(log_ratio)")]
    assert "log_ratio =" not in between[len("log_ratio =") :] and "completion_mask.sum" not in between
    assert "coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)" in text
    # “−min(w_i Â_i, clip(w_i) Â_i) 的批平均”
    assert (
        "per_sequence_loss = -torch.min(per_sequence_loss1, per_sequence_loss2) loss = per_sequence_loss.mean()" in text
    )


def test_rloo_logged_kl_is_a_token_mean():
    # policy-gradient.md: the book's kl is a per-sequence sum; TRL RLOOTrainer logs a token mean of the KL.
    assert (
        'torch.stack([(per_token_kl * completion_mask).sum(), completion_mask.sum().float()]), reduction="sum" ) '
        'self._metrics[mode]["kl"].append((kl_stats[0] / kl_stats[1].clamp(min=1.0)).item())' in source(RLOOTrainer)
    )


def test_rloo_baseline_is_the_explicit_leave_one_out_form():
    # advantages.py rloo_advantages docstring (shown on the page): “TRL RLOOTrainer 用左边的形式（逐个减去其余回答的
    # 平均），并把所有奖励函数都返回 None 的回答排除在基线之外（分母是可打分回答数 − 1）”; policy-gradient.md table row
    # 留一法的写法 “左边的形式”, and the fold “深入：TRL、verl、OpenRLHF 的细节”: “所有奖励函数都返回 None 的回答不进基线，
    # 分母是可打分回答数 − 1”.
    text = source(RLOOTrainer)
    assert "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)" in text
    assert "rewards[unscorable_mask] = torch.nan" in text
    assert "scorable_counts = (~torch.isnan(grouped_rewards)).sum(dim=1, keepdim=True)" in text
    assert "grouped_sum = torch.nansum(grouped_rewards, dim=1, keepdim=True)" in text
    assert "baselines = (grouped_sum - grouped_rewards) / (scorable_counts - 1)" in text
    assert "advantages = rewards - baselines" in text


def test_verl_rloo_is_the_k_over_k_minus_1_form_and_a_group_of_one_keeps_r():
    # advantages.py docstring: “代码用右边的形式，与 verl compute_rloo_outcome_advantage 相同”; page: “verl 对单个回答的
    # 组返回 r_i” (id2mean = 0 and no rescaling when response_num == 1).
    text = module_source("verl.trainer.ppo.core_algos")
    assert (
        "scores[i] = scores[i] * response_num / (response_num - 1) - id2mean[index[i]] * response_num / "
        "( response_num - 1 )" in text
    )
    assert "if len(id2score[idx]) == 1: id2mean[idx] = torch.tensor(0.0)" in text
    assert "if response_num > 1: scores[i] = scores[i] * response_num" in text


def test_verl_puts_kl_in_the_reward_only_when_asked():
    # policy-gradient.md fold “深入：TRL、verl、OpenRLHF 的细节”: “verl 在 algorithm.use_kl_in_reward=True（默认 False）时
    # 先把逐 token 的 −β·KL 并进 token_level_rewards。compute_rloo_outcome_advantage 再对它求和做留一法，与 TRL 相同”.
    from verl.trainer.config.algorithm import AlgoConfig

    assert AlgoConfig().use_kl_in_reward is False
    # the sum is inside compute_rloo_outcome_advantage itself (the same line occurs in other estimators too)
    core = module_source("verl.trainer.ppo.core_algos")
    start = core.index("def compute_rloo_outcome_advantage(")
    rloo = core[start : core.index(" def ", start + 1)]
    assert "scores = token_level_rewards.sum(dim=-1)" in rloo
    # “只在 use_kl_in_reward=True 时”: otherwise the scores are copied unchanged; the penalty comes before the advantage
    trainer = module_source("verl.trainer.ppo.ray_trainer")
    assert "token_level_rewards = token_level_scores - beta * kld" in trainer
    guard = "if self.config.algorithm.use_kl_in_reward: batch, kl_metrics = apply_kl_penalty("
    assert guard in trainer
    assert 'else: batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]' in trainer
    assert trainer.index(guard) < trainer.index("batch = compute_advantage(")


def test_dr_grpo_advantage_is_the_own_mean_in_trl_and_verl():
    # policy-gradient.md box “玩具与论文、TRL 的不同”: “含自己的组内平均就是 Dr. GRPO 的优势（…；TRL scale_rewards="none"，
    # verl norm_adv_by_std_in_grpo=False）”.
    text = source(GRPOTrainer)
    assert "advantages = rewards - mean_grouped_rewards" in text
    assert 'if self.scale_rewards != "none":' in text
    assert "else: scores[i] = scores[i] - id2mean[index[i]]" in module_source("verl.trainer.ppo.core_algos")


def test_rloo_normalize_advantages_centres_and_scales():
    # policy-gradient.md table row 优势再标准化: “normalize_advantages=False（可选：在整个生成批上减均值、除以标准差）”.
    assert default_config(RLOOConfig).normalize_advantages is False
    assert "advantages = (advantages - torch.nanmean(advantages)) / (nanstd(advantages) + 1e-4)" in source(RLOOTrainer)


def test_rloo_one_update_per_generation_batch_by_default():
    # policy-gradient.md box “玩具与论文、TRL 的不同”: “每批只更新一次时（TRL 的默认），TRL 的截断损失与式 (pg-loss) 的
    # 梯度相同”; the fold “深入：TRL、verl、OpenRLHF 的细节”: “这要求 num_iterations=1 且 steps_per_generation 等于
    # gradient_accumulation_steps（TRL 的默认）”, “TRL 总是另做一次不求梯度的前向算 log π_old”; with a larger
    # steps_per_generation one generation batch feeds several optimizer steps.
    args = default_config(RLOOConfig)
    assert args.num_iterations == 1
    assert args.steps_per_generation == args.gradient_accumulation_steps
    text = source(RLOOTrainer)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in text
    assert "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]" in text
    assert "old_logps = (old_per_token_logps * completion_mask).sum(1)" in text
    # “总是”: the no-grad forward for old_per_token_logps is not under any `if` in _generate_and_score_completions.
    tree = ast.parse(textwrap.dedent(inspect.getsource(RLOOTrainer._generate_and_score_completions)))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    (assign,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Tuple)
        and getattr(node.targets[0].elts[0], "id", None) == "old_per_token_logps"
    ]
    node = assign
    while node in parents:
        node = parents[node]
        assert not isinstance(node, ast.If), "the old_logps forward is conditional"


def test_rloo_old_logps_forward_keeps_dropout_by_default():
    # policy-gradient.md fold “深入：TRL、verl、OpenRLHF 的细节”: “还要求模型没有 dropout，或设了 disable_dropout=True
    # （TRL 默认 False）”; “模型有 dropout 时 … 这次不求梯度的前向也在训练模式下运行，两次前向的 dropout 掩码不同”.
    assert default_config(RLOOConfig).disable_dropout is False
    assert "if args.disable_dropout: disable_dropout_in_model(model)" in source(RLOOTrainer)
    # the old_logps forward runs inside _prepare_inputs' train branch (mode = "train" iff self.model.training); TRL
    # does not switch the model to eval mode for it.
    prepare = source(RLOOTrainer._prepare_inputs)
    assert 'mode = "train" if self.model.training else "eval"' in prepare
    assert "generation_batch = self._generate_and_score_completions(generation_batch)" in prepare
    assert ".eval()" not in source(RLOOTrainer._generate_and_score_completions)
    # nothing in RLOOTrainer or in the generation context manager switches to eval mode …
    from trl.models import utils as trl_model_utils

    assert ".eval()" not in source(RLOOTrainer)
    assert ".eval()" not in source(trl_model_utils.unwrap_model_for_generation)
    assert ".eval()" not in source(trl_model_utils._unwrap_model_for_generation)
    # … and transformers' Trainer.training_step puts the model in train mode before _prepare_inputs
    from transformers import Trainer

    step = source(Trainer.training_step)
    assert step.index("model.train()") < step.index("inputs = self._prepare_inputs(inputs)")
