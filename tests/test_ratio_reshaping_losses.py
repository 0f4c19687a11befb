"""TRL 1.16 的 cispo、sapo、luspo、vespo 与 experimental GMPO：公式、梯度权重、坏输入与边界情况。

每个期望值都按公式独立算出（纯 Python 的 math 或 autograd），再与 rlhf_toy 比较；与 TRL 逐值的比较在
tests/conformance/test_<模块名>_trl.py。

  clipped_is_weight       CISPO：−sg(min(w, ε_max)) A log π
  soft_gate               SAPO：−(4/τ) σ(τ(w − 1)) A
  length_weighted_sequence LUSPO：(1/B) Σ_i |o_i| · GSPO 的序列损失
  gamma_weight            VESPO：−sg(φ(W)) A log π，φ(W) = W^k e^{−λ(W − 1)}
  geometric_mean_ratio    GMPO：−exp(mean_t 对数空间截断后的 log w) A
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from rlhf_toy import grpo_loss
from rlhf_toy.losses import (
    clipped_is_weight,
    clipped_is_weight_loss,
    gamma_weight,
    gamma_weight_loss,
    geometric_mean_ratio,
    geometric_mean_ratio_loss,
    length_weighted_sequence,
    length_weighted_sequence_loss,
    soft_gate,
    soft_gate_loss,
)

LOSSES = {
    "cispo": clipped_is_weight_loss,
    "sapo": soft_gate_loss,
    "luspo": length_weighted_sequence_loss,
    "vespo": gamma_weight_loss,
    "gmpo": geometric_mean_ratio_loss,
}
WEIGHTS = {
    "cispo": clipped_is_weight.gradient_weight,
    "sapo": soft_gate.gradient_weight,
    "luspo": length_weighted_sequence.gradient_weight,
    "vespo": gamma_weight.gradient_weight,
    "gmpo": geometric_mean_ratio.gradient_weight,
}
RATIOS = torch.tensor([0.05, 0.3, 0.6, 0.7, 0.9, 1.0, 1.1, 1.3, 1.6, 2.5, 4.0, 7.0], dtype=torch.float64)


def batch(seed=0, b=4, t=5, spread=0.8):
    """B = 4、T = 5，长度 5、2、3、0（最后一行整行是填充）。"""
    g = torch.Generator().manual_seed(seed)
    old = -2 * torch.rand(b, t, generator=g, dtype=torch.float64)
    logps = (old + spread * torch.randn(b, t, generator=g, dtype=torch.float64)).requires_grad_(True)
    ref = old + 0.3 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.2, -0.7, 0.4, -1.5], dtype=torch.float64)
    mask = (torch.arange(t)[None, :] < torch.tensor([5, 2, 3, 0])[:, None]).to(torch.float64)
    return logps, old, ref, adv, mask


# ---- 梯度权重：gradient_weight(ratio, advantage) 就是单 token 回答的 −∂loss/∂log π ----


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("advantage", [1.3, -0.8])
def test_gradient_weight_is_the_autograd_gradient_of_a_one_token_loss(name, advantage):
    for ratio in RATIOS.tolist():
        logps = torch.tensor([[math.log(ratio) - 1.0]], dtype=torch.float64, requires_grad=True)
        old = torch.tensor([[-1.0]], dtype=torch.float64)
        loss, _ = LOSSES[name](logps, old, None, torch.tensor([advantage], dtype=torch.float64), torch.ones(1, 1))
        (grad,) = torch.autograd.grad(loss, logps)
        expected = WEIGHTS[name](torch.tensor(ratio, dtype=torch.float64), advantage)
        assert -grad.item() == pytest.approx(expected.item(), rel=1e-12, abs=1e-15), (name, ratio)


def test_cispo_weight_is_capped_never_zero():
    weight = clipped_is_weight.gradient_weight(RATIOS, 1.0, epsilon_high=5.0)
    assert torch.equal(weight, torch.minimum(RATIOS, torch.tensor(5.0, dtype=torch.float64)))
    assert (weight > 0).all()
    assert clipped_is_weight.gradient_weight(RATIOS, -1.0, epsilon_high=2.0).min() == -2.0  # A < 0 也封顶
    assert not clipped_is_weight.clipped_is_weight(RATIOS.clone().requires_grad_(True)).requires_grad


def test_sapo_weight_is_soft():
    for tau_pos, tau_neg in [(1.0, 1.05), (0.5, 3.0)]:
        pos = soft_gate.gradient_weight(RATIOS, 1.0, tau_pos, tau_neg)
        neg = soft_gate.gradient_weight(RATIOS, -1.0, tau_pos, tau_neg)
        assert (pos > 0).all() and (neg < 0).all()  # 没有零梯度区
        assert pos[RATIOS == 1.0].item() == pytest.approx(1.0) and neg[RATIOS == 1.0].item() == pytest.approx(-1.0)
    # τ 越大离 w = 1 越远衰减越快：w = 4 时权重 4·4σ(1−σ)，σ = σ(3τ)
    for tau in (0.5, 1.0, 3.0):
        s = 1 / (1 + math.exp(-3 * tau))
        assert soft_gate.gradient_weight(torch.tensor(4.0, dtype=torch.float64), 1.0, tau, tau).item() == pytest.approx(
            16 * s * (1 - s)
        )
    # 门的值：f(1) = 2/τ
    assert soft_gate.soft_gate(torch.tensor(1.0), torch.tensor(-1.0), 1.0, 1.05).item() == pytest.approx(2 / 1.05)


def test_luspo_weight_is_zero_outside_the_clip_on_the_side_that_matters():
    pos = length_weighted_sequence.gradient_weight(RATIOS, 1.0, epsilon=0.2, epsilon_high=0.28)
    neg = length_weighted_sequence.gradient_weight(RATIOS, -1.0, epsilon=0.2, epsilon_high=0.28)
    assert torch.equal(pos == 0, RATIOS > 1.28) and torch.equal(neg == 0, RATIOS < 0.8)
    assert torch.equal(pos[RATIOS <= 1.28], RATIOS[RATIOS <= 1.28])


def test_vespo_weight_is_one_on_policy_and_peaks_at_k_over_lambda():
    for advantage, k, lam in [(1.0, 2.0, 3.0), (-1.0, 3.0, 2.0)]:
        assert abs(gamma_weight.gradient_weight(torch.tensor([1.0]), advantage).item()) == pytest.approx(1.0)
        grid = torch.linspace(0.01, 5, 4999, dtype=torch.float64)
        phi = gamma_weight.gradient_weight(grid, advantage).abs()
        assert grid[phi.argmax()].item() == pytest.approx(k / lam, abs=1e-3)
        w = 2.5
        assert phi[(grid - w).abs().argmin()].item() == pytest.approx(w**k * math.exp(-lam * (w - 1)), rel=1e-3)
    at_clamps = gamma_weight.gradient_weight(torch.tensor([0.0, 1e12], dtype=torch.float64), 1.0)
    assert at_clamps.tolist() == pytest.approx([math.exp(3) * 1e-16, 0.0], rel=1e-9)  # W 先限幅到 [1e-8, e^20]


def test_gmpo_weight_is_zero_outside_the_log_space_clip():
    pos = geometric_mean_ratio.gradient_weight(RATIOS, 1.0, epsilon=0.4)
    neg = geometric_mean_ratio.gradient_weight(RATIOS, -1.0, epsilon=0.4)
    assert torch.equal(pos == 0, RATIOS > math.exp(0.4)) and torch.equal(neg == 0, RATIOS < math.exp(-0.4))


# ---- 同策略（比率全为 1）时各自退回的损失 ----


def grad_of(fn, *args, **kwargs):
    logps = args[0]
    loss, _ = fn(*args, **kwargs)
    (grad,) = torch.autograd.grad(loss, logps)
    return loss, grad


@pytest.mark.parametrize(
    ("name", "kwargs", "grpo_type"),
    [
        ("cispo", {}, "dapo"),  # 权重 min(1, 5) = 1：token 平均的策略梯度
        ("sapo", {}, "grpo"),  # f'(1) = 1
        ("vespo", {}, "dapo"),  # φ(1) = 1
        ("gmpo", {}, "grpo"),  # ∂s/∂log π_t = 1/|o_i|
    ],
)
def test_on_policy_gradient_is_the_plain_policy_gradient(name, kwargs, grpo_type):
    logps, _, _, adv, mask = batch()
    _, ours = grad_of(LOSSES[name], logps, None, None, adv, mask, **kwargs)
    _, plain = grad_of(grpo_loss, logps, None, None, adv, mask, beta=0.0, loss_type=grpo_type)
    torch.testing.assert_close(ours, plain, rtol=1e-12, atol=1e-15)


def test_cispo_default_trl_cap_scales_the_on_policy_gradient_by_0_2():
    """TRL 不设 epsilon_high 时上界是 epsilon = 0.2：同策略时梯度是普通策略梯度的 0.2 倍。"""
    logps, _, _, adv, mask = batch()
    _, capped = grad_of(clipped_is_weight_loss, logps, None, None, adv, mask, epsilon_high=0.2)
    _, plain = grad_of(grpo_loss, logps, None, None, adv, mask, beta=0.0, loss_type="dapo")
    torch.testing.assert_close(capped, 0.2 * plain, rtol=1e-12, atol=1e-15)


def test_luspo_token_gradient_does_not_depend_on_length_gspo_does():
    """两条回答比率都为 1、优势相同、长度 5 与 2：LUSPO 每个 token 的梯度相同，GSPO 的差 5/2 倍。"""
    logps, _, _, _, mask = batch()
    adv = torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    _, luspo = grad_of(length_weighted_sequence_loss, logps, None, None, adv, mask)
    _, gspo = grad_of(grpo_loss, logps, None, None, adv, mask, beta=0.0, importance_sampling_level="sequence")
    assert luspo[0, 0].item() == pytest.approx(luspo[1, 0].item()) == pytest.approx(-1 / 4)
    assert gspo[1, 0].item() / gspo[0, 0].item() == pytest.approx(5 / 2)


def test_luspo_sequence_loss_is_length_times_gspo_loss():
    logps, old, _, adv, mask = batch()
    ours, _ = length_weighted_sequence_loss(logps, old, None, adv, mask)
    lengths = mask.sum(-1)
    per_seq = []
    for i in range(4):
        ours_i, _ = grpo_loss(
            logps[i : i + 1],
            old[i : i + 1],
            None,
            adv[i : i + 1],
            mask[i : i + 1],
            beta=0.0,
            importance_sampling_level="sequence",
        )
        per_seq.append(lengths[i] * ours_i)
    assert ours.item() == pytest.approx(sum(per_seq).item() / 4, rel=1e-12)


def test_gmpo_is_the_geometric_mean_of_clipped_ratios():
    logps, old, _, adv, mask = batch()
    ours, _ = geometric_mean_ratio_loss(logps, old, None, adv, mask, epsilon=0.4)
    total = 0.0
    for i in range(3):  # 第 4 行整行是填充：贡献 0
        n = int(mask[i].sum())
        logs = [(logps[i, t] - old[i, t]).item() for t in range(n)]
        clipped = [min(x, 0.4) if adv[i] > 0 else max(x, -0.4) for x in logs]
        total += -math.exp(sum(clipped) / n) * adv[i].item()
    assert ours.item() == pytest.approx(total / 4, rel=1e-12)


def test_vespo_weight_uses_the_product_not_the_geometric_mean():
    logps, old, _, adv, mask = batch()
    phi = gamma_weight.gamma_weight(logps.detach() - old, mask, adv)
    for i in range(4):
        log_w = sum((logps[i, t] - old[i, t]).item() for t in range(int(mask[i].sum())))
        k, lam = (2.0, 3.0) if adv[i] >= 0 else (3.0, 2.0)
        assert phi[i, 0].item() == pytest.approx(math.exp(lam + k * log_w - lam * math.exp(log_w)), rel=1e-12)
    assert phi[3, 0].item() == 1.0  # 空行：W = 1


# ---- 整行掩码为 0、整批掩码为 0、KL 项 ----


@pytest.mark.parametrize("name", LOSSES)
def test_all_masked_rows_contribute_nothing(name):
    logps, old, ref, adv, mask = batch()
    with_empty, grad = grad_of(LOSSES[name], logps, old, ref, adv, mask, beta=0.04)
    assert torch.equal(grad[3], torch.zeros(5, dtype=torch.float64))
    adv2 = adv.clone()
    adv2[3] = 100.0  # 空行的优势不影响损失（TRL 的 GMPO 会：见 test_geometric_mean_ratio_trl.py）
    changed, _ = grad_of(LOSSES[name], logps, old, ref, adv2, mask, beta=0.04)
    assert changed.item() == with_empty.item()
    nothing, grad = grad_of(LOSSES[name], logps, old, ref, adv, torch.zeros_like(mask), beta=0.04)
    assert nothing.item() == 0.0 and torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("name", ["cispo", "sapo", "vespo"])
def test_beta_adds_k3_with_the_loss_types_aggregation(name):
    logps, old, ref, adv, mask = batch()
    without, _ = LOSSES[name](logps, old, None, adv, mask)
    with_kl, metrics = LOSSES[name](logps, old, ref, adv, mask, beta=0.04)
    k3 = (ref - logps).exp() - (ref - logps) - 1
    agg = "grpo" if name == "sapo" else "dapo"
    kl_only, _ = grpo_loss(logps, old, ref, torch.zeros(4, dtype=torch.float64), mask, beta=0.04, loss_type=agg)
    assert with_kl.item() == pytest.approx(without.item() + kl_only.item(), rel=1e-12)
    assert metrics["kl"] == pytest.approx(((k3 * mask).sum() / mask.sum()).item(), rel=1e-12)


def test_luspo_and_gmpo_kl_terms():
    logps, old, ref, adv, mask = batch()
    k3 = ((ref - logps).exp() - (ref - logps) - 1).detach()
    lengths = mask.sum(-1)
    luspo0, _ = length_weighted_sequence_loss(logps, old, None, adv, mask)
    luspo, _ = length_weighted_sequence_loss(logps, old, ref, adv, mask, beta=0.04)
    assert luspo.item() == pytest.approx(luspo0.item() + 0.04 * (k3 * mask).sum().item() / 4, rel=1e-12)  # 求和
    gmpo0, _ = geometric_mean_ratio_loss(logps, old, None, adv, mask)
    gmpo, _ = geometric_mean_ratio_loss(logps, old, ref, adv, mask, beta=0.04)
    per_row = (k3 * mask).sum(-1) / lengths.clamp(min=1)
    assert gmpo.item() == pytest.approx(gmpo0.item() + 0.04 * per_row.sum().item() / 4, rel=1e-12)  # 行内平均


def test_cispo_sequence_level_gives_one_weight_per_row():
    logps, old, _, adv, mask = batch()
    _, grad = grad_of(clipped_is_weight_loss, logps, old, None, adv, mask, importance_sampling_level="sequence")
    for i in range(3):
        n = int(mask[i].sum())
        s = math.exp(sum((logps[i, t] - old[i, t]).item() for t in range(n)) / n)
        expected = -min(s, 5.0) * adv[i].item() / mask.sum().item()
        assert grad[i, :n].tolist() == pytest.approx([expected] * n, rel=1e-12)


# ---- 坏输入 ----


@pytest.mark.parametrize("name", LOSSES)
def test_bad_shapes_and_values_raise(name):
    logps, old, ref, adv, mask = batch()
    fn = LOSSES[name]
    with pytest.raises(ValueError, match=re.escape("old_logps 的形状是 (4, 4)，期望 (4, 5)（与 logps 相同）")):
        fn(logps, old[:, :4], None, adv, mask)
    with pytest.raises(ValueError, match=re.escape("mask 的形状是 (4, 4)，期望 (4, 5)")):
        fn(logps, old, None, adv, mask[:, :4])
    with pytest.raises(ValueError, match=re.escape("advantages 的形状是 (3,)，期望 (4,)")):
        fn(logps, old, None, adv[:3], mask)
    with pytest.raises(ValueError, match="beta > 0 时需要 ref_logps"):
        fn(logps, old, None, adv, mask, beta=0.04)
    with pytest.raises(ValueError, match="beta 应 ≥ 0"):
        fn(logps, old, ref, adv, mask, beta=-0.1)
    with pytest.raises(ValueError, match="old_logps 带着梯度"):
        fn(logps, old.clone().requires_grad_(True), None, adv, mask)
    with pytest.raises(ValueError, match="logps 的形状是 \\(4,\\)，期望 2 维"):
        fn(logps[:, 0], old[:, 0], None, adv, mask[:, 0])


@pytest.mark.parametrize("name", ["vespo", "gmpo"])
def test_per_token_advantages_are_rejected_where_trl_uses_one_per_row(name):
    logps, old, _, adv, mask = batch()
    with pytest.raises(ValueError, match=re.escape("advantages 的形状是 (4, 5)，期望 (4,)")):
        LOSSES[name](logps, old, None, adv[:, None].expand(4, 5), mask)


@pytest.mark.parametrize("name", ["cispo", "sapo", "luspo"])
def test_sequence_level_needs_per_row_advantages_and_known_levels(name):
    logps, old, _, adv, mask = batch()
    with pytest.raises(ValueError, match=re.escape("advantages 的形状应是 (4,)，实际是 (4, 5)")):
        LOSSES[name](logps, old, None, adv[:, None].expand(4, 5), mask, importance_sampling_level="sequence")
    with pytest.raises(ValueError, match="未知的 importance_sampling_level='seq'"):
        LOSSES[name](logps, old, None, adv, mask, importance_sampling_level="seq")


def test_option_specific_bad_values():
    logps, old, _, adv, mask = batch()
    with pytest.raises(ValueError, match="epsilon_high 应 ≥ 0"):
        clipped_is_weight_loss(logps, old, None, adv, mask, epsilon_high=-1.0)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="sapo_temperature_neg 应是有限正数"):
            soft_gate_loss(logps, old, None, adv, mask, sapo_temperature_neg=bad)
    with pytest.raises(ValueError, match="vespo_k_neg 应 ≥ 0"):
        gamma_weight_loss(logps, old, None, adv, mask, vespo_k_neg=-1.0)
    with pytest.raises(ValueError, match="epsilon 应 ≥ 0"):
        geometric_mean_ratio_loss(logps, old, None, adv, mask, epsilon=-0.4)
    for fn in (length_weighted_sequence_loss, geometric_mean_ratio_loss, clipped_is_weight_loss):
        with pytest.raises(ValueError, match="空批次"):
            fn(logps[:0], old[:0], None, adv[:0], mask[:0])
    with pytest.raises(ValueError, match="含 1 个非有限值"):
        bad = old.clone()
        bad[0, 0] = float("nan")
        soft_gate_loss(logps, bad, None, adv, mask)


@pytest.mark.parametrize("name", LOSSES)
def test_float32_inputs_give_float32_losses(name):
    logps, old, ref, adv, mask = batch()
    logps32 = logps.detach().float().requires_grad_(True)
    loss, _ = LOSSES[name](logps32, old.float(), ref.float(), adv.float(), mask.float(), beta=0.04)
    loss64, _ = LOSSES[name](logps, old, ref, adv, mask, beta=0.04)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(loss64.item(), rel=1e-5)
