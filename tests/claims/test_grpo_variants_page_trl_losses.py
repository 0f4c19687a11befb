"""What rlhf_toy's cispo / sapo / luspo / vespo / GMPO modules (and the grpo-variants page section that will present
them) say about TRL 1.16: defaults, which options each loss reads, its aggregation, warnings and cited papers.

No page text exists yet; each comment names the docstring sentence it backs (src/rlhf_toy/losses/<module>.py).
Value and gradient agreement is in tests/conformance/test_<module>_trl.py.
"""

from __future__ import annotations

import torch
from conformance.trl_private import trl_grpo_loss
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.gmpo import GMPOConfig, GMPOTrainer

from rlhf_toy import grpo_loss
from rlhf_toy.losses import clipped_is_weight_loss

from .pinned import default_config, source

NEW_LOSS_TYPES = ("cispo", "sapo", "luspo", "vespo")


def test_trl_has_eight_loss_types_and_cites_a_paper_for_each_new_one():
    # losses/*.py module docstrings: CISPO MiniMax-M1 2506.13585 + ScaleRL 2510.13786, SAPO 2511.20347,
    # LUSPO 2602.05261, VESPO 2602.10693 (the papers GRPOConfig's loss_type / epsilon_high docstrings link).
    doc = " ".join(GRPOConfig.__doc__.split())
    for loss_type in ("grpo", "dr_grpo", "dapo", "bnpo", *NEW_LOSS_TYPES):
        assert f'- `"{loss_type}"' in doc, loss_type
    for paper in ("2506.13585", "2510.13786", "2511.20347", "2602.05261", "2602.10693"):
        assert f"huggingface.co/papers/{paper}" in doc, paper
    assert "huggingface.co/papers/2507.20673" in " ".join(GMPOConfig.__doc__.split())


def test_defaults_of_the_options_the_new_losses_read():
    # soft_gate.py: “TRL 默认 1.05 与 1.0”; gamma_weight.py: “(k, λ) = (2, 3) if A ≥ 0 else (3, 2)… 默认值与 TRL 1.16
    # GRPOConfig.vespo_* 相同”; every new function: “beta … TRL 1.16 默认 0”.
    args = default_config(GRPOConfig)
    assert (args.sapo_temperature_pos, args.sapo_temperature_neg) == (1.0, 1.05)
    assert (args.vespo_k_pos, args.vespo_lambda_pos, args.vespo_k_neg, args.vespo_lambda_neg) == (2.0, 3.0, 3.0, 2.0)
    assert (args.beta, args.epsilon, args.epsilon_high) == (0.0, 0.2, None)
    assert args.importance_sampling_level == "token"  # length_weighted_sequence.py: “TRL 的默认 … "token"”
    assert args.mask_truncated_completions is False


def test_cispo_epsilon_high_is_an_absolute_cap_recommended_5_and_falls_back_to_epsilon():
    # clipped_is_weight.py: “epsilon_high 就是绝对上界 ε_max（不是 1+ε_high），TRL 的 docstring 推荐 5.0；不设时 TRL 退回
    # epsilon（默认 0.2），于是同策略时每个权重都是 0.2”.
    doc = " ".join(GRPOConfig.__doc__.split())
    assert "When used with `loss_type='cispo'`, this corresponds to the ε_max param" in doc
    assert "the recommended value is `5.0`" in doc
    text = source(GRPOTrainer._compute_loss)
    assert "clamped_ratios = torch.clamp(coef_1, max=self.epsilon_high).detach()" in text
    assert "per_token_loss = -clamped_ratios * advantages * per_token_logps" in text
    assert "self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon" in source(
        GRPOTrainer.__init__
    )
    # Run it: TRL with epsilon_high unset, on-policy, has 0.2 × the plain (dapo) policy gradient.
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 3, dtype=torch.float64)
    advantages = torch.randn(4, generator=g, dtype=torch.float64)
    theirs_logps = torch.randn(4, 3, generator=g, dtype=torch.float64).requires_grad_(True)
    plain_logps = theirs_logps.detach().clone().requires_grad_(True)
    theirs, _ = trl_grpo_loss(theirs_logps, mask, advantages, loss_type="cispo", beta=0.0)
    plain, _ = grpo_loss(plain_logps, None, None, advantages, mask, beta=0.0, loss_type="dapo")
    theirs.backward()
    plain.backward()
    torch.testing.assert_close(theirs_logps.grad, 0.2 * plain_logps.grad)
    # … and the book's function with TRL's fallback cap is the same thing
    ours_logps = plain_logps.detach().clone().requires_grad_(True)
    clipped_is_weight_loss(ours_logps, None, None, advantages, mask, epsilon_high=0.2)[0].backward()
    torch.testing.assert_close(ours_logps.grad, theirs_logps.grad)


def test_cispo_clip_metric_counts_positive_advantages_only():
    # clipped_is_weight.py: “cispo_clip_ratio … w > ε_max 且 A > 0 的 token 比例（A < 0 的 token 权重同样封顶，但 TRL 不计入）”.
    assert "is_cispo_clipped = (coef_1 > self.epsilon_high) & (advantages > 0)" in source(GRPOTrainer._compute_loss)


def test_aggregation_of_each_new_loss_type():
    # clipped_is_weight.py / gamma_weight.py: “汇总同 dapo”; soft_gate.py: “汇总同 grpo”; length_weighted_sequence.py:
    # “TRL 的汇总是 (per_token_loss * mask).sum(-1).mean()”.
    text = source(GRPOTrainer._compute_loss)
    assert (
        'if self.loss_type in ["grpo", "sapo"]: loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()'
        in text
    )
    assert 'elif self.loss_type in ["cispo", "dapo", "vespo"]:' in text
    assert 'elif self.loss_type == "luspo":' in text
    assert "loss = (per_token_loss * mask).sum(-1).mean()" in text
    # luspo shares the clipped surrogate (and its clip metrics) with grpo/bnpo/dr_grpo/dapo
    assert 'elif self.loss_type in ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]: coef_2 = torch.clamp(' in text


def test_beta_adds_k3_per_token_after_the_policy_term_for_every_loss_type():
    # every new function: “β k3 逐 token 加在 … 之后”, with the loss type's own aggregation.
    text = source(GRPOTrainer._compute_loss)
    kl_at = text.index("per_token_loss = per_token_loss + self.beta * per_token_kl")
    assert (
        text.index('elif self.loss_type == "vespo": phi_seq')
        < kl_at
        < text.index('if self.loss_type in ["grpo", "sapo"]:')
    )


def test_sapo_reads_no_epsilon_and_logs_no_clip_ratio():
    # soft_gate.py: “没有 epsilon/epsilon_high … TRL 的 sapo 分支也不读它们，也不记 clip_ratio”.
    text = source(GRPOTrainer._compute_loss)
    branch = text[text.index('elif self.loss_type == "sapo":') : text.index('elif self.loss_type == "vespo":')]
    assert "epsilon" not in branch
    assert (
        "temperatures = torch.where(advantages > 0, self.args.sapo_temperature_pos, self.args.sapo_temperature_neg)"
        in branch
    )
    assert "soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures" in branch
    assert (
        'if self.loss_type in ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]: # Compute the clipped probability ratios'
        in text
    )


def test_warnings_for_luspo_vespo_and_cispo_levels():
    # length_weighted_sequence.py: “TRL 的默认 importance_sampling_level="token" 也能跑（只打一条日志警告）”;
    # gamma_weight.py: “TRL 构造训练器时还会警告应使用 "token"”; clipped_is_weight.py: cispo is in the
    # sequence-level warning with bnpo, dr_grpo and dapo. All three are logger.warning, not exceptions.
    text = source(GRPOTrainer.__init__)
    luspo = text.index('if args.loss_type == "luspo" and args.importance_sampling_level != "sequence": logger.warning(')
    vespo = text.index('if args.loss_type == "vespo" and args.importance_sampling_level != "token": logger.warning(')
    cispo = text.index('args.loss_type in ["bnpo", "dr_grpo", "dapo", "cispo"]: logger.warning(')
    assert luspo < vespo < cispo


def test_vespo_ignores_the_sequence_level_and_clamps_like_the_book():
    # gamma_weight.py: “TRL 的 vespo 分支总是从逐 token 的 log w 求和得到 W”, the clamps [−20, 20] and [log 1e-8, 20],
    # λ ≥ 1e-4, and φ detached.
    text = source(GRPOTrainer._compute_loss)
    assert "log_ratio_per_token=log_ratio," in text  # the token log-ratio, not log_importance_weights
    gamma = source(GRPOTrainer.get_gamma_weights)
    assert "@torch.no_grad()" in gamma
    assert "log_ratio_clamped = torch.clamp(log_ratio_per_token, -20.0, 20.0)" in gamma
    assert "lower_clamp = math.log(1e-8)" in gamma and "torch.clamp(seq_log_ratio, lower_clamp, 20.0)" in gamma
    assert "is_nonneg_adv = advantages >= 0" in gamma and ".clamp(min=1e-4)" in gamma
    assert "log_phi = lambda_seq + k_seq * log_w_seq - lambda_seq * w_seq" in gamma


def test_gmpo_defaults_log_space_clip_and_what_it_does_not_read():
    # geometric_mean_ratio.py: “GMPO 论文与 TRL 的 GMPOConfig 默认 ε = 0.4”, epsilon_high None → epsilon,
    # clipping sign-aware in log space, KL averaged per sequence, “GMPO 不读 loss_type 与 importance_sampling_level”,
    # and the all-masked-row difference (TRL: s = e^0 = 1).
    args = default_config(GMPOConfig)
    assert (args.epsilon, args.epsilon_high, args.beta) == (0.4, None, 0.0)
    text = source(GMPOTrainer._compute_loss)
    assert "clamped_log_ratio = torch.clamp(log_ratio, min=-self.epsilon_low, max=self.epsilon_high)" in text
    assert (
        "advantages_col > 0, torch.minimum(log_ratio, clamped_log_ratio), torch.maximum(log_ratio, clamped_log_ratio),"
        in text
    )
    assert "seq_kl = (per_token_kl * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)" in text
    assert "loss = per_sequence_loss.mean()" in text
    assert "self.importance_sampling_level" not in text and "self.loss_type" not in text  # (only in comments)
    assert "log_importance_weights = (clipped_log_ratio * seq_mask).sum(-1) / seq_mask.sum(-1).clamp(min=1.0)" in text


def test_mask_truncated_completions_zeroes_rows_before_counting_tokens():
    # every new function's `mask` argument: rows cut by mask_truncated_completions=True are all-zero mask rows; they
    # leave the dapo-style denominator (cispo, vespo) but stay in B (sapo, luspo, GMPO).
    text = source(GRPOTrainer._generate_and_score_completions)
    zero = text.index("completion_mask = completion_mask * (~is_truncated).unsqueeze(1).int()")
    count = text.index("num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()")
    assert zero < count
