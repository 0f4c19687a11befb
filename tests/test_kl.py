"""KL 估计量 k3（第 6 章式 eq:grpo-k3、eq:grpo-k3-grad；Schulman 2020；DeepSeekMath 式 (4)）。

记 d = log π_ref(y) − log π_θ(y)，样本 y ~ π_θ：
  k3 = e^d − d − 1 ≥ 0，E_{π_θ}[k3] = KL(π_θ ‖ π_ref)，∂k3/∂log π_θ = 1 − e^d。
期望值都由公式独立算出（math / 纯 Python），不调用 rlhf_toy 的实现。
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from rlhf_toy import BanditTask, TablePolicy, importance_corrected_k3, kl_estimate
from rlhf_toy.studies.kl_estimators import exact_kl_gradient, expected_kl_gradient, per_sample_kl_gradients

# 一个 5 类的小分布：q = π_θ（采样分布），p = π_ref
Q = [0.05, 0.10, 0.20, 0.25, 0.40]
P = [0.30, 0.25, 0.20, 0.15, 0.10]
KL_QP = sum(q * math.log(q / p) for q, p in zip(Q, P, strict=True))  # 反向 KL(π_θ ‖ π_ref)
KL_PQ = sum(p * math.log(p / q) for q, p in zip(Q, P, strict=True))  # 正向 KL(π_ref ‖ π_θ)


def k3(logps, ref_logps):
    return kl_estimate(logps, ref_logps, "k3")


def test_k3_value_matches_formula():
    lp = [[-0.1, -2.0, -5.0], [-0.7, -0.7, -30.0]]
    ref = [[-2.0, -0.1, -5.0], [-0.2, -3.0, -1.0]]
    got = k3(torch.tensor(lp, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64))
    for i in range(2):
        for t in range(3):
            d = ref[i][t] - lp[i][t]
            assert got[i, t].item() == pytest.approx(math.exp(d) - d - 1, rel=1e-12)


def test_k3_is_nonnegative():
    # e^d ≥ 1 + d 对所有 d 成立；float64 下逐点检查（float32 在 |d| ~ 1e-7 处会有 −6e-8 量级的舍入误差）
    d = torch.cat(
        [torch.linspace(-30, 30, 20001, dtype=torch.float64), torch.logspace(-12, -1, 200, dtype=torch.float64)]
    )
    d = torch.cat([d, -d])
    lp = torch.full_like(d, -1.0)
    assert (k3(lp[None], (lp + d)[None]) >= 0).all()
    d32 = d.float()
    assert (k3(lp.float()[None], (lp.float() + d32)[None]) >= -torch.finfo(torch.float32).eps).all()


def test_k3_is_exactly_zero_when_logps_equal_ref_logps():
    lp = torch.tensor([[-0.3, -4.0, -1e-3], [-20.0, -1.0, 0.0]])
    assert k3(lp, lp.clone()).tolist() == [[0.0] * 3] * 2


def test_k3_exact_expectation_is_reverse_kl():
    # Σ_y q(y)·k3(y) = Σ_y p(y) − 1 + KL(q‖p) = KL(q‖p)：控制变量 e^d − 1 的期望恰为 0
    lp = torch.tensor([Q], dtype=torch.float64).log()
    ref = torch.tensor([P], dtype=torch.float64).log()
    expectation = (torch.tensor(Q, dtype=torch.float64) * k3(lp, ref)[0]).sum().item()
    assert expectation == pytest.approx(KL_QP, rel=1e-12)


def test_k3_is_unbiased_monte_carlo():
    gen = torch.Generator().manual_seed(0)
    n = 100_000
    samples = torch.multinomial(torch.tensor(Q), n, replacement=True, generator=gen)
    lp = torch.tensor(Q, dtype=torch.float64).log()[samples][None]
    ref = torch.tensor(P, dtype=torch.float64).log()[samples][None]
    values = k3(lp, ref)[0]
    stderr = values.std().item() / math.sqrt(n)
    assert abs(values.mean().item() - KL_QP) < 4 * stderr  # 宽松：4 个标准误
    assert abs(values.mean().item() - KL_QP) < 0.05 * KL_QP


def test_k3_gradient_matches_closed_form():
    # ∂k3/∂log π_θ = ∂(e^d − d − 1)/∂d · ∂d/∂log π_θ = (e^d − 1)·(−1) = 1 − e^d = 1 − π_ref/π_θ
    lp_vals = [-0.1, -2.0, -5.0, -0.7, -3.0]
    ref_vals = [-2.0, -0.1, -5.0, -0.2, -9.0]
    lp = torch.tensor([lp_vals], dtype=torch.float64, requires_grad=True)
    k3(lp, torch.tensor([ref_vals], dtype=torch.float64)).sum().backward()
    expected = [1 - math.exp(r - x) for x, r in zip(lp_vals, ref_vals, strict=True)]
    assert lp.grad[0].tolist() == pytest.approx(expected, rel=1e-12)
    assert lp.grad[0, 2].item() == 0.0  # d = 0 时梯度为 0：k3 在 π_θ = π_ref 处取最小值


def test_expected_k3_gradient_is_forward_kl_gradient():
    """把采样看成固定（loss 里的用法），E_{π_θ}[∇_θ k3] = ∇_θ KL(π_ref ‖ π_θ)，即正向 KL 的梯度。

    softmax 策略的 logits 为 θ：∇_θ KL(π_ref ‖ π_θ) = π_θ − π_ref（按分量）。
    """
    theta = torch.tensor(Q, dtype=torch.float64).log().requires_grad_(True)
    lp = torch.log_softmax(theta, -1)
    ref = torch.tensor(P, dtype=torch.float64).log()
    weights = lp.detach().exp()  # 采样分布不参与求导
    (weights * k3(lp[None], ref[None])[0]).sum().backward()
    expected = [q - p for q, p in zip(Q, P, strict=True)]
    assert theta.grad.tolist() == pytest.approx(expected, abs=1e-12)
    assert KL_PQ != pytest.approx(KL_QP, rel=0.05)  # 这两个 KL 在这里确实不同


def test_k1_and_k2_values():
    lp = torch.tensor([[-0.5, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    assert kl_estimate(lp, ref, "k1")[0].tolist() == pytest.approx([1.0, -1.0], abs=1e-12)
    assert kl_estimate(lp, ref, "k2")[0].tolist() == pytest.approx([0.5, 0.5], abs=1e-12)


def test_off_policy_expected_gradients_of_loss_and_reward_placements():
    """docs/kl.md 的“异策略”：样本来自 π_old ≠ π_θ 时，E_{π_old}[∇k3] = Σ π_old (1 − π_ref/π_θ) ∇log π_θ 两个 KL 的梯度都不是，
    k2 也不再是反向 KL 的梯度，放进损失的做法里只有 w·k3 是。放进奖励时（PPO、TRL RLOO），k1 用 log π_old 算好、不带梯度，
    代理目标是 w·k1_old，期望梯度是 ∇KL(π_θ‖π_ref) − ∇KL(π_θ‖π_old)；用当前策略重算的 k1 乘 w 才是反向 KL 的梯度。
    老虎机第 0 个提示词，π_old 把正确回答抬高 3，π_θ 抬高 3.5；对支撑集精确求和。"""
    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    ref = TablePolicy.random(20, 8).logits[0].detach().double().log_softmax(-1)
    old = ref.clone()
    old[task.correct[0]] += 3.0
    old_logps = old.log_softmax(-1)
    theta = ref.clone()
    theta[task.correct[0]] += 3.5
    reverse, forward = exact_kl_gradient(theta, ref, "reverse"), exact_kl_gradient(theta, ref, "forward")

    def expected(per_answer):
        t = theta.clone().requires_grad_(True)
        logps = t.log_softmax(-1)
        (grad,) = torch.autograd.grad((old_logps.exp() * per_answer(logps)).sum(), t)
        return grad

    k3 = expected(lambda lp: kl_estimate(lp[None], ref[None], "k3")[0])
    k2 = expected(lambda lp: kl_estimate(lp[None], ref[None], "k2")[0])
    corrected = expected(lambda lp: importance_corrected_k3(lp[None], ref[None], old_logps[None])[0])
    # 闭式：Σ_y π_old(y) (1 − e^{d(y)}) (e_y − π_θ)，d 在 π_θ 处
    probs = theta.softmax(-1)
    coef = old_logps.exp() * (1 - (ref - theta.log_softmax(-1)).exp())
    closed = coef - coef.sum() * probs
    assert torch.allclose(k3, closed, atol=1e-12)
    gap = (reverse - forward).abs().max().item()
    assert gap > 0.05
    for g in (k3, k2):
        assert (g - reverse).abs().max().item() > 0.05 and (g - forward).abs().max().item() > 0.05
    assert torch.allclose(corrected, reverse, atol=1e-12)
    # KL 进奖励：优势里的 k1 不带梯度，代理目标 w·k1 对 θ 求导（不计截断）
    ratio = lambda lp: (lp - old_logps).exp()  # noqa: E731
    stale = expected(lambda lp: ratio(lp) * kl_estimate(old_logps[None], ref[None], "k1")[0])
    fresh = expected(lambda lp: ratio(lp) * kl_estimate(lp[None], ref[None], "k1")[0].detach())
    assert torch.allclose(stale, reverse - exact_kl_gradient(theta, old_logps, "reverse"), atol=1e-12)
    assert (stale - reverse).abs().max().item() > 0.05
    assert torch.allclose(fresh, reverse, atol=1e-12)


def test_expected_gradient_with_verl_clamps_drops_clamped_answers():
    """verl 的限幅（log_ratio_clamp=20, value_clamp=10）：k3 ≥ 10 的回答没有 KL 梯度，其余同未限幅的 k3（docs/kl.md 结论第 1 条）。"""
    ref = torch.tensor([-1.0, -1.5, -2.0, -3.0], dtype=torch.float64).log_softmax(-1)
    logits = ref.clone()
    logits[0] += 6.0  # 其他回答的 π_θ/π_ref 约 1/60：d ≈ 4，k3 ≈ 50 > 10
    logits[1] += 5.0  # 第 1 个回答：d ≈ 1，未被限幅
    logps = logits.log_softmax(-1)
    probs, d = logps.exp(), ref - logps
    unclamped = 1 - d.exp()
    kept = (d.exp() - d - 1) < 10
    assert kept.tolist() == [True, True, False, False]
    coef = probs * unclamped * kept
    expected = coef - coef.sum() * probs  # Σ_y π(y) c(y) (e_y − π)
    got = expected_kl_gradient(logits, ref, "k3", "loss", log_ratio_clamp=20.0, value_clamp=10.0)
    assert torch.allclose(got, expected, atol=1e-12)
    assert not torch.allclose(got, expected_kl_gradient(logits, ref, "k3", "loss"))
    with pytest.raises(ValueError, match="k3_corrected 不支持限幅参数"):
        expected_kl_gradient(logits, ref, "k3_corrected", value_clamp=10.0)


@pytest.mark.parametrize(
    ("estimator", "placement"),
    [("k1", "loss"), ("k2", "loss"), ("k3", "loss"), ("k3_corrected", "loss"), ("k1", "reward"), ("k3", "reward")],
)
def test_per_sample_gradients_average_to_the_expected_gradient(estimator, placement):
    """per_sample_kl_gradients 的第 y 行是 c(y)(e_y − π)，按 π 加权求和就是 expected_kl_gradient；逐行（提示词）互不相关。"""
    torch.manual_seed(0)
    ref = torch.randn(3, 5, dtype=torch.float64).log_softmax(-1)
    logits = ref + torch.randn(3, 5, dtype=torch.float64)
    g = per_sample_kl_gradients(logits, ref, estimator, placement)
    assert g.shape == (3, 5, 5)
    probs = logits.softmax(-1)
    assert torch.allclose((probs[..., None] * g).sum(-2), expected_kl_gradient(logits, ref, estimator, placement))
    d = ref - logits.log_softmax(-1)
    coef = {
        ("k1", "loss"): torch.ones_like(d),
        ("k2", "loss"): -d,
        ("k3", "loss"): 1 - d.exp(),
        ("k3_corrected", "loss"): -d,
        ("k1", "reward"): -d,
        ("k3", "reward"): d.exp() - d - 1,
    }[estimator, placement]
    score = torch.eye(5, dtype=torch.float64) - probs[:, None, :]  # [b, y, :] = e_y − π_b
    assert torch.allclose(g, coef[..., None] * score, atol=1e-12)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: kl_estimate(torch.zeros(2, 3), torch.zeros(2, 2)),
            "ref_logps 的形状是 (2, 2)，期望 (2, 3)（与 logps 相同）",
        ),
        (
            lambda: kl_estimate(torch.zeros(2, 3), torch.zeros(2, 3), "k4"),
            "未知的 estimator='k4'；可选：'k1', 'k2', 'k3'",
        ),
        (lambda: kl_estimate([[0.0]], torch.zeros(1, 1)), "logps 应是 torch.Tensor，实际是 list"),
    ],
    ids=["shape", "estimator", "type"],
)
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_per_token_k3_at_t2_is_exact_at_position_1_and_reweighted_after():
    """T = 2 时逐 token 求和的 k3（不带比率 w）的精确期望梯度（第 6 章“这是逐位置的结论”一段）。

    词表 3、回答长 2，策略与参考模型都是查表的（同第 7 章“T > 1”一节的例子）。对 9 条回答精确求和，
    采样概率不求导。序列正向 KL(π_ref ‖ π_θ) 的梯度由 autograd 独立算出。结论：
    第 1 个位置的参数上两者相等；第 2 个位置上，前缀 y1 那一行等于正向 KL 的那一行乘 π_θ(y1)/π_ref(y1)，
    是重新加权，不是正向 KL 的梯度，也不是反向序列 KL 的梯度。修正 k3（乘带梯度的 w）在第 2 个位置上
    正好是反向序列 KL 的梯度，第 1 个位置上差一截（Tang & Munos 2025 的“部分梯度”）。
    """
    import itertools

    gen = torch.Generator().manual_seed(0)
    V = 3
    ref1 = torch.randn(V, generator=gen, dtype=torch.float64).log_softmax(-1)
    ref2 = torch.randn(V, V, generator=gen, dtype=torch.float64).log_softmax(-1)
    logits1 = (ref1 + torch.randn(V, generator=gen, dtype=torch.float64)).requires_grad_(True)
    logits2 = (ref2 + torch.randn(V, V, generator=gen, dtype=torch.float64)).requires_grad_(True)
    params = (logits1, logits2)
    sequences = list(itertools.product(range(V), repeat=2))

    def token_logps(y1, y2):
        logps = torch.stack([logits1.log_softmax(-1)[y1], logits2[y1].log_softmax(-1)[y2]])
        return logps, torch.stack([ref1[y1], ref2[y1, y2]])

    def expected_gradient(per_sample):
        total = 0
        for y in sequences:
            logps, ref = token_logps(*y)
            total = total + logps.sum().exp().detach() * per_sample(logps, ref)
        return torch.autograd.grad(total, params)

    # 序列 KL 的精确梯度：直接对 9 条回答求和（概率也求导），不用任何估计量
    forward = 0
    reverse = 0
    for y in sequences:
        logps, ref = token_logps(*y)
        forward = forward + ref.sum().exp() * (ref - logps).sum()
        reverse = reverse + logps.sum().exp() * (logps - ref).sum()
    fwd1, fwd2 = torch.autograd.grad(forward, params, retain_graph=True)
    rev1, rev2 = torch.autograd.grad(reverse, params)

    plain1, plain2 = expected_gradient(lambda lp, ref: kl_estimate(lp[None], ref[None], "k3").sum())
    # 第 1 个位置：正好是序列正向 KL 的梯度
    assert torch.allclose(plain1, fwd1, atol=1e-12)
    # 第 2 个位置：前缀 y1 的那一行乘 π_θ(y1)/π_ref(y1)
    weight = (logits1.softmax(-1) / ref1.exp()).detach()
    assert torch.allclose(plain2, fwd2 * weight[:, None], atol=1e-12)
    assert (plain2 - fwd2).abs().max() > 0.05  # 不是正向 KL 的梯度
    assert (plain1 - rev1).abs().max() > 0.05 and (plain2 - rev2).abs().max() > 0.01  # 也不是反向 KL 的梯度

    corr1, corr2 = expected_gradient(lambda lp, ref: importance_corrected_k3(lp[None], ref[None]).sum())
    assert torch.allclose(corr2, rev2, atol=1e-12)  # 最后一个位置精确
    assert (corr1 - rev1).abs().max() > 0.05  # 第 1 个位置漏掉了对后面位置 KL 的影响
