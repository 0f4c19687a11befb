"""verl 登记的策略损失（#28）的公式测试：`rlhf_toy.losses` 的 group_pg、log_ratio_penalty、clipped_is_weight_verl、
soft_gate_verl、divergence_mask、covariance_clip、geometric_mean。

与 verl 的逐式对照在 `tests/conformance/test_*_verl.py`；这里不用 verl：坏输入的报错、边界情况（整行掩码为 0、
整批掩码为 0、同策略）、手算的小例子，以及每个 `*_gradient_weight` 与 autograd 的梯度一致。
"""

from __future__ import annotations

import math

import pytest
import torch

from rlhf_toy.losses.clipped_is_weight_verl import cispo_gradient_weight_verl, cispo_loss_verl
from rlhf_toy.losses.covariance_clip import (
    clip_cov_gradient_weight,
    clip_cov_loss,
    clip_cov_selection,
    kl_cov_gradient_weight,
    kl_cov_loss,
    kl_cov_selection,
    token_covariance,
)
from rlhf_toy.losses.divergence_mask import binary_divergence_valid, dppo_gradient_weight, dppo_loss
from rlhf_toy.losses.geometric_mean import gmpo_gradient_weight_verl, gmpo_loss_verl, sign_clipped_log_ratio
from rlhf_toy.losses.group_pg import gpg_gradient_weight, gpg_loss
from rlhf_toy.losses.grpo import clipped_surrogate
from rlhf_toy.losses.log_ratio_penalty import dro_gradient_weight, dro_loss
from rlhf_toy.losses.soft_gate_verl import sapo_gradient_weight_verl, sapo_loss_verl, soft_gate

F64 = dict(dtype=torch.float64)


def batch(seed: int = 0, b: int = 6, t: int = 5):
    """对数概率在 (−3, 0) 里；第 1 行比率 e^{+2}、第 2 行 e^{−2}（截断两侧都起作用）；最后一行整行是填充。"""
    g = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(b, t, generator=g, **F64)
    logps = old + 0.3 * torch.randn(b, t, generator=g, **F64)
    logps[1], logps[2] = old[1] + 2.0, old[2] - 2.0
    adv = torch.randn(b, generator=g, **F64)
    adv[1], adv[2] = 1.0, -1.0
    lengths = torch.tensor([t, 3, t, 2, 4, 0])[:b]
    mask = (torch.arange(t)[None] < lengths[:, None]).double()
    return logps.requires_grad_(True), old, adv, mask


# 每个损失：名字 -> 以 (logps, old, adv, mask, **kw) 调用的函数
LOSSES = {
    "gpg": lambda lp, old, adv, m, **kw: gpg_loss(lp, adv, m, **kw),
    "dro": lambda lp, old, adv, m, **kw: dro_loss(lp, old, adv, m, beta=0.3, **kw),
    "cispo_verl": lambda lp, old, adv, m, **kw: cispo_loss_verl(lp, old, adv, m, **kw),
    "sapo_verl": lambda lp, old, adv, m, **kw: sapo_loss_verl(lp, old, adv, m),
    "dppo_tv": lambda lp, old, adv, m, **kw: dppo_loss(lp, old, adv, m, divergence="tv", **kw),
    "dppo_kl": lambda lp, old, adv, m, **kw: dppo_loss(lp, old, adv, m, divergence="kl", **kw),
    "clip_cov": lambda lp, old, adv, m, **kw: clip_cov_loss(lp, old, adv, m, clip_cov_ratio=0.3, **kw),
    "kl_cov": lambda lp, old, adv, m, **kw: kl_cov_loss(lp, old, adv, m, kl_cov_ratio=0.3, **kw),
    "gmpo_verl": lambda lp, old, adv, m, **kw: gmpo_loss_verl(lp, old, adv, m),
}
WITH_OLD = sorted(set(LOSSES) - {"gpg"})


# ---------- 坏输入 ----------


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_bad_shapes_name_the_argument_and_both_shapes(name):
    logps, old, adv, mask = batch()
    fn = LOSSES[name]
    with pytest.raises(ValueError, match=r"logps 的形状是 \(30,\)，期望 2 维 \(B, T\)"):
        fn(logps.detach().reshape(-1), old, adv, mask)
    with pytest.raises(ValueError, match=r"advantages 的形状是 \(5,\)，期望 \(6,\)"):
        fn(logps, old, adv[:5], mask)
    with pytest.raises(ValueError, match=r"advantages 的形状是 \(6, 4\)，期望 \(6, 5\)"):
        fn(logps, old, adv[:, None].expand(6, 4), mask)
    with pytest.raises(ValueError, match=r"mask 的形状是 \(6, 4\)，期望 \(6, 5\)"):
        fn(logps, old, adv, mask[:, :4])
    with pytest.raises(ValueError, match="mask 只能含 0 和 1"):
        fn(logps, old, adv, mask * 2)
    with pytest.raises(ValueError, match="logps 含 1 个非有限值"):
        fn(
            logps.detach().index_put((torch.tensor([0]), torch.tensor([0])), torch.tensor(math.nan, **F64)),
            old,
            adv,
            mask,
        )
    with pytest.raises(ValueError, match=r"空批次"):
        fn(logps[:0], old[:0], adv[:0], mask[:0])


@pytest.mark.parametrize("name", WITH_OLD)
def test_old_logps_must_match_and_be_detached(name):
    logps, old, adv, mask = batch()
    with pytest.raises(ValueError, match=r"old_logps 的形状是 \(6, 4\)，期望 \(6, 5\)（与 logps 相同）"):
        LOSSES[name](logps, old[:, :4], adv, mask)
    with pytest.raises(ValueError, match="old_logps 带着梯度"):
        LOSSES[name](logps, old.clone().requires_grad_(True), adv, mask)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda *a: gpg_loss(a[0], a[2], a[3], loss_type="mean"), "未知的 loss_type='mean'"),
        (lambda *a: dro_loss(*a, beta=-0.1), "beta 应 ≥ 0"),
        (lambda *a: dro_loss(*a, beta=math.inf), "beta 应是有限数"),
        (lambda *a: cispo_loss_verl(*a, epsilon=-0.2), "epsilon 应 ≥ 0"),
        (lambda *a: cispo_loss_verl(*a, epsilon_high=-1.0), "epsilon_high 应 ≥ 0"),
        (lambda *a: sapo_loss_verl(*a, tau_pos=0.0), "tau_pos 应是有限的正数"),
        (lambda *a: sapo_loss_verl(*a, tau_neg=-1.0), "tau_neg 应是有限的正数"),
        (lambda *a: dppo_loss(*a, divergence="js"), "未知的 divergence='js'"),
        (lambda *a: dppo_loss(*a, clip_ratio_c=0.0), "clip_ratio_c 应是有限的正数"),
        (lambda *a: dppo_loss(*a, epsilon=-0.1), "epsilon 应 ≥ 0"),
        (lambda *a: clip_cov_loss(*a, clip_cov_ratio=0.0), "clip_cov_ratio 应是有限的正数"),
        (lambda *a: clip_cov_loss(*a, clip_cov_lb=5.0, clip_cov_ub=1.0), "clip_cov_lb 应小于 clip_cov_ub"),
        (lambda *a: kl_cov_loss(*a, kl_cov_ratio=-0.1), "kl_cov_ratio 应是有限的正数"),
        (lambda *a: kl_cov_loss(*a, ppo_kl_coef=-1.0), "ppo_kl_coef 应 ≥ 0"),
        (lambda *a: gmpo_loss_verl(*a, epsilon=-0.4), "epsilon 应 ≥ 0"),
    ],
)
def test_bad_hyperparameters_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call(*batch())


# ---------- 边界情况 ----------


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_all_zero_mask_gives_zero_loss_and_zero_gradient(name):
    logps, old, adv, mask = batch()
    loss, metrics = LOSSES[name](logps, old, adv, torch.zeros_like(mask))
    (grad,) = torch.autograd.grad(loss, logps)
    assert loss.item() == 0.0
    assert torch.equal(grad, torch.zeros_like(grad))
    assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_padding_gets_no_gradient_and_does_not_change_the_loss(name):
    logps, old, adv, mask = batch()
    loss, _ = LOSSES[name](logps, old, adv, mask)
    (grad,) = torch.autograd.grad(loss, logps)
    assert torch.equal(grad[mask == 0], torch.zeros_like(grad[mask == 0]))
    moved = logps.detach().clone()
    moved[mask == 0] += 7.0  # 填充位置换成别的有限值
    old_moved = old.clone()
    old_moved[mask == 0] -= 3.0
    torch.manual_seed(0)
    again, _ = LOSSES[name](moved, old_moved, adv, mask)
    torch.manual_seed(0)
    first, _ = LOSSES[name](logps.detach(), old, adv, mask)
    assert torch.allclose(again, first)  # Clip-Cov / KL-Cov 的协方差也只在掩码内取平均


ON_POLICY = [(n, lt) for n in sorted(set(LOSSES) - {"clip_cov"}) for lt in ("bnpo", "grpo")]
ON_POLICY = [(n, lt) for n, lt in ON_POLICY if n not in ("sapo_verl", "gmpo_verl") or lt == "grpo"]


@pytest.mark.parametrize(("name", "loss_type"), ON_POLICY)
def test_on_policy_gradient_is_the_policy_gradient(name, loss_type):
    """同策略（$w \\equiv 1$）时每个损失的梯度都是 $-\\hat A$（按汇总方式分摊）：与 GPG 相同。
    SAPO 与 GMPO 的汇总写死为按回答平均，只比 grpo；Clip-Cov 另外截掉被挑中的 token，单独测。"""
    logps, _, adv, mask = batch()
    old = logps.detach().clone()
    kw = {} if name in ("sapo_verl", "gmpo_verl") else {"loss_type": loss_type}
    loss, _ = LOSSES[name](logps, old, adv, mask, **kw)
    (grad,) = torch.autograd.grad(loss, logps)
    reference, _ = gpg_loss(logps, adv, mask, loss_type=loss_type)
    (expected,) = torch.autograd.grad(reference, logps)
    torch.testing.assert_close(grad, expected)


def test_zero_advantage_tokens_carry_no_gradient_except_dro_penalty():
    logps, old, _, mask = batch()
    adv = torch.zeros(6, **F64)
    for name in sorted(set(LOSSES) - {"dro", "kl_cov"}):
        loss, _ = LOSSES[name](logps, old, adv, mask)
        (grad,) = torch.autograd.grad(loss, logps)
        assert torch.equal(grad, torch.zeros_like(grad)), name
    loss, _ = dro_loss(logps, old, adv, mask, beta=0.3)  # 二次惩罚不看优势：A = 0 的 token 仍被拉回
    (grad,) = torch.autograd.grad(loss, logps)
    torch.testing.assert_close(grad, 0.3 * (logps.detach() - old) * mask / mask.sum())


def test_gmpo_empty_rows_count_in_b_like_grpo():
    logps, old, adv, mask = batch()
    loss, _ = gmpo_loss_verl(logps, old, adv, mask)
    without, _ = gmpo_loss_verl(logps[:5], old[:5], adv[:5], mask[:5])
    torch.testing.assert_close(loss * 6, without * 5)


# ---------- 手算的例子 ----------


def test_cispo_verl_hand_example():
    """w = e^{±1}，ε = 0.2：系数被压到 1.2 与 0.8，梯度仍流过 log π。"""
    logps = torch.tensor([[1.0, -1.0]], **F64).requires_grad_(True)
    old = torch.zeros(1, 2, **F64)
    loss, metrics = cispo_loss_verl(logps, old, torch.tensor([2.0], **F64), torch.ones(1, 2, **F64))
    assert loss.item() == pytest.approx(-(1.2 * 2 * 1.0 + 0.8 * 2 * -1.0) / 2)
    (grad,) = torch.autograd.grad(loss, logps)
    torch.testing.assert_close(grad, torch.tensor([[-1.2, -0.8]], **F64))
    assert metrics["actor/pg_clipfrac"] == 1.0


def test_soft_gate_value_and_slope_at_one():
    w = torch.tensor([1.0], **F64, requires_grad=True)
    for tau in (0.5, 1.0, 1.05, 3.0):
        f = soft_gate(w, tau)
        assert f.item() == pytest.approx(2 / tau)
        (slope,) = torch.autograd.grad(f.sum(), w)
        assert slope.item() == pytest.approx(1.0)


def test_binary_divergences_by_hand():
    old = torch.log(torch.tensor([0.5, 0.5, 0.01, 0.9], **F64))
    new = torch.log(torch.tensor([0.8, 0.2, 0.05, 0.99], **F64))
    adv = torch.tensor([1.0, -1.0, 1.0, 1.0], **F64)
    # TV：|Δp| = 0.3、0.3、0.04、0.09；δ = 0.2 挡住前两个（各自朝优势方向走过头）
    assert binary_divergence_valid(new, old, adv, 0.2, divergence="tv").tolist() == [False, False, True, True]
    kl = [
        p0 * math.log(p0 / p) + (1 - p0) * math.log((1 - p0) / (1 - p))
        for p0, p in ((0.5, 0.8), (0.5, 0.2), (0.01, 0.05), (0.9, 0.99))
    ]
    assert [round(k, 4) for k in kl] == [0.2231, 0.2231, 0.0247, 0.1445]
    assert binary_divergence_valid(new, old, adv, 0.05, divergence="kl").tolist() == [False, False, True, False]
    # 第 4 个是高概率 token：比率只有 1.1（PPO 的 ε = 0.2 不截），二元 KL 却已超过 0.05；第 3 个比率是 5，仍在信任域内


def test_sign_clipped_log_ratio_and_gmpo_hand_example():
    lw = torch.tensor([[0.5, -0.5, 0.1]], **F64)
    assert sign_clipped_log_ratio(lw, torch.tensor(1.0, **F64), 0.2).tolist() == [[0.2, -0.5, 0.1]]
    assert sign_clipped_log_ratio(lw, torch.tensor(-1.0, **F64), 0.2).tolist() == [[0.5, -0.2, 0.1]]
    assert sign_clipped_log_ratio(lw, torch.tensor(0.0, **F64), 0.2).abs().sum() == 0
    loss, _ = gmpo_loss_verl(lw, torch.zeros(1, 3, **F64), torch.tensor([2.0], **F64), torch.ones(1, 3, **F64))
    assert loss.item() == pytest.approx(-2.0 * math.exp((0.2 - 0.5 + 0.1) / 3))


def test_token_covariance_is_the_centred_product_inside_the_mask():
    logps, _, adv, mask = batch()
    a = adv[:, None].expand_as(mask)
    cov = token_covariance(logps, a, mask)
    inside = mask.bool()
    manual = (a[inside] - a[inside].mean()) * (logps.detach()[inside] - logps.detach()[inside].mean())
    torch.testing.assert_close(cov[inside], manual)
    assert torch.isneginf(cov[~inside]).all()


def test_kl_cov_picks_the_largest_covariances():
    cov = torch.tensor([[0.1, 3.0, float("-inf")], [2.0, -1.0, 0.5]], **F64)
    assert kl_cov_selection(cov, 0.4).tolist() == [[False, True, False], [True, False, False]]
    assert kl_cov_selection(cov, 1e-6).sum() == 1  # 至少一个
    assert kl_cov_selection(torch.full((2, 2), float("-inf")), 0.5).sum() == 0


def test_clip_cov_picks_only_inside_the_window_and_among_candidates():
    cov = torch.tensor([[0.5, 1.5, 2.0, 6.0], [1.2, 4.9, 3.0, float("-inf")]], **F64)
    candidates = torch.tensor([[True, True, True, True], [True, True, False, False]])
    everything = clip_cov_selection(cov, candidates, 1.0, 1.0, 5.0)
    assert everything.tolist() == [[False, True, True, False], [True, True, False, False]]
    one = clip_cov_selection(cov, candidates, 1e-6, 1.0, 5.0, generator=torch.Generator().manual_seed(0))
    assert one.sum() == 1 and (one <= everything).all()


# ---------- 梯度系数：闭式与 autograd ----------


def per_token_grad(name, logps, old, adv, mask, **kw):
    """bnpo 汇总下 autograd 的梯度乘以掩码 token 数：就是逐 token 损失对 log π 的导数（掩码内）。"""
    loss, _ = LOSSES[name](logps, old, adv, mask, loss_type="bnpo", **kw)
    (grad,) = torch.autograd.grad(loss, logps)
    return grad * mask.sum()


def test_gradient_weights_match_autograd():
    logps, old, adv, mask = batch(3)
    a = adv[:, None].expand_as(mask)
    w = (logps.detach() - old).exp()
    inside = mask.bool()

    def check(name, weight, **kw):
        torch.testing.assert_close(per_token_grad(name, logps, old, adv, mask, **kw)[inside], weight[inside])

    check("gpg", gpg_gradient_weight(w, a))
    loss, _ = dro_loss(logps, old, adv, mask, beta=0.3)
    (grad,) = torch.autograd.grad(loss, logps)
    torch.testing.assert_close((grad * mask.sum())[inside], dro_gradient_weight(w, a, 0.3)[inside])
    check("cispo_verl", cispo_gradient_weight_verl(w, a))
    check("cispo_verl", cispo_gradient_weight_verl(w, a, 0.1, 0.5), epsilon=0.1, epsilon_high=0.5)
    check("dppo_tv", dppo_gradient_weight(logps.detach(), old, a, divergence="tv"))
    check("dppo_kl", dppo_gradient_weight(logps.detach(), old, a, 0.05, divergence="kl"), epsilon=0.05)
    check("dppo_tv", dppo_gradient_weight(logps.detach(), old, a, clip_ratio_c=1.5), clip_ratio_c=1.5)

    _, clipped = clipped_surrogate(logps.detach(), old, a, 0.2)
    torch.manual_seed(0)
    selected = clip_cov_selection(token_covariance(logps, a, mask), inside & ~clipped, 0.3, 1.0, 5.0)
    torch.manual_seed(0)
    check("clip_cov", clip_cov_gradient_weight(w, a, selected))
    selected = kl_cov_selection(token_covariance(logps, a, mask), 0.3)
    check("kl_cov", kl_cov_gradient_weight(w, a, selected, 0.1))

    # SAPO：按回答平均（grpo），梯度 = 系数 / (B·|o_i|)
    loss, _ = sapo_loss_verl(logps, old, adv, mask)
    (grad,) = torch.autograd.grad(loss, logps)
    scale = 6 * mask.sum(-1, keepdim=True).clamp(min=1)
    torch.testing.assert_close((grad * scale)[inside], sapo_gradient_weight_verl(w, a)[inside])

    # GMPO：系数已含 1/|o_i|，再除以 B
    loss, _ = gmpo_loss_verl(logps, old, adv, mask)
    (grad,) = torch.autograd.grad(loss, logps)
    torch.testing.assert_close(grad * 6, gmpo_gradient_weight_verl(logps.detach(), old, adv, mask))


def test_gradient_weights_as_functions_of_the_ratio():
    """页面要画的曲线：A > 0 与 A < 0 时，各损失的逐 token 梯度系数随比率 w 变化的几个特征点。"""
    w = torch.tensor([0.5, 1.0, 1.5], **F64)
    pos, neg = torch.tensor(1.0, **F64), torch.tensor(-1.0, **F64)
    assert gpg_gradient_weight(w, pos).tolist() == [-1.0, -1.0, -1.0]  # 与比率无关
    assert cispo_gradient_weight_verl(w, pos).tolist() == pytest.approx([-0.8, -1.0, -1.2])  # 截断但不为 0
    assert cispo_gradient_weight_verl(w, neg).tolist() == pytest.approx([0.8, 1.0, 1.2])
    assert dro_gradient_weight(torch.tensor([1.0, math.e], **F64), pos, 1.0).tolist() == pytest.approx([-1.0, 0.0])
    sapo = sapo_gradient_weight_verl(w, pos)
    assert sapo[1].item() == pytest.approx(-1.0) and abs(sapo[0]) < 1 and abs(sapo[2]) < 1.5  # 平滑、连续
    none = torch.tensor(False)
    assert clip_cov_gradient_weight(w, pos, none).tolist() == [-0.5, -1.0, 0.0]  # PPO：上侧截断处为 0
    assert clip_cov_gradient_weight(w, neg, none).tolist() == [0.0, 1.0, 1.5]  # 下侧截断处为 0
    assert clip_cov_gradient_weight(w, pos, torch.tensor(True)).abs().sum() == 0
    assert kl_cov_gradient_weight(w, pos, torch.tensor(True), 0.1).tolist() == pytest.approx([-0.6, -1.0, -1.4])
    # GMPO 单 token 回答：s = w，系数 −wA（截断一侧为 0），与 PPO 相同；ε 在对数空间
    one = torch.ones(3, 1, **F64)
    lw = torch.log(w)[:, None]
    g = gmpo_gradient_weight_verl(lw, torch.zeros(3, 1, **F64), torch.ones(3, **F64), one, 0.4)
    assert g[:, 0].tolist() == pytest.approx([-0.5, -1.0, 0.0])  # 1.5 > e^{0.4} ≈ 1.49：被截断
