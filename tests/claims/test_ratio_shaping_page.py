"""docs/ratio-shaping.md: what the page says about TRL's cispo / sapo and verl's cispo, sapo, geo_mean and dppo
policy losses (conventions, names and defaults), checked against the pinned libraries.

Value and gradient agreement of every loss is in tests/conformance/ (one file per function); which policy losses verl
registers and that each runs is tests/conformance/test_policy_loss_registry_verl.py.
"""

from __future__ import annotations

import inspect
import math

import torch
import verl.trainer.ppo.core_algos as core_algos
from conformance.trl_private import trl_grpo_loss
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.gmpo import GMPOConfig
from verl.workers.config import ActorConfig, PolicyLossConfig

from .pinned import default_config, source


def default_actor():
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)


def test_sapo_gradient_is_the_unclipped_gradient_times_a_gate():
    # ratio-shaping.md, SAPO, eq. rs-sapo-grad: “梯度系数是 4σ(1−σ)w … w = 1 时 ψ = 1，与 GRPO 相同 … 它乘的是 w，所以 w 略大于 1
    # 时 ψ 先上升，远大于 1 时才衰减到 0 … τ 越大衰减越快”; the defaults “τ_pos = 1.0、τ_neg = 1.05”. TRL's own
    # _compute_loss (trl/trainer/grpo_trainer.py:3122-3123), differentiated by autograd, on off-policy tokens.
    args = default_config(GRPOConfig)
    assert (args.sapo_temperature_pos, args.sapo_temperature_neg) == (1.0, 1.05)
    w = torch.tensor([[0.5, 1.0, 1.2, 2.0, 3.0, 5.0]], dtype=torch.float64)
    for A, tau in ((1.0, args.sapo_temperature_pos), (-1.0, args.sapo_temperature_neg)):
        logps = w.log().clone().requires_grad_(True)
        loss, _ = trl_grpo_loss(
            logps,
            torch.ones_like(w),
            torch.tensor([A], dtype=torch.float64),
            torch.zeros_like(w),
            loss_type="sapo",
            beta=0.0,
        )
        (grad,) = torch.autograd.grad(loss, logps)
        coefficient = (-grad * w.shape[1] / A)[0]  # the factor on Â ∇log π_θ ("grpo" averages over the 6 tokens)
        sigma = torch.sigmoid(tau * (w[0] - 1))
        torch.testing.assert_close(coefficient, 4 * sigma * (1 - sigma) * w[0])
        on_policy, at_two, far = coefficient[1], coefficient[3], coefficient[5]
        assert torch.isclose(on_policy, torch.tensor(1.0, dtype=torch.float64))
        assert at_two > 1.5 * on_policy and far < 0.5 * on_policy
    assert (  # a larger τ decays faster: the gate at w = 3 for τ = 2 is below the one for τ = 1
        4 * torch.sigmoid(torch.tensor(4.0)) * (1 - torch.sigmoid(torch.tensor(4.0)))
        < 4 * torch.sigmoid(torch.tensor(2.0)) * (1 - torch.sigmoid(torch.tensor(2.0)))
    )


def test_sapo_decays_the_negative_advantage_side_that_hard_clipping_leaves_unbounded():
    # ratio-shaping.md: “SAPO 在 w = 2 附近反而比 1 大，要到 w 超过 3 以后才压下去” (the coefficient crosses 1 at w ≈ 3.47
    # for τ = 1.0 and 3.29 for τ = 1.05), and in 常见错误 “以为 SAPO 是更紧的信任域”; the run table's “w = 3、A = −1 的最后
    # 一列：GRPO 给 3（不截断这一侧），SAPO … 把它压了下去”. Both from TRL's own _compute_loss.
    args = default_config(GRPOConfig)
    assert args.delta is None

    def coefficient(w, A, loss_type):  # the factor on Â ∇log π_θ of every token
        w = torch.tensor([w], dtype=torch.float64)
        logps = w.log().clone().requires_grad_(True)
        advantages = torch.tensor([A], dtype=torch.float64)
        loss, _ = trl_grpo_loss(
            logps, torch.ones_like(w), advantages, torch.zeros_like(w), loss_type=loss_type, beta=0.0
        )
        (grad,) = torch.autograd.grad(loss, logps)
        return (-grad * w.shape[1] / A)[0]

    for A, crossing in ((1.0, 3.47), (-1.0, 3.29)):
        below, above = coefficient([crossing - 0.01, crossing + 0.01], A, "sapo").tolist()
        assert below > 1 > above
    w = [0.5, 1.1, 1.5, 3.0, 5.0]
    hard_negative = coefficient(w, -1.0, "grpo")
    # Â < 0: zero below 1 − ε_low, −Âw above it, growing without bound
    torch.testing.assert_close(hard_negative, torch.tensor([0, 1.1, 1.5, 3.0, 5.0], dtype=torch.float64))
    hard_positive = coefficient(w, 1.0, "grpo")
    torch.testing.assert_close(hard_positive, torch.tensor([0.5, 1.1, 0, 0, 0], dtype=torch.float64))
    soft_negative = coefficient([5.0, 8.0], -1.0, "sapo").tolist()  # where hard clipping gives 5 and 8
    assert soft_negative[1] < soft_negative[0] < 0.5
    # “默认温度下，硬截断清零的两个区域它几乎照常更新：w 从 1.2 到 2 时系数在 1.19 到 1.57 之间” (hard clipping gives 0
    # there; on the A < 0 side, w from 0.8 down to 0.5 gives 0.791 to 0.467), and where hard clipping does not zero the
    # gradient SAPO's coefficient is w times a gate ≤ 1, smaller than hard clipping's w.
    positive = coefficient([1.21, 1.28, 1.5, 2.0], 1.0, "sapo")
    assert coefficient([1.21, 1.28, 1.5, 2.0], 1.0, "grpo").abs().max() == 0
    assert 1.18 < positive.min() and positive.max() < 1.58
    negative = coefficient([0.5, 0.7, 0.79], -1.0, "sapo")
    assert coefficient([0.5, 0.7, 0.79], -1.0, "grpo").abs().max() == 0
    assert 0.46 < negative.min() and negative.max() < 0.8
    unclipped = [0.85, 1.1, 2.0, 3.0, 5.0]
    assert (coefficient(unclipped, -1.0, "sapo") < coefficient(unclipped, -1.0, "grpo")).all()


def test_cispo_epsilon_high_is_scalerl_ratio_cap_without_lower_bound():
    # ratio-shaping.md, CISPO, 两种约定: “TRL 按 ScaleRL 的写法：epsilon_high 就是比率的上限 ε_max … 没有下限”
    # (trl/trainer/grpo_trainer.py:3110; the fallback to epsilon at :946). (The
    # MiniMax-M1 side, “实验里把 ε^IS_low 设得很大 … 只调 ε^IS_high” and its per-prompt normaliser, is the paper's §3.1,
    # eq. (4)-(5) and the sentence after them; the TRL normaliser is checked in test_newer_trl_options_and_what_they_do.)
    doc = " ".join(GRPOConfig.__doc__.split())
    assert "[ScaleRL paper](https://huggingface.co/papers/2510.13786)" in doc
    cispo = source(GRPOTrainer._compute_loss).split('if self.loss_type == "cispo":', 1)[1].split("elif", 1)[0]
    assert cispo.strip().startswith("clamped_ratios = torch.clamp(coef_1, max=self.epsilon_high).detach()")
    assert "min=" not in cispo and "epsilon_low" not in cispo


def test_verl_cispo_clips_both_sides_around_one_with_the_ppo_clip_ratios():
    # ratio-shaping.md, CISPO, 两种约定: “verl 沿用 PPO 的 clip_ratio_low、clip_ratio_high（默认都是 0.2），两侧都截：默认区间是
    # [0.8, 1.2]” and “verl 读 actor.loss_agg_mode，默认 token-mean” (verl/trainer/ppo/core_algos.py:2079,
    # verl/workers/config/actor.py:158-160).
    text = inspect.getsource(core_algos.compute_policy_loss_cispo)
    assert "clipped_ratio = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)" in text
    assert "loss_agg_mode=loss_agg_mode" in text
    actor = default_actor()
    assert (actor.clip_ratio, actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.2, 0.2)
    assert actor.loss_agg_mode == "token-mean"


def test_sapo_temperatures_have_the_same_defaults_under_different_names():
    # ratio-shaping.md, SAPO, 两种约定: “默认温度也相同（τ_pos = 1.0、τ_neg = 1.05）… TRL 叫 sapo_temperature_pos、
    # sapo_temperature_neg，是 GRPOConfig 的字段；verl 叫 actor.tau_pos、actor.tau_neg，是 actor 的配置，不在 policy_loss 下”,
    # “verl 写死了这种汇总，忽略 loss_agg_mode”, “两边都不读截断参数” (verl/workers/config/actor.py:167-168,
    # core_algos.py:1689; trl/trainer/grpo_trainer.py:3122).
    args = default_config(GRPOConfig)
    assert (args.sapo_temperature_pos, args.sapo_temperature_neg) == (1.0, 1.05)
    actor = default_actor()
    assert (actor.tau_pos, actor.tau_neg) == (1.0, 1.05)
    assert not hasattr(actor.policy_loss, "tau_pos")
    text = inspect.getsource(core_algos.compute_policy_loss_sapo)
    assert "tau_pos = torch.as_tensor(config.tau_pos, dtype=advantages.dtype" in text
    assert 'loss_agg_mode="seq-mean-token-mean", **config.global_batch_info' in text
    assert "clip_ratio" not in text.split('"""')[-1]
    trl = source(GRPOTrainer._compute_loss)
    assert (
        "temperatures = torch.where(advantages > 0, self.args.sapo_temperature_pos, self.args.sapo_temperature_neg)"
        in trl
    )
    sapo = trl.split('elif self.loss_type == "sapo":', 1)[1].split("elif self.loss_type", 1)[0]
    assert "epsilon" not in sapo


def test_verl_geo_mean_and_dppo_reuse_the_ppo_clip_names():
    # ratio-shaping.md, GMPO: “TRL 的 GMPOConfig 默认 ε = 0.4 … verl 的 geo_mean 沿用 clip_ratio_low、clip_ratio_high（默认 0.2）
    # 作对数空间的界”; DPPO: “verl 的阈值沿用 clip_ratio_low、clip_ratio_high 这两个名字，含义却是概率差（或二元 KL）的上限。
    # C 读 clip_ratio_c：ActorConfig 的默认是 3.0”; DRO: “β 是 policy_loss.dro_beta，没有默认值”
    # (core_algos.py:1964, 1427, 1508; actor.py:100, 163).
    assert default_config(GMPOConfig).epsilon == 0.4
    geo = inspect.getsource(core_algos.compute_policy_loss_geo_mean)
    assert "clip_ratio_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip_ratio" in geo
    assert "cliprange_low = clip_ratio_low" in geo
    for name in ("compute_policy_loss_dppo_tv", "compute_policy_loss_dppo_kl"):
        text = inspect.getsource(getattr(core_algos, name))
        assert "config.clip_ratio_high if config.clip_ratio_high is not None" in text, name
        assert 'clip_ratio_c = config.get("clip_ratio_c", 20.0)' in text, name
    actor = default_actor()
    assert actor.clip_ratio_c == 3.0
    assert actor.policy_loss.dro_beta is None


def test_gpg_advantage_estimator_and_covariance_defaults():
    # ratio-shaping.md, GPG: “GPG 与 GRPO 的区别主要在优势一侧（verl 的 algorithm.adv_estimator=gpg）”; Clip-Cov / KL-Cov:
    # “verl 的默认挑选比例（clip_cov_ratio、kl_cov_ratio）都是 2×10⁻⁴，KL-Cov 的 β 是 ppo_kl_coef=0.1”
    # (verl/trainer/ppo/core_algos.py:105, 770; verl/workers/config/actor.py:95-99).
    assert core_algos.AdvantageEstimator.GPG == "gpg"
    assert "gpg" in core_algos.ADV_ESTIMATOR_REGISTRY
    policy_loss = default_actor().policy_loss
    assert (policy_loss.clip_cov_ratio, policy_loss.kl_cov_ratio, policy_loss.ppo_kl_coef) == (0.0002, 0.0002, 0.1)


def verl_coefficients(name, log_w, advantage, config):
    """The factor on Â ∇log π_θ of every token of verl's registered loss `name` (token-mean, one row)."""
    logps = torch.tensor([log_w], dtype=torch.float64).requires_grad_(True)
    advantages = torch.full_like(logps, advantage)
    loss, _ = core_algos.get_policy_loss_fn(name)(
        old_log_prob=torch.zeros_like(logps), log_prob=logps, advantages=advantages,
        response_mask=torch.ones_like(logps, dtype=torch.bool), loss_agg_mode="token-mean", config=config,
    )  # fmt: skip
    (grad,) = torch.autograd.grad(loss, logps)
    return (-grad * logps.shape[1] / advantage)[0]


def test_verl_dro_penalises_each_token_not_the_whole_response():
    # ratio-shaping.md, DRO: “式 rs-dro 逐 token 惩罚，第 t 个 token 的系数是 Â − β log w_t … 所以 verl 的 dro 是一个逐 token 的
    # 变体” and the page's block printing [0.7, 1.1, 0.5] vs [0.3, 0.3, 0.3]. verl's own loss
    # (verl/trainer/ppo/core_algos.py:2032-2033: log_ratio = log_prob − old_log_prob, −(log_prob·A − ½β log_ratio²)),
    # differentiated: each token gets its own coefficient; the response-level square of Kimi k1.5 §2.3.2 would give
    # every token Â − τ Σ log w = 0.3.
    text = inspect.getsource(core_algos.compute_policy_loss_dro)
    assert "pg_losses = -(log_prob * advantages - 0.5 * beta * log_ratio.square())" in text
    config = ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, policy_loss=PolicyLossConfig(dro_beta=1.0)
    )
    coefficients = verl_coefficients("dro", [0.3, -0.1, 0.5], 1.0, config)
    torch.testing.assert_close(coefficients, torch.tensor([0.7, 1.1, 0.5], dtype=torch.float64))
    assert not torch.allclose(coefficients, torch.full_like(coefficients, 1.0 - 0.7))


def test_verl_vanilla_has_dual_clip_but_trl_grpo_and_verl_clip_cov_do_not():
    # ratio-shaping.md, the map table: “GRPO（对照） | TRL grpo（verl vanilla 另有 dual-clip，见下）”, “verl 的 vanilla 默认还有
    # dual-clip：Â < 0 且 w 超过 clip_ratio_c（默认 3）时也为 0”, the Clip-Cov row “TRL grpo 的 ψ（无 dual-clip）”, and the run
    # table's “w 超过 3 时，verl 的 vanilla 被 dual-clip 清零，TRL 的 grpo 仍随 w 增长”
    # (verl/trainer/ppo/core_algos.py:1323-1325, 1355-1361; actor.py:163; trl/trainer/grpo_trainer.py:3084-3092).
    w = [0.5, 1.25, 2.0, 3.5, 5.0]
    log_w = [math.log(x) for x in w]
    actor = default_actor()
    assert actor.clip_ratio_c == 3.0
    torch.testing.assert_close(
        verl_coefficients("vanilla", log_w, -1.0, actor), torch.tensor([0, 1.25, 2.0, 0, 0], dtype=torch.float64)
    )
    # every centred covariance is 0 here (one advantage), so clip_cov selects nothing and is the plain clipped loss
    unclipped = torch.tensor([0, 1.25, 2.0, 3.5, 5.0], dtype=torch.float64)
    torch.testing.assert_close(verl_coefficients("clip_cov", log_w, -1.0, actor), unclipped)
    logps = torch.tensor([log_w], dtype=torch.float64).requires_grad_(True)
    loss, _ = trl_grpo_loss(
        logps, torch.ones_like(logps), torch.tensor([-1.0], dtype=torch.float64), torch.zeros_like(logps),
        loss_type="grpo", beta=0.0,
    )  # fmt: skip
    (grad,) = torch.autograd.grad(loss, logps)
    torch.testing.assert_close((grad * len(w))[0], unclipped)


def test_verl_dppo_cap_is_its_substitute_for_dual_clip():
    # ratio-shaping.md, DPPO: “verl 的实现在信任域内另把权重截在 C（clip_ratio_c）；它的代码注释说，这是代替 dual-clip 的截断
    # 重要性采样”, “verl 的注释引论文 §5.4：截断会带来偏差，C 宜取大”, and “δ_low、δ_high … verl 的默认都是 0.2”
    # (verl/trainer/ppo/core_algos.py:1424-1426, 1505-1507; actor.py:158-160).
    for name in ("compute_policy_loss_dppo_tv", "compute_policy_loss_dppo_kl"):
        text = " ".join(inspect.getsource(getattr(core_algos, name)).split())
        assert "# Instead of dual-clip PPO, we use truncated importance sampling (TIS) to clip the policy loss." in text
        assert "a large threshold is recommended to avoid performance degradation due to the truncation bias" in text
        assert "See Section 5.4 in https://arxiv.org/pdf/2602.04879" in text
    actor = default_actor()
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.2)


def test_clip_cov_may_select_no_token_kl_cov_always_selects_one():
    # ratio-shaping.md, Clip-Cov 与 KL-Cov: “两个界是 clip_cov_lb、clip_cov_ub，默认 (1, 5)”, “KL-Cov 至少挑 1 个。Clip-Cov 也至少
    # 挑 1 个，但只在上面说的候选 token 里挑；没有候选就一个也不挑” (verl/trainer/ppo/core_algos.py:1818-1827, 1906;
    # verl/workers/config/actor.py:96-97). That clip_cov then selects nothing is run in the dual-clip test above.
    policy_loss = default_actor().policy_loss
    assert (policy_loss.clip_cov_lb, policy_loss.clip_cov_ub) == (1.0, 5.0)
    clip_cov = inspect.getsource(core_algos.compute_policy_loss_clip_cov)
    assert "clip_num = max(int(clip_cov_ratio * response_mask.sum().item()), 1)" in clip_cov
    assert "top_k_idx = (cov_all < clip_cov_ub) & (cov_all > clip_cov_lb) & (response_mask > 0)" in clip_cov
    assert "top_k_idx = torch.empty((0, 2)" in clip_cov
    kl_cov = inspect.getsource(core_algos.compute_policy_loss_kl_cov)
    assert "k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))" in kl_cov


def test_trl_vespo_with_vllm_folds_the_sampler_ratio_into_W_and_refuses_the_default_mode():
    # ratio-shaping.md, VESPO: “默认的 vllm_importance_sampling_correction=True 把采样器的比率也乘进 W_i … 默认的
    # vllm_importance_sampling_mode="sequence_mask" 与 vespo 不能同用：GRPOTrainer 报错 … TRL 把 log W_i 限在 [log 1e-8, 20]”
    # (trl/trainer/grpo_trainer.py:936-941, 2972, 2994-3006; trl/trainer/grpo_config.py:925-935). The raise needs vLLM
    # (use_vllm=True), which the CPU test environment lacks, so it is checked in GRPOTrainer.__init__'s source.
    args = default_config(GRPOConfig)
    assert args.vllm_importance_sampling_correction is True
    assert args.vllm_importance_sampling_mode == "sequence_mask"
    init = " ".join(source(GRPOTrainer.__init__).split())
    guard = 'if self.loss_type == "vespo" and self.use_vllm and self.vllm_importance_sampling_correction:'
    assert guard in init
    after = init.split(guard, 1)[1][:400]
    assert 'if self.vllm_importance_sampling_mode not in ["token_truncate", "token_mask"]: raise ValueError(' in after
    loss = source(GRPOTrainer.get_gamma_weights)  # called by _compute_loss for vespo
    assert "seq_log_ratio += torch.sum(log_is_ratio, dim=-1, keepdim=True)" in loss
    assert "lower_clamp = math.log(1e-8)" in loss
    assert "log_w_seq = torch.clamp(seq_log_ratio, lower_clamp, 20.0)" in loss
