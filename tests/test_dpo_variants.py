"""第 5 章（续）DPO 家族的公式测试：`rlhf_toy.losses.dpo` 的各个 `loss_type` 与 `train_dpo`。

每个测试的 docstring 写明它检查 docs/dpo-variants.md 里的哪个式子（`eq:dv-...`）。
“独立公式”一律在测试里用 `math` 逐对手写，不调用包内代码。
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rlhf_toy import BanditTask, DPOConfig, TablePolicy, dpo_loss, train_dpo
from rlhf_toy.losses.dpo import (
    DPO_LOSS_TYPES,
    dpo_pair_losses,
    hinge_pair_loss,
    ipo_pair_loss,
    normalize_by_length,
    robust_pair_loss,
    sigmoid_pair_loss,
)


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # 小张量：多线程只增加开销
    yield
    torch.set_num_threads(previous)


# 手写的四个偏好对：策略与参考模型的序列对数概率，以及回答长度（第 3 对的被拒回答是空回答）
CHOSEN = [-3.0, -7.5, -1.2, -4.0]
REJECTED = [-4.0, -6.0, -2.5, 0.0]
REF_CHOSEN = [-3.5, -7.0, -2.0, -4.4]
REF_REJECTED = [-3.0, -6.5, -2.0, -0.3]
LEN_CHOSEN = [3, 6, 1, 4]
LEN_REJECTED = [4, 5, 2, 0]


def _softplus(x: float) -> float:
    """log(1 + e^x)，数值稳定：−log σ(z) = softplus(−z)。"""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _tensors(*lists):
    return tuple(torch.tensor(v, dtype=torch.float64) for v in lists)


def _pair_margins(normalized: bool, reference: bool = True) -> list[float]:
    """逐对的 Δ（eq:dv-margin），按需除以截到至少 1 的长度；reference=False 时是 SimPO 的无参考模型间隔。"""
    out = []
    for c, r, rc, rr, lc, lr in zip(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, LEN_CHOSEN, LEN_REJECTED, strict=True):
        sc, sr = (c - rc, r - rr) if reference else (c, r)
        if normalized:
            sc, sr = sc / max(lc, 1), sr / max(lr, 1)
        out.append(sc - sr)
    return out


def _formula(loss_type: str, beta: float, eps: float, gamma: float, margin: float) -> float:
    """逐对损失，照页面上的式子手写。"""
    z = beta * margin
    if loss_type in ("sigmoid", "sigmoid_norm"):  # eq:dv-cdpo（ε = 0 即 eq:dv-sigmoid）
        return (1 - eps) * _softplus(-z) + eps * _softplus(z)
    if loss_type == "robust":  # eq:dv-robust
        return ((1 - eps) * _softplus(-z) - eps * _softplus(z)) / (1 - 2 * eps)
    if loss_type == "hinge":  # eq:dv-hinge
        return max(0.0, 1 - z)
    if loss_type == "ipo":  # eq:dv-ipo
        return (margin - 1 / (2 * beta)) ** 2
    if loss_type == "simpo":  # eq:dv-simpo
        return (1 - eps) * _softplus(-(z - gamma)) + eps * _softplus(z - gamma)
    raise AssertionError(loss_type)


def _weight(loss_type: str, beta: float, eps: float, gamma: float, margin: float) -> float:
    """梯度权重 w(Δ)，定义为 −∂ℓ/∂Δ = β·w(Δ)（各式右半边）。"""
    z = beta * margin
    if loss_type in ("sigmoid", "sigmoid_norm"):
        return _sigmoid(-z) - eps
    if loss_type == "robust":
        return _sigmoid(-z) + eps / (1 - 2 * eps)
    if loss_type == "hinge":
        return 1.0 if z < 1 else 0.0
    if loss_type == "ipo":
        return (1 - 2 * z) / beta**2
    if loss_type == "simpo":
        return _sigmoid(gamma - z) - eps
    raise AssertionError(loss_type)


CASES = [  # (loss_type, beta, label_smoothing, 是否给长度)
    ("sigmoid", 0.5, 0.0, False),
    ("sigmoid", 0.5, 0.2, False),  # cDPO
    ("robust", 0.5, 0.2, False),
    ("hinge", 0.7, 0.0, False),
    ("ipo", 0.5, 0.0, False),  # 论文：整条回答的 IPO
    ("ipo", 0.5, 0.0, True),  # TRL 当前版本：按长度归一化
    ("sigmoid_norm", 2.0, 0.0, True),
    ("simpo", 2.0, 0.0, True),
    ("simpo", 2.0, 0.1, True),
]
CASE_IDS = ["sigmoid", "cdpo", "robust", "hinge", "ipo-paper", "ipo-trl", "sigmoid_norm", "simpo", "simpo-eps"]


def _call(loss_type, beta, eps, with_lengths, gamma=0.5, requires_grad=False):
    chosen, rejected, ref_chosen, ref_rejected = _tensors(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED)
    chosen.requires_grad_(requires_grad)
    rejected.requires_grad_(requires_grad)
    if loss_type == "simpo":
        ref_chosen = ref_rejected = None
    lengths = {}
    if with_lengths:
        lengths = {"chosen_lengths": torch.tensor(LEN_CHOSEN), "rejected_lengths": torch.tensor(LEN_REJECTED)}
    loss, metrics = dpo_loss(
        chosen,
        rejected,
        ref_chosen,
        ref_rejected,
        beta=beta,
        loss_type=loss_type,
        label_smoothing=eps,
        simpo_gamma=gamma,
        **lengths,
    )
    return loss, metrics, chosen, rejected


@pytest.mark.parametrize(("loss_type", "beta", "eps", "with_lengths"), CASES, ids=CASE_IDS)
def test_each_variant_matches_independent_formula(loss_type, beta, eps, with_lengths):
    """eq:dv-sigmoid、eq:dv-cdpo、eq:dv-robust、eq:dv-hinge、eq:dv-ipo、eq:dv-simpo 在手写输入上：
    dpo_loss 等于测试里逐对手写的公式的平均（Δ 按 eq:dv-margin 计算，长度截到至少 1）。"""
    gamma = 0.5
    margins = _pair_margins(normalized=with_lengths, reference=loss_type != "simpo")
    expected = sum(_formula(loss_type, beta, eps, gamma, m) for m in margins) / len(margins)
    loss, _, _, _ = _call(loss_type, beta, eps, with_lengths, gamma)
    assert loss.item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(("loss_type", "beta", "eps", "with_lengths"), CASES, ids=CASE_IDS)
def test_closed_form_gradients_match_autograd(loss_type, beta, eps, with_lengths):
    """各式右半边的梯度权重：∂L/∂log π(y_w) = −β w(Δ)/(B |y_w|)，∂L/∂log π(y_l) = +β w(Δ)/(B |y_l|)，
    其中 |y| 只在按长度归一化时出现（截到至少 1）；与 autograd 一致。"""
    gamma = 0.5
    margins = _pair_margins(normalized=with_lengths, reference=loss_type != "simpo")
    loss, _, chosen, rejected = _call(loss_type, beta, eps, with_lengths, gamma, requires_grad=True)
    loss.backward()
    B = len(margins)
    for i, m in enumerate(margins):
        w = _weight(loss_type, beta, eps, gamma, m)
        lc, lr = (max(LEN_CHOSEN[i], 1), max(LEN_REJECTED[i], 1)) if with_lengths else (1, 1)
        assert chosen.grad[i].item() == pytest.approx(-beta * w / (B * lc), rel=1e-10, abs=1e-12)
        assert rejected.grad[i].item() == pytest.approx(beta * w / (B * lr), rel=1e-10, abs=1e-12)


def test_default_path_is_bitwise_unchanged():
    """eq:dv-sigmoid：默认参数下 dpo_loss 的值与梯度和第 5 章的实现 −logsigmoid(βΔ).mean() 逐位相同。"""
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (-5 * torch.rand(7, generator=g) for _ in range(4))
    a = pc.clone().requires_grad_(True)
    b = pc.clone().requires_grad_(True)
    loss, _ = dpo_loss(a, pr, rc, rr, beta=0.1)
    old = -F.logsigmoid(0.1 * ((b - rc) - (pr - rr))).mean()
    loss.backward()
    old.backward()
    assert torch.equal(loss, old)
    assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("loss_type", ["sigmoid", "robust"])
def test_zero_label_smoothing_reduces_to_dpo(loss_type):
    """eq:dv-cdpo 与 eq:dv-robust 在 ε = 0：与 eq:dv-sigmoid 相同（值与梯度）。"""
    margins = torch.linspace(-8.0, 8.0, 17, dtype=torch.float64)
    dpo = -F.logsigmoid(0.4 * margins)
    fn = sigmoid_pair_loss if loss_type == "sigmoid" else robust_pair_loss
    torch.testing.assert_close(fn(margins, 0.4, 0.0), dpo)
    torch.testing.assert_close(dpo_pair_losses(margins, 0.4, loss_type, 0.0), dpo)


def test_cdpo_is_dpo_averaged_over_label_flips():
    """eq:dv-cdpo 的含义：cDPO 损失 = 以概率 ε 把这一对标反后的 DPO 损失的期望 (1−ε)ℓ(Δ) + εℓ(−Δ)。"""
    margins = torch.linspace(-6.0, 6.0, 13, dtype=torch.float64)
    beta, eps = 0.5, 0.15
    dpo = sigmoid_pair_loss
    expected = (1 - eps) * dpo(margins, beta) + eps * dpo(-margins, beta)
    torch.testing.assert_close(sigmoid_pair_loss(margins, beta, eps), expected)


@pytest.mark.parametrize("eps", [0.05, 0.2, 0.45])
def test_robust_dpo_is_unbiased_under_label_flips(eps):
    """eq:dv-unbiased：若标签以概率 ε 翻转，鲁棒 DPO 的期望损失 (1−ε)ℓ_rob(Δ) + εℓ_rob(−Δ) 等于干净标签上的 −log σ(βΔ)。
    翻转用 dpo_loss 交换被选、被拒回答实现。"""
    chosen, rejected, ref_chosen, ref_rejected = _tensors(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED)
    beta = 0.5
    kw = {"beta": beta, "loss_type": "robust", "label_smoothing": eps}
    kept, _ = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, **kw)
    flipped, _ = dpo_loss(rejected, chosen, ref_rejected, ref_chosen, **kw)
    clean = sum(_softplus(-beta * m) for m in _pair_margins(normalized=False)) / len(CHOSEN)
    assert ((1 - eps) * kept + eps * flipped).item() == pytest.approx(clean, rel=1e-12)


@pytest.mark.parametrize("q", [0.0, 0.1, 0.3, 0.45])
def test_fitted_preference_under_observed_label_noise(q):
    """eq:dv-noise-fit：n 个相同的偏好对里比例 q 被标反，批平均损失对 Δ 的梯度为 0 的点满足
    sigmoid：σ(βΔ) = 1−q；cDPO：σ(βΔ) = (1−ε)(1−q) + εq；robust：σ(βΔ) = (1−q−ε)/(1−2ε)（在 (0, 1) 内时）。"""
    beta, eps, n = 0.5, 0.2, 20
    flips = round(q * n)
    sign = torch.tensor([1.0] * (n - flips) + [-1.0] * flips, dtype=torch.float64)
    targets = {
        ("sigmoid", 0.0): 1 - q,
        ("sigmoid", eps): (1 - eps) * (1 - q) + eps * q,
        ("robust", eps): (1 - q - eps) / (1 - 2 * eps),
    }
    for (loss_type, smoothing), s in targets.items():
        if not 0 < s < 1:  # 没有有限的驻点：间隔会一直被推大
            delta = torch.tensor(50.0, dtype=torch.float64, requires_grad=True)
            dpo_pair_losses(sign * delta, beta, loss_type, smoothing).mean().backward()
            assert delta.grad.item() < 0, (loss_type, smoothing)
            continue
        delta = torch.tensor(math.log(s / (1 - s)) / beta, dtype=torch.float64, requires_grad=True)
        dpo_pair_losses(sign * delta, beta, loss_type, smoothing).mean().backward()
        assert delta.grad.item() == pytest.approx(0.0, abs=1e-12), (loss_type, smoothing)


def test_hinge_is_zero_beyond_the_margin_and_linear_below():
    """eq:dv-hinge：βΔ ≥ 1 时损失与梯度恰为 0；βΔ < 1 时损失 1 − βΔ、梯度 −β。"""
    beta = 0.5
    margins = torch.tensor([-4.0, 0.0, 1.9, 2.0, 2.1, 30.0], requires_grad=True)
    losses = hinge_pair_loss(margins, beta)
    losses.sum().backward()
    torch.testing.assert_close(losses.detach(), torch.tensor([3.0, 1.0, 0.05, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(margins.grad, torch.tensor([-0.5, -0.5, -0.5, 0.0, 0.0, 0.0]))


def test_ipo_minimum_is_at_the_length_normalized_target():
    """eq:dv-ipo：损失在长度归一化的间隔 Δ̄ = 1/(2β) 处为 0、梯度为 0；此时未归一化的 Δ 并不等于 1/(2β)。
    在 Δ̄ 的网格上，最小值也落在 1/(2β)。"""
    beta = 0.25
    target = 1 / (2 * beta)  # 2.0
    lc, lr = torch.tensor([3]), torch.tensor([5])
    rho_r = torch.tensor([-1.0], dtype=torch.float64)  # 被拒回答的对数概率比
    rho_c = (target + rho_r / 5) * 3  # 使 ρ_c/3 − ρ_r/5 = 1/(2β)
    chosen = rho_c.clone().requires_grad_(True)
    zero = torch.zeros(1, dtype=torch.float64)
    loss, _ = dpo_loss(chosen, rho_r, zero, zero, beta=beta, loss_type="ipo", chosen_lengths=lc, rejected_lengths=lr)
    loss.backward()
    assert loss.item() == pytest.approx(0.0, abs=1e-24)
    assert chosen.grad.item() == pytest.approx(0.0, abs=1e-12)
    assert (rho_c - rho_r).item() != pytest.approx(target)  # 未归一化的间隔是 5.8，不是 2
    grid = torch.linspace(-2.0, 6.0, 81, dtype=torch.float64)
    assert grid[ipo_pair_loss(grid, beta).argmin()].item() == pytest.approx(target)


@pytest.mark.parametrize("loss_type", ["ipo", "sigmoid_norm", "simpo"])
def test_empty_completions_are_safe(loss_type):
    """eq:dv-margin 中 |y| 截到至少 1：长度为 0 的空回答（对数概率之和为 0）给出有限的损失与梯度，
    与把长度当作 1 相同；而 TRL v0.28 的做法（直接除以掩码之和）在这里得到 0/0 = NaN（TRL #1033）。"""
    chosen = torch.tensor([-2.0, -1.0], requires_grad=True)
    rejected = torch.tensor([0.0, -3.0], requires_grad=True)  # 第 0 对的被拒回答是空回答
    ref = None if loss_type == "simpo" else torch.tensor([-1.5, -1.0])
    ref_r = None if loss_type == "simpo" else torch.tensor([0.0, -2.0])
    lengths = {"chosen_lengths": torch.tensor([2, 1]), "rejected_lengths": torch.tensor([0, 3])}
    loss, metrics = dpo_loss(chosen, rejected, ref, ref_r, beta=2.0, loss_type=loss_type, **lengths)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(chosen.grad).all() and torch.isfinite(rejected.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())
    ones = {"chosen_lengths": torch.tensor([2, 1]), "rejected_lengths": torch.tensor([1, 3])}
    same, _ = dpo_loss(chosen, rejected, ref, ref_r, beta=2.0, loss_type=loss_type, **ones)
    assert loss.item() == pytest.approx(same.item())
    legacy = torch.tensor(0.0) / torch.tensor(0.0)  # v0.28：空回答的 all_logps / loss_mask.sum(-1)
    assert math.isnan(legacy.item())


def test_normalize_by_length_clamps_and_keeps_dtype():
    """eq:dv-margin：s / max(|y|, 1)，整数长度也得到与 scores 相同的 dtype。"""
    scores = torch.tensor([-6.0, 0.0, -2.0], dtype=torch.float64)
    out = normalize_by_length(scores, torch.tensor([3, 0, 4]))
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor([-2.0, 0.0, -0.5], dtype=torch.float64))


@pytest.mark.parametrize("loss_type", ["ipo", "sigmoid_norm", "simpo"])
def test_length_normalized_losses_ignore_repetition(loss_type):
    """eq:dv-margin 的不变性：把每条回答重复 k 次（对数概率与长度都乘 k），按长度归一化的损失不变。"""
    chosen, rejected, ref_chosen, ref_rejected = _tensors(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED)
    lc, lr = torch.tensor([3, 6, 1, 4]), torch.tensor([4, 5, 2, 1])  # 没有空回答：k·0 截断后不再是 k 倍
    losses = []
    for k in (1, 3):
        refs = (None, None) if loss_type == "simpo" else (k * ref_chosen, k * ref_rejected)
        loss, _ = dpo_loss(
            k * chosen,
            k * rejected,
            *refs,
            beta=2.0,
            loss_type=loss_type,
            chosen_lengths=k * lc,
            rejected_lengths=k * lr,
        )
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-12)


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo", "robust"])
def test_reference_based_losses_ignore_a_common_shift(loss_type):
    """eq:dv-margin：给 y_w、y_l 的策略对数概率加同一个常数（如 log Z(x)），Δ 不变，不按长度归一化的损失都不变。"""
    chosen, rejected, ref_chosen, ref_rejected = _tensors(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED)
    shift = torch.tensor([-2.0, 0.5, 3.0, 1.0], dtype=torch.float64)
    eps = 0.1 if loss_type == "robust" else 0.0
    kw = {"beta": 0.5, "loss_type": loss_type, "label_smoothing": eps}
    a, _ = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, **kw)
    b, _ = dpo_loss(chosen + shift, rejected + shift, ref_chosen, ref_rejected, **kw)
    torch.testing.assert_close(a, b)


def test_simpo_margin_gamma_and_no_reference():
    """eq:dv-simpo：Δ = β(log π(y_w)/|y_w| − log π(y_l)/|y_l|) 恰好等于 γ 时损失是 log 2；加大 γ 损失变大。"""
    beta, gamma = 2.0, 0.5
    rejected = torch.tensor([-6.0])  # 长度 3，平均 −2
    chosen = torch.tensor([(-2.0 + gamma / beta) * 4])  # 长度 4，平均 −1.75
    kw = {"chosen_lengths": torch.tensor([4]), "rejected_lengths": torch.tensor([3]), "loss_type": "simpo"}
    loss, _ = dpo_loss(chosen, rejected, None, None, beta=beta, simpo_gamma=gamma, **kw)
    assert loss.item() == pytest.approx(math.log(2))
    bigger, _ = dpo_loss(chosen, rejected, None, None, beta=beta, simpo_gamma=1.0, **kw)
    assert bigger.item() > loss.item()


@pytest.mark.parametrize(("loss_type", "beta", "eps", "with_lengths"), CASES, ids=CASE_IDS)
def test_signs_push_chosen_up_and_rejected_down_below_the_target(loss_type, beta, eps, with_lengths):
    """各式的符号：在间隔为 0（策略 = 参考模型；SimPO 为平均对数概率相等）时，
    每个变体都抬高被选回答（∂L/∂log π(y_w) < 0）、压低被拒回答（∂L/∂log π(y_l) > 0）。"""
    z = torch.zeros(3, dtype=torch.float64)
    chosen, rejected = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
    refs = (None, None) if loss_type == "simpo" else (z, z)
    lengths = {"chosen_lengths": torch.tensor([1, 2, 3]), "rejected_lengths": torch.tensor([2, 2, 0])}
    loss, _ = dpo_loss(
        chosen,
        rejected,
        *refs,
        beta=beta,
        loss_type=loss_type,
        label_smoothing=eps,
        **(lengths if with_lengths else {}),
    )
    loss.backward()
    assert (chosen.grad < 0).all() and (rejected.grad > 0).all()


def test_which_variants_pull_back_beyond_their_target():
    """各式右半边的符号：Δ 很大时，IPO 与 cDPO 把间隔往回拉（w < 0），hinge 不动（w = 0），
    DPO 几乎不动但仍往上推（w > 0），鲁棒 DPO 至少以 ε/(1−2ε) 往上推。"""
    beta, eps = 0.5, 0.1
    delta = torch.tensor([40.0], dtype=torch.float64, requires_grad=True)

    def weight(loss_type, smoothing=0.0):
        delta.grad = None
        dpo_pair_losses(delta, beta, loss_type, smoothing).sum().backward()
        return -delta.grad.item() / beta

    assert weight("ipo") < 0
    assert weight("sigmoid", eps) < 0
    assert weight("hinge") == 0.0
    assert 0 < weight("sigmoid") < 1e-8
    assert weight("robust", eps) == pytest.approx(eps / (1 - 2 * eps))


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo", "robust", "sigmoid_norm"])
def test_metrics_are_raw_implicit_rewards_for_every_reference_type(loss_type):
    """隐式奖励指标对所有基于参考模型的 loss_type 都是 β·sg(log π − log π_ref)，不按长度归一化（同 TRL）。"""
    beta = 0.5
    with_lengths = loss_type in ("ipo", "sigmoid_norm")
    eps = 0.1 if loss_type == "robust" else 0.0
    _, m, _, _ = _call(loss_type, beta, eps, with_lengths)
    r_w = [beta * (c - rc) for c, rc in zip(CHOSEN, REF_CHOSEN, strict=True)]
    r_l = [beta * (r - rr) for r, rr in zip(REJECTED, REF_REJECTED, strict=True)]
    assert m["rewards/chosen"] == pytest.approx(sum(r_w) / 4)
    assert m["rewards/rejected"] == pytest.approx(sum(r_l) / 4)
    assert m["rewards/margins"] == pytest.approx((sum(r_w) - sum(r_l)) / 4)
    assert m["rewards/accuracies"] == pytest.approx(sum(a > b for a, b in zip(r_w, r_l, strict=True)) / 4)


def test_simpo_metrics_are_length_normalized_policy_rewards():
    """SimPO 没有参考模型：奖励是 β·log π(y)/|y|（TRL CPOTrainer 的 chosen_rewards），长度截到至少 1。"""
    beta = 2.0
    _, m, _, _ = _call("simpo", beta, 0.0, True)
    r_w = [beta * c / max(n, 1) for c, n in zip(CHOSEN, LEN_CHOSEN, strict=True)]
    r_l = [beta * r / max(n, 1) for r, n in zip(REJECTED, LEN_REJECTED, strict=True)]
    assert m["rewards/chosen"] == pytest.approx(sum(r_w) / 4)
    assert m["rewards/rejected"] == pytest.approx(sum(r_l) / 4)
    assert m["rewards/accuracies"] == pytest.approx(sum(a > b for a, b in zip(r_w, r_l, strict=True)) / 4)


def test_unknown_loss_type_lists_the_valid_names():
    """坏输入：未知的 loss_type 抛 ValueError，信息里列出全部可选值。"""
    z = torch.zeros(2)
    with pytest.raises(ValueError) as info:
        dpo_loss(z, z, z, z, loss_type="dpo")
    message = str(info.value)
    assert "loss_type='dpo'" in message
    assert all(repr(name) in message for name in DPO_LOSS_TYPES)


Z, L = torch.zeros(2), torch.ones(2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss_type": "robust", "label_smoothing": 0.5}, r"label_smoothing 应在 \[0, 0.5\) 内，实际是 0.5"),
        ({"loss_type": "sigmoid", "label_smoothing": -0.1}, r"label_smoothing 应在 \[0, 0.5\) 内"),
        ({"loss_type": "sigmoid", "label_smoothing": math.nan}, r"label_smoothing 应在 \[0, 0.5\) 内"),
        ({"loss_type": "ipo", "label_smoothing": 0.1}, r"loss_type='ipo' 没有标签平滑"),
        ({"loss_type": "hinge", "label_smoothing": 0.1}, r"loss_type='hinge' 没有标签平滑"),
        ({"loss_type": "ipo", "beta": 0.0}, r"beta 应 > 0"),
        ({"loss_type": "simpo", "chosen_lengths": L, "rejected_lengths": L}, r"'simpo' 不用参考模型"),
        ({"loss_type": "sigmoid", "ref": None}, r"需要参考模型的对数概率"),
        ({"loss_type": "simpo", "ref": None}, r"'simpo' 按回答长度归一化对数概率，需要 chosen_lengths"),
        ({"loss_type": "sigmoid_norm"}, r"'sigmoid_norm' 按回答长度归一化"),
        ({"loss_type": "ipo", "chosen_lengths": L}, r"要么都给，要么都不给"),
        ({"loss_type": "sigmoid", "chosen_lengths": L, "rejected_lengths": L}, r"'sigmoid' 不按长度归一化"),
        (
            {"loss_type": "ipo", "chosen_lengths": -L, "rejected_lengths": L},
            r"chosen_lengths 是回答的 token 数，应 ≥ 0",
        ),
        (
            {"loss_type": "ipo", "chosen_lengths": torch.ones(3), "rejected_lengths": L},
            r"chosen_lengths 的形状是 \(3,\)",
        ),
        (
            {"loss_type": "simpo", "ref": None, "chosen_lengths": L, "rejected_lengths": L, "simpo_gamma": -1.0},
            "simpo_gamma 应 ≥ 0",
        ),
    ],
    ids=[
        "robust-eps-half",
        "negative-eps",
        "nan-eps",
        "ipo-eps",
        "hinge-eps",
        "ipo-beta-zero",
        "simpo-with-ref",
        "sigmoid-without-ref",
        "simpo-without-lengths",
        "sigmoid_norm-without-lengths",
        "one-length",
        "sigmoid-with-lengths",
        "negative-length",
        "length-shape",
        "negative-gamma",
    ],
)
def test_refused_combinations_say_why(kwargs, match):
    """不相容的选项抛 ValueError，并写明原因。"""
    kwargs = dict(kwargs)
    ref = kwargs.pop("ref", Z)
    with pytest.raises(ValueError, match=match):
        dpo_loss(Z, Z, ref, ref, **kwargs)


def _bandit_run(loss_type: str, beta: float, steps: int, **extra) -> tuple[list[dict], BanditTask]:
    torch.manual_seed(0)
    task = BanditTask.make(8, 5)
    policy = TablePolicy.random(8, 5)
    config = DPOConfig(beta=beta, steps=steps, loss_type=loss_type, **extra)
    return train_dpo(policy, task.preference_pairs(), config, evaluate=task.evaluate), task


def test_train_dpo_ipo_settles_at_target_while_dpo_keeps_growing():
    """eq:dv-ipo 在训练中：查表策略上 IPO 的间隔停在 1/(2β)，DPO 的间隔一直变大（eq:dv-sigmoid 没有有限的最小值）。"""
    beta = 0.5
    ipo, _ = _bandit_run("ipo", beta, 120)
    dpo, _ = _bandit_run("sigmoid", beta, 120)
    assert ipo[-1]["rewards/margins"] / beta == pytest.approx(1 / (2 * beta), abs=0.01)
    margins = [h["rewards/margins"] / beta for h in dpo]
    assert margins[-1] > 10 * (1 / (2 * beta)) and all(b > a for a, b in zip(margins, margins[1:], strict=False))


def test_train_dpo_simpo_runs_without_reference_and_default_config_is_dpo():
    """train_dpo 的 loss_type="simpo"（eq:dv-simpo）不用参考模型也能学会；DPOConfig 的新字段默认值就是第 5 章的 DPO。"""
    history, task = _bandit_run("simpo", 2.0, 30)
    assert history[-1]["success_prob"] > 0.9 and history[-1]["rewards/accuracies"] == 1.0
    assert history[0]["rewards/chosen"] < 0  # β·log π(y_w)，不是相对参考模型的 0
    config = DPOConfig()
    assert (config.loss_type, config.label_smoothing) == ("sigmoid", 0.0)
