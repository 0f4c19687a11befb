"""第 7 章：KL 估计量 k1、k2、k3，截断，重要性采样修正的 k3，以及放进损失 / 奖励时的期望梯度。

记 d = log π_ref(y) − log π_θ(y)，y ~ π_θ（Schulman 2020 的 log r）。期望值都在测试里按公式独立算出
（math、纯 Python 或 torch 的基本运算），不调用被测函数；期望对类别分布的支撑集精确求和，所以测试是确定的。
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from rlhf_toy.estimators.kl import importance_corrected_k3, kl_estimate
from rlhf_toy.studies.kl_estimators import (
    categorical_log_ratios,
    estimator_stats,
    exact_kl,
    exact_kl_gradient,
    expected_kl_gradient,
    forward_kl_optimum,
    gaussian_log_ratios,
    reverse_kl_optimum,
)

F64 = torch.float64

# 一个 5 类的小分布：π_θ = softmax(THETA)，π_ref = REF
THETA = [0.3, -1.2, 0.8, 0.0, -0.4]
REF = [0.30, 0.25, 0.20, 0.15, 0.10]


def softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


PI = softmax(THETA)
KL_REV = sum(p * math.log(p / q) for p, q in zip(PI, REF, strict=True))  # KL(π_θ ‖ π_ref)
KL_FWD = sum(q * math.log(q / p) for p, q in zip(PI, REF, strict=True))  # KL(π_ref ‖ π_θ)
# softmax 参数化下的闭式梯度（对 logits θ_j）：
GRAD_REV = [p * (math.log(p / q) - KL_REV) for p, q in zip(PI, REF, strict=True)]  # π_j (log π_j/π_ref,j − KL)
GRAD_FWD = [p - q for p, q in zip(PI, REF, strict=True)]  # π_j − π_ref,j


def t(xs):
    return torch.tensor(xs, dtype=F64)


# ---------------------------------------------------------------- 值：与公式逐点对照


LP = [[-0.1, -2.0, -5.0, -0.7], [-0.7, -30.0, -1e-3, -3.0]]
RF = [[-2.0, -0.1, -5.0, -0.2], [-0.2, -1.0, -8.0, -3.5]]


def formula(name, lp, ref):
    d = ref - lp
    return {"k1": -d, "k2": d * d / 2, "k3": math.exp(d) - d - 1}[name]


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_values_match_schulman_formulas(name):
    got = kl_estimate(t(LP), t(RF), name)
    for i in range(2):
        for j in range(4):
            assert got[i, j].item() == pytest.approx(formula(name, LP[i][j], RF[i][j]), rel=1e-12, abs=1e-15)


def test_verl_low_var_kl_with_clamps():
    # verl kl_penalty_forward("low_var_kl")：d = clamp(ref − lp, −20, 20)；kld = clamp(e^d − d − 1, −10, 10)
    got = kl_estimate(t(LP), t(RF), "k3", log_ratio_clamp=20.0, value_clamp=10.0)
    for i in range(2):
        for j in range(4):
            d = min(max(RF[i][j] - LP[i][j], -20.0), 20.0)
            want = min(max(math.exp(d) - d - 1, -10.0), 10.0)
            assert got[i, j].item() == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert got[1, 1].item() == 10.0  # d = 29：被截断


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_openrlhf_compute_approx_kl_with_value_clamp(name):
    # OpenRLHF compute_approx_kl：lr = lp − ref；k1 = lr，k2 = lr²/2，k3 = e^{−lr} − 1 + lr；结果 clamp 到 [−10, 10]
    got = kl_estimate(t(LP), t(RF), name, value_clamp=10.0)
    for i in range(2):
        for j in range(4):
            lr = LP[i][j] - RF[i][j]
            raw = {"k1": lr, "k2": lr * lr / 2, "k3": math.exp(-lr) - 1 + lr}[name]
            assert got[i, j].item() == pytest.approx(min(max(raw, -10.0), 10.0), rel=1e-12, abs=1e-15)


def test_default_is_unclamped_and_backward_compatible():
    lp, ref = t(LP), t(RF)
    for name in ("k1", "k2", "k3"):
        assert torch.equal(
            kl_estimate(lp, ref, name), kl_estimate(lp, ref, name, log_ratio_clamp=None, value_clamp=None)
        )
    assert kl_estimate(lp, ref)[1, 1].item() == pytest.approx(math.exp(29.0) - 30.0, rel=1e-12)  # 默认 k3，不限幅


def test_k2_k3_nonnegative_and_k1_takes_both_signs():
    d = torch.cat([torch.linspace(-30, 30, 6001, dtype=F64), torch.logspace(-12, 0, 100, dtype=F64)])
    d = torch.cat([d, -d])[None]
    lp = torch.full_like(d, -1.0)
    assert (kl_estimate(lp, lp + d, "k2") >= 0).all()
    assert (kl_estimate(lp, lp + d, "k3") >= 0).all()
    k1 = kl_estimate(lp, lp + d, "k1")
    assert (k1 < 0).any() and (k1 > 0).any()


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_all_estimators_are_exactly_zero_at_equality(name):
    lp = torch.tensor([[-0.3, -4.0, -1e-3], [-20.0, -1.0, 0.0]])
    assert kl_estimate(lp, lp.clone(), name).tolist() == [[0.0] * 3] * 2
    assert importance_corrected_k3(lp, lp.clone()).tolist() == [[0.0] * 3] * 2


# ---------------------------------------------------------------- 偏差与标准差


def test_exact_moments_on_a_categorical():
    lp, ref = t(PI).log(), t(REF).log()
    stats = estimator_stats(ref - lp, lp.exp())
    ds = [math.log(q / p) for p, q in zip(PI, REF, strict=True)]
    mean_k2 = sum(p * d * d / 2 for p, d in zip(PI, ds, strict=True))
    assert stats["k1"].mean == pytest.approx(KL_REV, rel=1e-12)  # 无偏
    assert stats["k3"].mean == pytest.approx(KL_REV, rel=1e-12)  # 无偏：E[e^d − 1] = Σ π_ref − 1 = 0
    assert stats["k2"].mean == pytest.approx(mean_k2, rel=1e-12)
    assert stats["k2"].mean < 0.9 * KL_REV  # 有偏：这组分布上 k2 偏低（另一些分布上偏高）
    var_k1 = sum(p * (-d - KL_REV) ** 2 for p, d in zip(PI, ds, strict=True))
    assert stats["k1"].std == pytest.approx(math.sqrt(var_k1), rel=1e-12)
    assert stats["k1"].frac_negative == pytest.approx(sum(p for p, d in zip(PI, ds, strict=True) if d > 0), rel=1e-12)
    assert stats["k2"].frac_negative == stats["k3"].frac_negative == 0.0


def test_monte_carlo_unbiasedness_gaussian():
    # q = N(0,1)，p = N(μ,1)：d = μx − μ²/2 ~ N(−μ²/2, μ²)，KL = μ²/2；E[k2] = μ²/2 + μ⁴/8；sd(k1) = μ
    n, mu = 400_000, 1.0
    d = gaussian_log_ratios(mu, n, torch.Generator().manual_seed(0))
    stats = estimator_stats(d)
    true = mu**2 / 2
    for name in ("k1", "k3"):
        stderr = stats[name].std / math.sqrt(n)
        assert abs(stats[name].mean - true) < 5 * stderr, name  # 宽松：5 个标准误
    assert stats["k2"].mean - true == pytest.approx(mu**4 / 8, rel=0.05)  # k2 的偏差
    assert stats["k1"].std == pytest.approx(mu, rel=0.01)
    assert stats["k1"].frac_negative == pytest.approx(0.5 * math.erfc(mu / 2 / math.sqrt(2)), abs=0.005)


def test_monte_carlo_unbiasedness_categorical():
    lp, ref = t(PI).log(), t(REF).log()
    n = 100_000
    d = categorical_log_ratios(lp, ref, n, torch.Generator().manual_seed(1))
    stats = estimator_stats(d)
    for name in ("k1", "k3"):
        assert abs(stats[name].mean - KL_REV) < 5 * stats[name].std / math.sqrt(n), name
    k2_mean = sum(p * math.log(q / p) ** 2 / 2 for p, q in zip(PI, REF, strict=True))
    assert abs(stats["k2"].mean - k2_mean) < 5 * stats["k2"].std / math.sqrt(n)
    assert abs(k2_mean - KL_REV) > 10 * stats["k2"].std / math.sqrt(n)  # 偏差远大于蒙特卡洛误差


def test_exact_kl_matches_definition_both_directions():
    lp, ref = t(PI).log(), t(REF).log()
    assert exact_kl(lp, ref).item() == pytest.approx(KL_REV, rel=1e-12)
    assert exact_kl(ref, lp).item() == pytest.approx(KL_FWD, rel=1e-12)
    assert exact_kl(lp, lp).item() == 0.0


# ---------------------------------------------------------------- 期望梯度：损失 vs 奖励


def rev():
    return GRAD_REV


def fwd():
    return GRAD_FWD


@pytest.mark.parametrize(
    ("estimator", "placement", "expected"),
    [
        ("k1", "loss", lambda: [0.0] * 5),  # E[∇k1] = E[∇log π] = 0
        ("k2", "loss", lambda: GRAD_REV),  # E[∇k2] = ∇KL(π‖π_ref)
        ("k3", "loss", lambda: GRAD_FWD),  # E[∇k3] = ∇KL(π_ref‖π)：正向 KL
        ("k3_corrected", "loss", lambda: GRAD_REV),  # E[∇(w k3)] = ∇KL(π‖π_ref)
        ("k1", "reward", lambda: GRAD_REV),  # REINFORCE：E[k1 ∇log π] = ∇KL(π‖π_ref)
        ("k3", "reward", lambda: [a - b for a, b in zip(GRAD_REV, GRAD_FWD, strict=True)]),  # 有偏
    ],
)
def test_expected_gradients_match_closed_forms(estimator, placement, expected):
    got = expected_kl_gradient(t(THETA), t(REF).log(), estimator, placement)
    assert got.tolist() == pytest.approx(expected(), abs=1e-13)
    assert abs(got.sum().item()) < 1e-13  # softmax 平移不变：梯度各分量之和为 0


def test_closed_form_kl_gradients_match_autograd():
    # 测试内独立地用 autograd 求精确 KL 的梯度，与闭式比较，再与 exact_kl_gradient 比较
    theta = t(THETA).requires_grad_(True)
    p = torch.softmax(theta, -1)
    q = t(REF)
    (g_rev,) = torch.autograd.grad((p * (p / q).log()).sum(), theta)
    theta2 = t(THETA).requires_grad_(True)
    p2 = torch.softmax(theta2, -1)
    (g_fwd,) = torch.autograd.grad((q * (q / p2).log()).sum(), theta2)
    assert g_rev.tolist() == pytest.approx(GRAD_REV, abs=1e-13)
    assert g_fwd.tolist() == pytest.approx(GRAD_FWD, abs=1e-13)
    assert exact_kl_gradient(t(THETA), q.log(), "reverse").tolist() == pytest.approx(GRAD_REV, abs=1e-13)
    assert exact_kl_gradient(t(THETA), q.log(), "forward").tolist() == pytest.approx(GRAD_FWD, abs=1e-13)


def test_expected_gradients_work_row_wise_on_a_table():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, generator=gen, dtype=F64)
    ref = torch.log_softmax(torch.randn(3, 6, generator=gen, dtype=F64), -1)
    for est, direction in (("k2", "reverse"), ("k3", "forward"), ("k3_corrected", "reverse")):
        got = expected_kl_gradient(logits, ref, est, "loss")
        assert torch.allclose(got, exact_kl_gradient(logits, ref, direction), atol=1e-13)


def test_forward_and_reverse_gradients_differ_here():
    assert max(abs(a - b) for a, b in zip(GRAD_REV, GRAD_FWD, strict=True)) > 0.05


# ---------------------------------------------------------------- 重要性采样修正的 k3


def test_importance_corrected_k3_value_equals_k3_on_policy():
    lp = t(LP).requires_grad_(True)
    assert torch.equal(importance_corrected_k3(lp, t(RF)), kl_estimate(lp, t(RF), "k3"))


def test_importance_corrected_k3_per_token_gradient_is_minus_d():
    # 同策略 w = 1：∂(w k3)/∂log π = k3 + (1 − e^d) = −d = log π − log π_ref（k3 本身的梯度是 1 − e^d）
    lp_vals, ref_vals = [-0.1, -2.0, -5.0, -0.7], [-2.0, -0.1, -5.0, -0.2]
    lp = torch.tensor([lp_vals], dtype=F64, requires_grad=True)
    importance_corrected_k3(lp, torch.tensor([ref_vals], dtype=F64)).sum().backward()
    assert lp.grad[0].tolist() == pytest.approx([x - r for x, r in zip(lp_vals, ref_vals, strict=True)], abs=1e-12)


def test_importance_corrected_k3_off_policy_is_unbiased_and_gives_reverse_gradient():
    # 样本来自 π_old ≠ π_θ：Σ π_old · w · k3 = KL(π_θ‖π_ref)，它对 θ 的梯度就是反向 KL 的梯度
    old = t([0.1, 0.4, 0.2, 0.2, 0.1])
    theta = t(THETA).requires_grad_(True)
    lp = torch.log_softmax(theta, -1)
    values = importance_corrected_k3(lp, t(REF).log(), old.log())
    expectation = (old * values).sum()
    assert expectation.item() == pytest.approx(KL_REV, rel=1e-12)
    expectation.backward()
    assert theta.grad.tolist() == pytest.approx(GRAD_REV, abs=1e-13)
    plain = (old * kl_estimate(lp.detach(), t(REF).log(), "k3")).sum().item()
    assert plain != pytest.approx(KL_REV, rel=0.01)  # 不修正的 k3 在异策略样本上有偏


# ---------------------------------------------------------------- 截断


def test_value_clamp_zeroes_the_gradient_beyond_the_threshold():
    # k3 = 10 的两个解：d ≈ 2.610（π_θ ≈ π_ref/13.6）与 d ≈ −11.000
    d = torch.tensor([[2.0, 2.7, 5.0, -10.0, -11.5]], dtype=F64)
    lp = torch.zeros_like(d, requires_grad=True)
    kl_estimate(lp, d, "k3", value_clamp=10.0).sum().backward()
    expected = [1 - math.exp(2.0), 0.0, 0.0, 1 - math.exp(-10.0), 0.0]
    assert lp.grad[0].tolist() == pytest.approx(expected, abs=1e-12)


def test_log_ratio_clamp_prevents_nan_gradients_in_float32():
    lp = torch.tensor([[-101.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -2.0]])
    kl_estimate(lp, ref, "k3", value_clamp=10.0).sum().backward()
    assert torch.isnan(lp.grad[0, 0])  # e^100 溢出为 inf，截断的梯度 0 乘 inf 得 NaN
    lp.grad = None
    out = kl_estimate(lp, ref, "k3", log_ratio_clamp=20.0, value_clamp=10.0)
    out.sum().backward()
    assert out[0, 0].item() == 10.0
    assert torch.isfinite(lp.grad).all() and lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(1 - math.exp(-1.0), rel=1e-6)


def test_log_ratio_clamp_changes_k1_and_k2_only_beyond_threshold():
    d = torch.tensor([[0.5, -3.0, 25.0, -40.0]], dtype=F64)
    lp = torch.zeros_like(d)
    assert kl_estimate(lp, d, "k1", log_ratio_clamp=20.0).tolist() == [[-0.5, 3.0, -20.0, 20.0]]
    assert kl_estimate(lp, d, "k2", log_ratio_clamp=20.0).tolist() == [[0.125, 4.5, 200.0, 200.0]]


# ---------------------------------------------------------------- β 的含义：两种最优解


def test_reverse_kl_optimum_is_the_tilted_reference_and_stationary_for_reverse_rules():
    ref, r, beta = t(REF).log(), t([0.0, 1.0, 0.0, 0.3, 0.0]), 0.2
    lp = reverse_kl_optimum(ref, r, beta)
    w = [q * math.exp(x / beta) for q, x in zip(REF, r.tolist(), strict=True)]
    assert lp.exp().tolist() == pytest.approx([v / sum(w) for v in w], rel=1e-12)
    p = lp.exp()
    pg = -(p * (r - (p * r).sum()))  # −∇E_π[r]（对 logits）
    for est, pl in (("k1", "reward"), ("k2", "loss"), ("k3_corrected", "loss")):
        assert (pg + beta * expected_kl_gradient(lp, ref, est, pl)).abs().max().item() < 1e-12
    assert (pg + beta * expected_kl_gradient(lp, ref, "k3", "loss")).abs().max().item() > 1e-3


def test_forward_kl_optimum_is_stationary_for_k3_in_loss_and_has_a_floor():
    ref, r = t(REF).log(), t([0.0, 1.0, 0.0, 0.3, 0.0])
    for beta in (0.01, 0.2, 3.0):
        lp = forward_kl_optimum(ref, r, beta)
        p = lp.exp()
        assert p.sum().item() == pytest.approx(1.0, abs=1e-12)
        pg = -(p * (r - (p * r).sum()))
        assert (pg + beta * expected_kl_gradient(lp, ref, "k3", "loss")).abs().max().item() < 1e-12
        floor = beta * t(REF) / (beta + r.max() - r)  # π†(y) ≥ β π_ref(y) / (β + r_max − r(y))
        assert (p >= floor * (1 - 1e-12)).all()


def test_small_beta_limits():
    # β → 0：两种最优解都把概率集中到奖励最高的回答；反向 KL 的错误回答概率 ~ e^{−1/β}，正向的 ~ β
    ref, r = t(REF).log(), t([0.0, 1.0, 0.0, 0.0, 0.0])
    beta = 0.02
    wrong_rev = 1 - reverse_kl_optimum(ref, r, beta).exp()[1].item()
    wrong_fwd = 1 - forward_kl_optimum(ref, r, beta).exp()[1].item()
    assert wrong_rev < 1e-15
    assert wrong_fwd == pytest.approx(beta * (1 - REF[1]), rel=0.05)


# ---------------------------------------------------------------- 坏输入


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: kl_estimate(torch.zeros(2, 3), torch.zeros(2, 3), "k4"),
            "未知的 estimator='k4'；可选：'k1', 'k2', 'k3'",
        ),
        (
            lambda: kl_estimate(torch.zeros(2, 3), torch.zeros(3, 2)),
            "ref_logps 的形状是 (3, 2)，期望 (2, 3)（与 logps 相同）",
        ),
        (lambda: kl_estimate(torch.zeros(1, 1), torch.zeros(1, 1), value_clamp=0.0), "value_clamp 应为正数或 None"),
        (
            lambda: kl_estimate(torch.zeros(1, 1), torch.zeros(1, 1), log_ratio_clamp=-20),
            "log_ratio_clamp 应为正数或 None",
        ),
        (
            lambda: importance_corrected_k3(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 1)),
            "old_logps 的形状是 (2, 1)，期望 (2, 3)（与 logps 相同）",
        ),
        (
            lambda: expected_kl_gradient(torch.zeros(4), torch.zeros(4), "low_var_kl"),
            "未知的 estimator='low_var_kl'；可选：'k1', 'k2', 'k3', 'k3_corrected'",
        ),
        (
            lambda: expected_kl_gradient(torch.zeros(4), torch.zeros(4), "k3", "advantage"),
            "未知的 placement='advantage'；可选：'loss', 'reward'",
        ),
        (
            lambda: exact_kl_gradient(torch.zeros(4), torch.zeros(4), "backward"),
            "未知的 direction='backward'；可选：'reverse', 'forward'",
        ),
        (lambda: exact_kl(torch.zeros(2, 4), torch.zeros(4)), "ref_logps 的形状是 (4,)，期望 (2, 4)（与 logps 相同）"),
        (
            lambda: categorical_log_ratios(torch.zeros(2, 4), torch.zeros(2, 4), 3, torch.Generator()),
            "logps 的形状是 (2, 4)，期望 1 维 (V,)",
        ),
        (lambda: estimator_stats(torch.zeros(5), torch.ones(4) / 4), "weights 的形状是 (4,)，期望 (5,)（与 d 相同）"),
        (
            lambda: forward_kl_optimum(torch.zeros(3), torch.zeros(2), 0.1),
            "rewards 的形状是 (2,)，期望 (3,)（与 ref_logps 相同）",
        ),
        (lambda: reverse_kl_optimum(torch.zeros(3), torch.zeros(3), 0.0), "beta 应 > 0"),
    ],
    ids=[
        "estimator",
        "shape",
        "value_clamp",
        "log_ratio_clamp",
        "old_logps",
        "gradient-estimator",
        "placement",
        "direction",
        "exact_kl",
        "ndim",
        "weights",
        "rewards",
        "beta",
    ],
)
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
