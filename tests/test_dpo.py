"""第 5 章 DPO 的公式测试：`rlhf_toy.losses.dpo.dpo_loss` 与 `rlhf_toy.train.dpo.train_dpo`。

每个测试的 docstring 写明它检查 docs/dpo.md 里的哪个式子（`eq:dpo-...`）。
"""

from __future__ import annotations

import math

import pytest
import torch

from rlhf_toy import BanditTask, DPOConfig, TablePolicy, dpo_loss, train_dpo
from rlhf_toy.train.dpo import sequence_logps


def _pairs(seed: int = 0, batch: int = 5) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(-3.0 * torch.rand(batch, generator=g) for _ in range(4))


def _delta(pc, pr, rc, rr) -> torch.Tensor:
    return (pc - rc) - (pr - rr)


def test_gradient_matches_closed_form():
    """eq:dpo-grad-logps：∂L/∂logπ(y_w) = −β σ(−βΔ)/B，∂L/∂logπ(y_l) = +β σ(−βΔ)/B，与 autograd 一致。"""
    pc, pr, rc, rr = _pairs(1, batch=6)
    pc.requires_grad_(True)
    pr.requires_grad_(True)
    for beta in (0.1, 0.5, 2.0):
        pc.grad = pr.grad = None
        loss, _ = dpo_loss(pc, pr, rc, rr, beta=beta)
        loss.backward()
        weight = torch.sigmoid(-beta * _delta(pc, pr, rc, rr)).detach()
        B = pc.shape[0]
        torch.testing.assert_close(pc.grad, -beta * weight / B)
        torch.testing.assert_close(pr.grad, beta * weight / B)


def test_gradient_weight_is_implicit_reward_gap():
    """eq:dpo-grad：权重 σ(−βΔ) = σ(r̂_l − r̂_w)，其中 r̂ 就是指标 rewards/chosen、rewards/rejected 的逐对值。"""
    pc, pr, rc, rr = _pairs(2, batch=1)
    beta = 0.3
    pc.requires_grad_(True)
    loss, m = dpo_loss(pc, pr, rc, rr, beta=beta)
    loss.backward()
    weight_from_grad = (-pc.grad / beta).item()  # B = 1
    assert weight_from_grad == pytest.approx(1 / (1 + math.exp(-(m["rewards/rejected"] - m["rewards/chosen"]))))


def test_table_policy_gradient_touches_only_the_pair():
    """eq:dpo-grad 用在查表策略上：∇_θ logπ(y_w) − ∇_θ logπ(y_l) = e_w − e_l，未出现在偏好对里的回答梯度恰为 0。"""
    torch.manual_seed(0)
    n_prompts, n_answers, beta = 4, 5, 0.7
    policy = TablePolicy.random(n_prompts, n_answers, scale=1.0)
    ref = TablePolicy.random(n_prompts, n_answers, scale=1.0)
    prompts = torch.arange(n_prompts)
    chosen = torch.tensor([[0], [1], [2], [3]])
    rejected = torch.tensor([[4], [3], [0], [1]])
    with torch.no_grad():
        ref_c, ref_r = sequence_logps(ref, prompts, chosen), sequence_logps(ref, prompts, rejected)
    pc, pr = sequence_logps(policy, prompts, chosen), sequence_logps(policy, prompts, rejected)
    loss, _ = dpo_loss(pc, pr, ref_c, ref_r, beta=beta)
    loss.backward()
    weight = torch.sigmoid(-beta * _delta(pc, pr, ref_c, ref_r)).detach()
    expected = torch.zeros(n_prompts, n_answers)
    expected[prompts, chosen[:, 0]] = -beta * weight / n_prompts
    expected[prompts, rejected[:, 0]] = beta * weight / n_prompts
    torch.testing.assert_close(policy.logits.grad, expected)


def test_loss_is_log2_when_policy_equals_reference():
    """eq:dpo-loss 在 Δ = 0（策略 = 参考模型）处：L = −log σ(0) = log 2。"""
    pc, pr, _, _ = _pairs(3)
    loss, _ = dpo_loss(pc, pr, pc.clone(), pr.clone(), beta=0.1)
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)


def test_loss_decreases_monotonically_in_margin():
    """eq:dpo-loss：L = −log σ(βΔ) 随 Δ 严格单调递减。"""
    deltas = torch.linspace(-20.0, 20.0, 81)
    zeros = torch.zeros(1)
    losses = torch.stack([dpo_loss(d.reshape(1), zeros, zeros, zeros, beta=0.5)[0] for d in deltas])
    assert (losses[1:] < losses[:-1]).all()


def test_beta_zero_gives_log2_and_zero_gradient():
    """eq:dpo-loss 与 eq:dpo-grad-logps 在 β = 0：损失恒为 log 2，梯度恒为 0（DPO 什么也学不到）。"""
    pc, pr, rc, rr = _pairs(4)
    pc.requires_grad_(True)
    pr.requires_grad_(True)
    loss, m = dpo_loss(pc, pr, rc, rr, beta=0.0)
    loss.backward()
    assert loss.item() == pytest.approx(math.log(2), abs=1e-7)
    assert torch.count_nonzero(pc.grad) == 0 and torch.count_nonzero(pr.grad) == 0
    assert m["rewards/margins"] == 0.0 and m["rewards/accuracies"] == 0.0


def test_matches_independent_formula():
    """eq:dpo-loss 对手写输入：与测试里独立写出的 mean_i log(1 + exp(−βΔ_i)) 一致（不调用包内代码）。"""
    chosen = [-1.0, -2.5, -0.3, -4.0]
    rejected = [-2.0, -1.0, -0.7, -4.5]
    ref_chosen = [-1.5, -2.0, -0.5, -3.0]
    ref_rejected = [-1.5, -1.5, -0.6, -5.0]
    beta = 0.25
    expected = 0.0
    for c, r, rc, rr in zip(chosen, rejected, ref_chosen, ref_rejected, strict=True):
        margin = beta * ((c - rc) - (r - rr))
        expected += math.log1p(math.exp(-margin)) / len(chosen)
    loss, _ = dpo_loss(*(torch.tensor(v) for v in (chosen, rejected, ref_chosen, ref_rejected)), beta=beta)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_metrics_match_trl_definitions():
    """隐式奖励指标（eq:dpo-loss 下的 r̂ = β log π/π_ref）：rewards/chosen、rejected、margins 为批平均，
    rewards/accuracies 是严格大于的比例（平局不算对）。"""
    chosen = torch.tensor([-1.0, -2.0, -3.0, -1.0])
    rejected = torch.tensor([-2.0, -2.0, -1.0, -1.0])
    ref_chosen = torch.tensor([-1.5, -2.0, -2.0, -1.0])
    ref_rejected = torch.tensor([-1.0, -2.0, -2.0, -1.0])
    beta = 0.5
    _, m = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=beta)
    r_c = [0.25, 0.0, -0.5, 0.0]  # β (logπ − logπ_ref)，逐对手算
    r_r = [-0.5, 0.0, 0.5, 0.0]
    assert m["rewards/chosen"] == pytest.approx(sum(r_c) / 4)
    assert m["rewards/rejected"] == pytest.approx(sum(r_r) / 4)
    assert m["rewards/margins"] == pytest.approx(sum(c - r for c, r in zip(r_c, r_r, strict=True)) / 4)
    assert m["rewards/accuracies"] == pytest.approx(0.25)  # 只有第 0 对严格大于；两对平局不算
    z = torch.zeros(3)
    assert dpo_loss(z, z, z, z)[1]["rewards/accuracies"] == 0.0  # 第 0 步：策略 = 参考模型


def test_metrics_are_floats_and_detached():
    """指标是 Python float，不把计算图带出函数。"""
    pc, pr, rc, rr = _pairs(5)
    pc.requires_grad_(True)
    _, m = dpo_loss(pc, pr, rc, rr)
    assert set(m) == {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"}
    assert all(type(v) is float for v in m.values())


def test_loss_ignores_a_common_shift():
    """eq:dpo-bt：给 y_w 与 y_l 的对数概率加同一个常数（如 log Z(x)）不改变损失——配分函数相消。"""
    pc, pr, rc, rr = _pairs(6)
    shift = torch.linspace(-3.0, 3.0, pc.shape[0])
    loss, _ = dpo_loss(pc, pr, rc, rr, beta=0.4)
    shifted, _ = dpo_loss(pc + shift, pr + shift, rc, rr, beta=0.4)
    torch.testing.assert_close(loss, shifted)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extreme_margins_are_finite_with_correct_limits(sign):
    """eq:dpo-loss 与 eq:dpo-grad-logps 在 |Δ| = 1e4：损失有限；Δ→+∞ 时 L→0、权重→0；Δ→−∞ 时 L ≈ β|Δ|、权重→1。"""
    beta = 0.1
    pc = torch.tensor([sign * 1e4], requires_grad=True)
    z = torch.zeros(1)
    loss, m = dpo_loss(pc, z, z, z, beta=beta)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(pc.grad).all()
    if sign > 0:
        assert loss.item() == pytest.approx(0.0, abs=1e-6)
        assert pc.grad.item() == pytest.approx(0.0, abs=1e-12)
        assert m["rewards/accuracies"] == 1.0
    else:
        assert loss.item() == pytest.approx(beta * 1e4, rel=1e-6)
        assert pc.grad.item() == pytest.approx(-beta, rel=1e-6)
        assert m["rewards/accuracies"] == 0.0


@pytest.mark.parametrize(
    ("args", "beta", "match"),
    [
        (
            (torch.zeros(2), torch.zeros(3), torch.zeros(2), torch.zeros(2)),
            0.1,
            r"rejected_logps 的形状是 \(3,\)，期望 \(2,\)",
        ),
        (
            (torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(4)),
            0.1,
            r"ref_rejected_logps 的形状是 \(4,\)，期望 \(2,\)",
        ),
        (
            (torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3)),
            0.1,
            r"chosen_logps 的形状是 \(2, 3\)，期望 1 维 \(B,\)",
        ),
        (
            (torch.zeros(2), torch.zeros(2, 1), torch.zeros(2), torch.zeros(2)),
            0.1,
            r"rejected_logps 的形状是 \(2, 1\)，期望 \(2,\)",
        ),
        (
            (torch.zeros(2), torch.zeros(2), torch.tensor([0.0, math.nan]), torch.zeros(2)),
            0.1,
            r"ref_chosen_logps 含 1 个非有限值",
        ),
        (
            (torch.tensor([-math.inf, 0.0]), torch.zeros(2), torch.zeros(2), torch.zeros(2)),
            0.1,
            r"chosen_logps 含 1 个非有限值",
        ),
        ((torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(2)), -0.1, r"beta 应 ≥ 0，实际是 -0.1"),
        ((torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(2)), math.nan, r"beta 应 ≥ 0"),
    ],
    ids=["mismatch", "mismatch-ref", "2d", "2d-rejected", "nan", "inf", "negative-beta", "nan-beta"],
)
def test_bad_input_raises(args, beta, match):
    """坏输入抛 ValueError，信息写出参数名与实际 / 期望形状。"""
    with pytest.raises(ValueError, match=match):
        dpo_loss(*args, beta=beta)


def test_train_dpo_on_bandit_raises_chosen_probability_and_margins():
    """train_dpo（eq:dpo-loss 的梯度下降）：被选回答概率与 rewards/margins 随步数上升；参考模型不被修改。"""
    torch.manual_seed(0)
    task = BanditTask.make(8, 5)
    policy = TablePolicy.random(8, 5)
    ref = policy.frozen_copy()
    ref_logits = ref.logits.detach().clone()
    pairs = task.preference_pairs()
    p0 = task.success_prob(policy)
    history = train_dpo(policy, pairs, DPOConfig(steps=20), ref_policy=ref, evaluate=task.evaluate)
    assert len(history) == 20 and [h["step"] for h in history] == list(range(1, 21))
    first, last = history[0], history[-1]
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-6)  # 第一条记录用的是更新前的策略 = 参考模型
    assert first["rewards/accuracies"] == 0.0
    assert last["loss"] < 0.3 and last["rewards/margins"] > 1.0 and last["rewards/accuracies"] == 1.0
    assert last["rewards/chosen"] > 0.0 > last["rewards/rejected"]
    assert last["success_prob"] > max(0.9, p0 + 0.5)
    margins = [h["rewards/margins"] for h in history]
    assert all(b > a for a, b in zip(margins, margins[1:], strict=False))
    torch.testing.assert_close(ref.logits, ref_logits)
