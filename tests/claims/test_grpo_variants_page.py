"""docs/grpo-variants.md: what the page says about TRL's GRPO options and verl's counterparts, checked against the
pinned libraries."""

from __future__ import annotations

from pathlib import Path

import torch
import verl
import verl.trainer.ppo.core_algos as core_algos
from conformance.trl_private import trl_grpo_loss
from omegaconf import OmegaConf
from trl import GRPOConfig, GRPOTrainer
from trl.rewards import get_soft_overlong_punishment
from verl.trainer.config import AlgoConfig, FilterGroupsConfig
from verl.workers.config import ActorConfig

from rlhf_toy import GRPOConfig as BookGRPOConfig

from .pinned import default_config, module_exists, module_source, source

BOOK_LOSS_TYPES = {"grpo", "bnpo", "dr_grpo", "dapo"}
TRL_ONLY_LOSS_TYPES = {"cispo", "sapo", "luspo", "vespo"}  # rlhf_toy.losses has each (tests/conformance)


def test_loss_types_of_trl_grpo():
    # grpo-variants.md: “四种 loss_type（TRL 的 grpo、bnpo、dr_grpo、dapo）”; TRL 1.16 has four more.
    text = source(GRPOTrainer._compute_loss)
    for loss_type in BOOK_LOSS_TYPES | TRL_ONLY_LOSS_TYPES:
        assert f'"{loss_type}"' in text, loss_type
    assert default_config(GRPOConfig).loss_type == "dapo"  # “loss_type="dapo"：… （TRL 今天的默认）”


def test_options_the_book_does_not_implement_and_their_defaults():
    # grpo-variants.md box “本节没有展开的 TRL 选项”: delta, top_entropy_quantile and off_policy_mask_threshold are off by
    # default (“默认 1.0，即全部 token”, “默认 None，不启用”); what delta does is test_trl_delta_is_verl_dual_clip.
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
    # grpo-variants.md: “TRL 1.16.0 在构造 GRPOTrainer 时用日志（logger.warning）提示一次并建议 loss_type="grpo"（cispo 也在
    # 提示之列）”: a log message in __init__, not a Python warning.
    text = source(GRPOTrainer.__init__)
    start = text.index('if args.importance_sampling_level == "sequence" and args.loss_type in')
    assert text[start:].split(":", 1)[1].lstrip().startswith("logger.warning(")
    assert "warnings.warn" not in text[start : start + 600]
    assert (
        'if args.importance_sampling_level == "sequence" and args.loss_type in ["bnpo", "dr_grpo", "dapo", "cispo"]:'
        in text
    )
    assert "set `loss_type='grpo'`" in text


def test_frac_reward_zero_std_metric():
    # grpo-variants.md: “TRL 的同名指标是优势所除的标准差‘接近 0’（torch.isclose(std, 0)）的比例，每步都记录 …
    # "batch" 下它看的是整批的标准差，只能是 0 或 1”.
    text = source(GRPOTrainer._generate_and_score_completions)
    assert "std_rewards = nanstd(rewards).expand_as(rewards)" in text  # "batch": one std for the whole batch
    assert "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))" in text
    assert 'self._metrics[mode]["frac_reward_zero_std"].append(is_std_zero.float().mean().item())' in text


def test_frac_reward_zero_std_depends_on_multi_objective_aggregation():
    # grpo-variants.md: “默认的 "sum_then_normalize" 先加权求和，再减组均值、按 scale_rewards 缩放。取默认时，
    # scale_rewards="group" 或 "none" 下 … 与这里的比例相同 … 取 "normalize_then_sum" 时，TRL 不看 scale_rewards，
    # 总是用整批的标准差，这个指标也只能是 0 或 1”.
    assert default_config(GRPOConfig).multi_objective_aggregation == "sum_then_normalize"
    text = source(GRPOTrainer._generate_and_score_completions)
    start = text.index('if self.multi_objective_aggregation == "sum_then_normalize":')
    middle = text.index('elif self.multi_objective_aggregation == "normalize_then_sum":')
    end = text.index("else:", middle)
    sum_then_normalize, normalize_then_sum = text[start:middle], text[middle:end]
    # Default branch: "group"/"none" take the std within each group; "batch" one std for the whole batch.
    assert 'if self.scale_rewards in ["group", "none"]:' in sum_then_normalize
    assert "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)" in sum_then_normalize
    assert "std_rewards = nanstd(rewards).expand_as(rewards)" in sum_then_normalize
    # "normalize_then_sum": scale_rewards is not read; the std that sets is_std_zero is over the whole batch.
    assert "scale_rewards" not in normalize_then_sum
    assert (
        "std_rewards = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)"
        in normalize_then_sum
    )
    assert "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))" in normalize_then_sum


def test_soft_overlong_punishment_reward_function_location():
    # grpo-variants.md table row 软超长惩罚: “奖励函数 trl.rewards.get_soft_overlong_punishment(max_completion_len,
    # soft_punish_cache)” (values compared in tests/conformance/test_overlong_punishment_trl.py).
    assert get_soft_overlong_punishment(max_completion_len=20, soft_punish_cache=5)(completion_ids=[[0] * 18]) == [-0.6]


def test_gspo_token_is_not_in_trl():
    # grpo-variants.md 常见错误: “TRL 1.16.0 不包含它” and footnote gspo-token: “出处：TRL PR #3820 把 GSPO-token 加进
    # trl.experimental.gspo_token（importance_sampling_level="sequence_token"），PR #7331 提出移除”.
    assert not module_exists("trl.experimental.gspo_token")
    assert "sequence_token" not in source(GRPOTrainer) and "sequence_token" not in source(GRPOConfig)


def test_verl_dual_clip_default():
    # grpo-variants.md: “verl 的负优势一侧总有 dual-clip … （clip_ratio_c=3.0）”; actor/pg_clipfrac_lower is its share.
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert actor.clip_ratio_c == 3.0
    assert '"actor/pg_clipfrac_lower"' in source(core_algos.compute_policy_loss_vanilla)


def test_verl_seq_mean_token_sum_norm_is_a_mean_over_sequences_divided_by_a_constant():
    # grpo-variants.md: “verl 0.9.1 对每条回答求 token 和、在回答间平均，再除以 loss_scale_factor（默认是补齐后的宽度 T）；
    # TRL 除以 B·max_completion_length。训练时平均的分母是训练器传入的 global_batch_size，即小批的回答数，整行掩码为 0 的
    # 回答也算在内，与 TRL 的 B 相同；直接调用 agg_loss 而不传它时，才只数非空的回答。把 actor.loss_scale_factor 设成最大
    # 生成长度 L，两者就一致”.
    loss = torch.arange(15.0).view(3, 5)
    mask = torch.tensor([[1.0, 1, 0, 0, 0], [1, 1, 1, 1, 0], [0, 0, 0, 0, 0]])
    token_sums = (loss * mask).sum(-1)
    assert (
        core_algos.agg_loss(loss, mask, "seq-mean-token-sum-norm") == token_sums.sum() / 2 / 5
    )  # 2 non-empty rows, T=5
    L = 8
    trl_dr_grpo = "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)"
    assert trl_dr_grpo in source(GRPOTrainer._compute_loss)
    no_empty = core_algos.agg_loss(loss[:2], mask[:2], "seq-mean-token-sum-norm", loss_scale_factor=L)
    assert torch.isclose(no_empty, (loss[:2] * mask[:2]).sum() / (2 * L))
    with_empty = core_algos.agg_loss(loss, mask, "seq-mean-token-sum-norm", loss_scale_factor=L)
    assert not torch.isclose(with_empty, (loss * mask).sum() / (3 * L))  # a direct call counts only non-empty rows
    trained = core_algos.agg_loss(loss, mask, "seq-mean-token-sum-norm", global_batch_size=3, loss_scale_factor=L)
    assert torch.isclose(trained, (loss * mask).sum() / (3 * L))  # as in training: TRL's B, the empty row counted
    # In training the trainer passes global_batch_size = ppo_mini_batch_size × rollout.n (every sequence of the
    # mini-batch), and ppo_loss hands it to agg_loss through config.global_batch_info.
    trainer = _verl_v1_source("trainer_base.py")
    assert (
        "ppo_mini_batch_size = ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n" in trainer
        and '"global_batch_size": ppo_mini_batch_size,' in trainer
    )
    ray_trainer = " ".join((Path(verl.__file__).parent / "trainer" / "ppo" / "ray_trainer.py").read_text().split())
    assert "global_batch_size=ppo_mini_batch_size," in ray_trainer
    losses = module_source("verl.workers.utils.losses")
    assert 'config.global_batch_info["global_batch_size"] = data["global_batch_size"]' in losses
    assert "loss_agg_mode=loss_agg_mode, **config.global_batch_info" in source(core_algos.compute_policy_loss_vanilla)
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert (actor.loss_agg_mode, actor.loss_scale_factor) == ("token-mean", None)


def test_verl_gspo_follows_the_aggregation_it_is_given():
    # grpo-variants.md “verl 0.9.1 不强制汇总方式，沿用 actor.loss_agg_mode（默认 token-mean …）；要得到 … 按回答平均，须同时设
    # actor.loss_agg_mode="seq-mean-token-mean"” and “verl 还把 log s_{i,t} 限幅在 10 以下，GSPO 的 actor/pg_clipfrac_lower
    # 恒为 0”; the GSPO-token value and gradient are checked in tests/conformance/test_gspo_verl.py.
    text = source(core_algos.compute_policy_loss_gspo)
    assert "log_seq_importance_ratio = torch.clamp(log_seq_importance_ratio, max=10.0)" in text
    assert "pg_clipfrac_lower = torch.tensor(0.0, device=pg_loss.device)" in text
    assert "loss_agg_mode = config.loss_agg_mode" in module_source("verl.workers.utils.losses")
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert actor.loss_agg_mode == "token-mean"
    old = torch.zeros(2, 4)
    logps = torch.tensor([[0.1, -0.1, 0.0, 0.0], [0.05, 0.0, 0.1, -0.2]])
    advantages = torch.tensor([[1.0] * 4, [-2.0] * 4])
    mask = torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1]])
    by_sequence, _ = core_algos.compute_policy_loss_gspo(old, logps, advantages, mask, "seq-mean-token-mean", actor)
    by_token, _ = core_algos.compute_policy_loss_gspo(old, logps, advantages, mask, "token-mean", actor)
    assert (by_sequence - by_token).abs() > 1e-3


def _verl_v1_source(name: str) -> str:
    # verl.trainer.ppo.v1 imports transfer_queue at package import, which the claim tests do not install: read the file.
    return " ".join((Path(verl.__file__).parent / "trainer" / "ppo" / "v1" / name).read_text(encoding="utf-8").split())


def test_verl_filter_groups_option_exists():
    # grpo-variants.md: “verl 的 algorithm.filter_groups 这样做” and the table row 动态采样
    # “algorithm.filter_groups.enable=True（按 algorithm.filter_groups.metric 判断……ppo_trainer.yaml 里默认 reward，也可取 acc 等
    # 奖励字段，不设 metric 会报错；重采样补齐）”: the shipped trainer YAML sets metric: reward (the dataclass default is None),
    # enable=True with no metric raises, and filtered groups are replaced through refill_fn.
    assert "filter_groups" in AlgoConfig.__dataclass_fields__
    assert (FilterGroupsConfig().enable, FilterGroupsConfig().metric) == (False, None)
    yaml = OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "ppo_trainer.yaml")
    assert (yaml.algorithm.filter_groups.enable, yaml.algorithm.filter_groups.metric) == (False, "reward")
    trainer = _verl_v1_source("trainer_base.py")
    assert 'raise ValueError("algorithm.filter_groups.metric must be set when group filtering is enabled")' in trainer
    buffer = _verl_v1_source("replay_buffer.py")
    assert (
        'raise ValueError("Group filtering (filter_groups_metric) requires refill_fn to replace evicted groups")'
        in buffer
    )


def test_verl_keeps_groups_of_one_when_filtering():
    # grpo-variants.md box: “verl 保留大小为 1 的组”: only groups of more than one with zero std are filtered.
    buffer = _verl_v1_source("replay_buffer.py")
    assert "float(values[0]) if len(values) > 1 and float(np.std(values)) == 0.0 else None" in buffer


def test_verl_and_trl_config_names_in_the_table():
    # grpo-variants.md table rows 组内标准差 “algorithm.norm_adv_by_std_in_grpo=True”, 截断下界 / 上界
    # “actor.clip_ratio_low / clip_ratio_high”, 每批样本更新几次 “actor.ppo_epochs”, 两侧截断比例 “actor/pg_clipfrac（两侧合计）”
    # and 超长回答不进损失 “mask_truncated_completions=True”.
    assert AlgoConfig().norm_adv_by_std_in_grpo is True
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.ppo_epochs) == (0.2, 0.2, 1)
    text = source(core_algos.compute_policy_loss_vanilla)
    # one fraction for both sides: the clipped term is the larger loss, whichever side of [1-ε_low, 1+ε_high] w is on
    assert "pg_clipfrac = verl_F.masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)" in text
    assert '"actor/pg_clipfrac": pg_clipfrac.detach().item(),' in text
    assert default_config(GRPOConfig).mask_truncated_completions is False


def test_trl_delta_is_verl_dual_clip():
    # grpo-variants.md “设 delta=c（INTELLECT-2 所说的 two-sided clipping）就得到同一个 dual-clip：Â < 0 时比率超过 c 的 token
    # 损失封顶为 −Â c、梯度为 0（Â > 0 时，只要 c > 1+ε_high 就不起作用）”. TRL caps coef_1 after coef_2 is computed:
    text = source(GRPOTrainer._compute_loss)
    lines = [
        "coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)",
        "if self.args.delta is not None: coef_1 = torch.clamp(coef_1, max=self.args.delta)",
        "per_token_loss1 = coef_1 * advantages",
        "per_token_loss2 = coef_2 * advantages",
        "per_token_loss = -torch.min(per_token_loss1, per_token_loss2)",
    ]
    assert all(line in text for line in lines) and text.index(lines[0]) < text.index(lines[1])
    c, eps = 3.0, 0.2
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=eps, clip_ratio_c=c)
    ratio = torch.tensor([[0.5, 0.9, 1.1, 1.5, 2.9, 3.1, 5.0]])
    for A in (1.0, -1.0):
        logps = ratio.log().clone().requires_grad_(True)
        advantages = torch.full_like(ratio, A)
        verl_loss, _ = core_algos.compute_policy_loss_vanilla(
            torch.zeros_like(ratio), logps, advantages, torch.ones_like(ratio), "token-sum", actor
        )
        w = logps.exp()  # TRL's lines above, with delta = c
        trl_loss = -torch.min(w.clamp(max=c) * advantages, w.clamp(1 - eps, 1 + eps) * advantages).sum()
        assert torch.allclose(verl_loss, trl_loss)
        assert torch.allclose(*(torch.autograd.grad(x, logps, retain_graph=True)[0] for x in (verl_loss, trl_loss)))


def test_verl_overlong_buffer_config_keys():
    # grpo-variants.md table row 软超长惩罚, verl column: “reward.reward_manager.name=dapo，reward.reward_kwargs.overlong_buffer_cfg.
    # {enable,len,penalty_factor} 与 reward.reward_kwargs.max_resp_len（… verl 0.9.1 把 reward_model.reward_kwargs 迁移到
    # reward.reward_kwargs）” and “软超长惩罚在 verl 里没有下限”; also the docstring of rlhf_toy.estimators.overlong.soft_overlong_punishment,
    # shown on the page: “verl 0.9.1 的 reward.reward_kwargs.overlong_buffer_cfg（len = L_cache，penalty_factor = 1，另设
    # reward.reward_kwargs.max_resp_len = L_max；旧配方写作 reward_model.overlong_buffer）”.
    # verl.experimental.reward_loop imports aiohttp at package import, which the claim tests do not install: read the files.
    reward_loop = Path(verl.__file__).parent / "experimental" / "reward_loop"
    dapo = (reward_loop / "reward_manager" / "dapo.py").read_text(encoding="utf-8")
    assert '@register("dapo")' in dapo
    assert 'overlong_buffer_cfg = config.reward.get("reward_kwargs", {}).get("overlong_buffer_cfg", None)' in dapo
    assert 'self.max_resp_len = config.reward.get("reward_kwargs", {}).get("max_resp_len", None)' in dapo
    assert "overlong_penalty_factor = self.overlong_buffer_cfg.penalty_factor" in dapo
    assert "overlong_reward = min(-exceed_len / overlong_buffer_len * overlong_penalty_factor, 0)" in dapo
    migration = (reward_loop / "reward_loop.py").read_text(encoding="utf-8")
    assert 'config.reward["reward_kwargs"] = config.reward_model["reward_kwargs"]' in migration


def test_newer_trl_options_and_what_they_do():
    # grpo-variants.md box “本节没有展开的 TRL 选项”: TRL 1.16.0's GRPOConfig has them; one sentence each. The cispo / sapo /
    # luspo / vespo sentences quoted below moved to ratio-shaping.md (CISPO, SAPO, LUSPO, VESPO subsections of 公式).
    fields = GRPOConfig.__dataclass_fields__
    for name in ("delta", "top_entropy_quantile", "off_policy_mask_threshold", "sapo_temperature_pos"):
        assert name in fields, name
    assert "sapo_temperature_neg" in fields and "vespo_k_pos" in fields
    text = source(GRPOTrainer._compute_loss)
    # ratio-shaping.md, cispo: “把比率截断后当作常数，乘在对数概率上 … TRL 的 cispo 按整个生成批次归一（同 dapo）”
    assert "clamped_ratios = torch.clamp(coef_1, max=self.epsilon_high).detach()" in text
    # “epsilon_high 就是比率的上限 ε_max（不是 1+ε_high）… 文档建议设 5.0。不设时 TRL 沿用 epsilon=0.2，每个权重都被封顶在 0.2”
    assert "When used with `loss_type='cispo'`, this corresponds to the ε_max param" in " ".join(
        GRPOConfig.__doc__.split()
    )
    assert "the recommended value is `5.0`" in " ".join(GRPOConfig.__doc__.split())
    assert "self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon" in source(
        GRPOTrainer.__init__
    )
    assert default_config(GRPOConfig).epsilon == 0.2
    assert "per_token_loss = -clamped_ratios * advantages * per_token_logps" in text
    assert 'elif self.loss_type in ["cispo", "dapo", "vespo"]:' in text
    # ratio-shaping.md, sapo: “(4/τ) sigmoid(τ(w−1)) … τ_pos（Â > 0）、τ_neg … 汇总都是先回答内平均、再回答间平均”
    assert "soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures" in text
    assert 'if self.loss_type in ["grpo", "sapo"]:' in text
    # ratio-shaping.md, luspo: “把每条回答的损失乘回它的长度 … 取默认的 "token" 也能跑，只在日志里提示一次”
    assert "loss = (per_token_loss * mask).sum(-1).mean()" in text
    assert 'if args.loss_type == "luspo" and args.importance_sampling_level != "sequence":' in source(
        GRPOTrainer.__init__
    )
    # ratio-shaping.md, vespo: “整条回答的概率比 W_i（不开方），经一个 Gamma 形的核整形，再乘在 log π_θ 上 … φ(1) = 1”
    gamma = source(GRPOTrainer.get_gamma_weights)
    assert "seq_log_ratio = torch.sum(log_ratio_clamped * mask, dim=-1, keepdim=True)" in gamma
    assert "log_phi = lambda_seq + k_seq * log_w_seq - lambda_seq * w_seq" in gamma
    assert "@torch.no_grad()" in source(GRPOTrainer).split("def get_gamma_weights")[0][-200:]
    assert "per_token_loss = -phi_seq * advantages * per_token_logps" in text
    # top_entropy_quantile: “只让熵排在前 ρ 分位的 token 进入策略损失”
    assert "entropy_mask = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)" in text
    assert "per_token_loss = per_token_loss * entropy_mask" in text
    # off_policy_mask_threshold: “优势为负、且 … 平均每 token 对数概率差 … 超过阈值的回答，整条移出策略项”
    mask_source = source(GRPOTrainer.get_off_policy_mask)
    assert "kl_div = sampling_per_token_logps - per_token_logps.detach()" in mask_source
    assert "return (is_pos_adv | is_low_kl).to(dtype=mask.dtype) # (B, 1)" in mask_source
    assert "per_token_loss = per_token_loss * off_policy_mask" in text


def test_book_updates_each_batch_twice_trl_once():
    # grpo-variants.md 什么时候用哪个开关, epsilon_high: “比率恒为 1 时它不起作用，TRL 的默认配置（一批生成一个优化步，
    # num_iterations=1）正是这样 … 本书的 GRPOConfig 默认 num_iterations=2，第 2 次内循环里比率不再是 1”; the clip-higher
    # bandit runs and the dynamic-sampling controls (“其余沿用本书 GRPOConfig 的默认：num_iterations=2 … epsilon=0.2、
    # loss_type="grpo"”); 常见错误 “本书的 train_grpo 设 num_iterations=1 时如此（它的默认是 2）”.
    book = BookGRPOConfig()
    assert (book.num_iterations, book.epsilon, book.epsilon_high, book.loss_type) == (2, 0.2, None, "grpo")
    args = default_config(GRPOConfig)
    assert (args.num_iterations, args.steps_per_generation) == (1, args.gradient_accumulation_steps)


def test_trl_masks_that_leave_tokens_in_the_denominator():
    # grpo-variants.md box “本节没有展开的 TRL 选项”, top_entropy_quantile: “TRL 把这个掩码乘在逐 token 损失上，没有乘在 mask
    # 上。所以被排除的 token 仍计入 dapo、grpo 等汇总的分母 … mask_truncated_completions 则不同，它把被截停的回答从分子和分母
    # 里一起去掉”; off_policy_mask_threshold: “它与 top_entropy_quantile 一样乘在逐 token 损失上”; 公式 “分母数的是回答掩码里
    # 的 token；TRL 有两个选项只把 token 从分子里去掉”.
    text = source(GRPOTrainer._compute_loss)
    assert 'mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]' in text
    assert "per_token_loss = per_token_loss * off_policy_mask" in text
    assert "per_token_loss = per_token_loss * entropy_mask" in text
    assert "mask = mask * entropy_mask" not in text and "mask = mask * off_policy_mask" not in text
    # the denominators: mask for grpo/sapo and bnpo, num_items_in_batch for cispo/dapo/vespo
    assert "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()" in text
    assert "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)" in text
    assert 'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes' in text
    generate = source(GRPOTrainer._generate_and_score_completions)
    truncate = generate.index("if self.mask_truncated_completions:")
    count = generate.index("num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()")
    assert truncate < count
    assert "completion_mask = completion_mask * (~is_truncated).unsqueeze(1).int()" in generate[truncate:count]
    assert (
        "loss_mask = completion_mask if tool_mask is None else completion_mask * tool_mask" in generate[truncate:count]
    )
    assert "entropy" not in generate[truncate:count] and "off_policy" not in generate[truncate:count]


def test_mask_truncated_completions_leaves_the_row_in_b_for_grpo_sapo_dr_grpo():
    # grpo-variants.md box “本节没有展开的 TRL 选项”: “mask_truncated_completions 把被截停的回答的掩码置 0。在按 token 数归一的
    # bnpo、dapo、cispo 里，它从分子和分母里一起消失；在 grpo、sapo、dr_grpo 里，它仍占着 B 中的一个名额，只是贡献 0”; 公式
    # “把整条回答的掩码置 0 时，bnpo、dapo 的分母随之变小，grpo、dr_grpo 的 B 却不变”. TRL's own _compute_loss on three
    # completions with Â = +1, the third one truncated (its completion_mask row zeroed before num_items_in_batch is
    # counted, see test_trl_masks_that_leave_tokens_in_the_denominator); the number is the gradient on the first token.
    full = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    truncated = full.clone()
    truncated[2] = 0.0

    def first_token_grad(loss_type, mask):
        logps = torch.zeros(mask.shape[0], 3, requires_grad=True)
        loss, _ = trl_grpo_loss(
            logps,
            mask,
            torch.ones(mask.shape[0]),
            loss_type=loss_type,
            beta=0.0,
            epsilon_high=5.0,
            max_completion_length=3,
        )
        (grad,) = torch.autograd.grad(loss, logps)
        return grad[0, 0].item()

    for loss_type in ("grpo", "sapo", "dr_grpo", "luspo"):  # the row still counts in B: the gradient does not change
        kept, masked, removed = (first_token_grad(loss_type, m) for m in (full, truncated, full[:2]))
        assert masked == kept != removed, loss_type
        assert abs(removed / masked - 1.5) < 1e-6, loss_type  # B = 3 instead of 2
    for loss_type in ("bnpo", "dapo", "cispo"):  # token-count normalisers: the row leaves the denominator too
        kept, masked, removed = (first_token_grad(loss_type, m) for m in (full, truncated, full[:2]))
        assert masked == removed != kept, loss_type
        assert abs(masked - (-1 / 5)) < 1e-6 and abs(kept - (-1 / 8)) < 1e-6, loss_type
    assert abs(first_token_grad("grpo", truncated) - (-1 / 6)) < 1e-6  # 1 / (B·|y_1|) with B = 3, |y_1| = 2
    assert abs(first_token_grad("dr_grpo", truncated) - (-1 / 9)) < 1e-6  # 1 / (B·L) with B = 3, L = 3
    # vespo shares dapo's normaliser (source: test_dapo_and_token_mean_normalise_by_the_tokens_of_one_optimizer_step).


def test_off_policy_mask_removes_only_the_policy_term_not_the_kl_term():
    # grpo-variants.md box “本节没有展开的 TRL 选项”, off_policy_mask_threshold: “整条移出策略项（β > 0 时它的 KL 项仍在）”.
    text = source(GRPOTrainer._compute_loss)
    masked = text.index("per_token_loss = per_token_loss * off_policy_mask")
    entropy = text.index("per_token_loss = per_token_loss * entropy_mask")
    kl = text.index("per_token_loss = per_token_loss + self.beta * per_token_kl")
    assert masked < kl and entropy < kl


def test_dapo_drops_the_kl_term_trl_default_beta_is_zero():
    # grpo-variants.md, 直觉 “DAPO 还去掉了 KL 惩罚，即 β = 0，TRL 1.16.0 的 GRPOConfig 默认也是 beta=0.0。本书的
    # GRPOConfig 默认 β = 0.04” (and the bandit runs “沿用本书默认的 β = 0.04”).
    assert default_config(GRPOConfig).beta == 0.0
    assert BookGRPOConfig().beta == 0.04


def test_dapo_and_token_mean_normalise_by_the_tokens_of_one_optimizer_step():
    # grpo-variants.md, 直觉: “TRL 的 dapo 与 verl 的 token-mean（DAPO 开源配方所用）不分组，把一个优化步的全部 token 放在一起
    # 归一” (the DAPO paper's own objective divides by the tokens of one prompt's G completions; TRL and verl do not).
    # 公式: “bnpo 只数当前这一小批 … dapo 数的是整个生成批次 … 的 token。TRL 默认一批生成正好用一个优化步 … 一批生成分 n_step 个
    # 优化步用完时，dapo 每步的分母是整批 token 数的 1/n_step” and footnote dapo-normaliser. Table rows “按 token 平均（本小批）”
    # (verl: “—（verl 训练时总是传入全局 token 数）”) and “按 token 平均（一个优化步的全部 token）” (verl: “分母是一个 PPO 小批
    # （ppo_mini_batch_size × rollout.n 条回答，所有数据并行进程）的 token 数”).
    text = source(GRPOTrainer._compute_loss)
    assert 'elif self.loss_type in ["cispo", "dapo", "vespo"]:' in text
    assert 'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes' in text
    assert "loss = (per_token_loss * mask).sum() / normalizer" in text
    # A generation batch used over n_step = steps_per_generation / gradient_accumulation_steps optimizer steps: each step
    # divides by 1/n_step of the whole batch's tokens (an average), and the trainer does not divide by GA again.
    assert "normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation" in text
    assert GRPOTrainer.loss_is_scaled_for_ga is True
    args = default_config(GRPOConfig)
    assert args.steps_per_generation == args.gradient_accumulation_steps
    # verl.workers.engine.fsdp imports peft at package import, which the claim tests do not install: read the file.
    engine_file = Path(verl.__file__).parent / "workers" / "engine" / "fsdp" / "transformer_impl.py"
    engine = " ".join(engine_file.read_text(encoding="utf-8").split())
    assert 'batch_num_tokens = data["loss_mask"].sum().to(get_device_id())' in engine
    assert "tu.assign_non_tensor(data, batch_num_tokens=batch_num_tokens.item())" in engine
    agg = source(core_algos.agg_loss)
    assert "loss = verl_F.masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size" in agg
    # Without the global token count, token-mean only works on one data-parallel rank: bnpo has no training-time twin.
    assert 'raise ValueError("(global) batch_num_tokens is required when dp_size > 1")' in agg
    loss_mat, loss_mask = torch.ones(2, 3), torch.ones(2, 3)
    try:
        core_algos.agg_loss(loss_mat, loss_mask, "token-mean", dp_size=2)
    except ValueError as error:
        assert "batch_num_tokens is required" in str(error)
    else:
        raise AssertionError("agg_loss accepted dp_size=2 without batch_num_tokens")
    # The engine is handed one PPO mini-batch at a time: the trainer sets mini_batch_size = ppo_mini_batch_size × n,
    # and train_mini_batch splits the rollout batch into such mini-batches, calling train_batch (one optimizer step) on each.
    verl_dir = Path(verl.__file__).parent
    trainer = " ".join((verl_dir / "trainer" / "ppo" / "ray_trainer.py").read_text(encoding="utf-8").split())
    assert "ppo_mini_batch_size = ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n" in trainer
    assert "mini_batch_size=ppo_mini_batch_size," in trainer
    workers = " ".join((verl_dir / "workers" / "engine_workers.py").read_text(encoding="utf-8").split())
    mini = workers.split("def train_mini_batch(", 1)[1].split("def train_batch(", 1)[0]
    assert "mini_batch_size_per_gpu = mini_batch_size // self.engine.get_data_parallel_size()" in mini
    assert "for batch_idx, mini_batch_td in enumerate(dataloader):" in mini
    assert "actor_output = self.train_batch(mini_batch_td)" in mini
    # Two groups of total length 2 and 6: TRL's dapo weighs every token of the batch the same (1/8), where the paper
    # would give 1/2 per group, i.e. 1/4 and 1/12 per token.
    mask = torch.tensor([[1.0, 0, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]])
    logps = torch.zeros(4, 3, requires_grad=True)
    loss, _ = trl_grpo_loss(logps, mask, torch.ones(4), loss_type="dapo", beta=0.0)
    (grad,) = torch.autograd.grad(loss, logps)
    assert torch.allclose(grad[mask.bool()], torch.full((8,), -1 / 8))
