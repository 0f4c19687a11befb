"""第 4 章：GAE、白化、截断的策略与价值损失、熵奖励、逐 token KL 奖励，以及整个 PPO 循环。

参照计算都在测试里按公式独立写出（纯 Python 循环），不调用被测函数。
"""

from __future__ import annotations

import math

import pytest
import torch

from rlhf_toy import (
    BanditTask,
    PPOConfig,
    TablePolicy,
    TableValueModel,
    entropy_bonus,
    entropy_from_logits,
    gae_advantages,
    kl_penalized_rewards,
    ppo_policy_loss,
    ppo_value_loss,
    train_ppo,
    whiten,
)
from rlhf_toy.demos.rlhf import build_reward_model, exact_kl
from rlhf_toy.losses.ppo import explained_variance


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def gae_by_hand(rewards, values, mask, gamma, lam):
    """逐行只在掩码为 1 的位置上做 δ_t = r_t + γV_next − V_t、Â_t = δ_t + γλÂ_next。"""
    B, T = len(rewards), len(rewards[0])
    adv = [[0.0] * T for _ in range(B)]
    for i in range(B):
        positions = [t for t in range(T) if mask[i][t] == 1]
        next_v, next_a = 0.0, 0.0
        for t in reversed(positions):
            delta = rewards[i][t] + gamma * next_v - values[i][t]
            next_a = delta + gamma * lam * next_a
            next_v = values[i][t]
            adv[i][t] = next_a
    return adv


# ---------------------------------------------------------------- GAE 与白化


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.9, 0.95), (0.99, 0.0), (1.0, 0.5)])
def test_gae_matches_hand_recursion_with_masks(gamma, lam):
    torch.manual_seed(0)
    rewards, values = torch.randn(4, 6), torch.randn(4, 6)
    mask = torch.tensor(
        [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0], [1, 0, 1, 1, 0, 1]], dtype=torch.float32
    )
    adv, ret = gae_advantages(rewards, values, mask, gamma, lam)
    expected = torch.tensor(gae_by_hand(rewards.tolist(), values.tolist(), mask.tolist(), gamma, lam))
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, (expected + values) * mask)


def test_gae_gamma_lambda_one_is_reward_to_go_minus_value():
    rewards = torch.tensor([[0.1, -0.2, 0.3, 1.0, 7.0]])
    values = torch.tensor([[0.5, 0.4, 0.3, 0.2, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    adv, ret = gae_advantages(rewards, values, mask, 1.0, 1.0)
    to_go = [0.1 - 0.2 + 0.3 + 1.0, -0.2 + 0.3 + 1.0, 0.3 + 1.0, 1.0]
    for t in range(4):
        assert adv[0, t].item() == pytest.approx(to_go[t] - values[0, t].item(), abs=1e-6)
        assert ret[0, t].item() == pytest.approx(to_go[t], abs=1e-6)
    assert adv[0, 4].item() == 0.0 and ret[0, 4].item() == 0.0


def test_gae_agrees_with_full_row_recursion_when_padding_has_zero_reward_and_value():
    """整行递推、填充处 r = V = 0、分数放在最后一个真实 token 上：右填充时真实 token 上与“跳过掩码”一致。"""
    torch.manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.float32)
    rewards, values = torch.randn(2, 4) * mask, torch.randn(2, 4) * mask
    gamma, lam = 1.0, 0.95
    full_row = torch.zeros(2, 4)
    last = torch.zeros(2)
    for t in reversed(range(4)):
        next_v = values[:, t + 1] if t < 3 else torch.zeros(2)
        last = rewards[:, t] + gamma * next_v - values[:, t] + gamma * lam * last
        full_row[:, t] = last
    adv, _ = gae_advantages(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(adv, full_row * mask)


def trl_ppo_gae(kl_rewards, values, seq_len, score, gamma, lam):
    """TRL v1.12 PPOTrainer 的做法（一行）：分数放在 EOS 之后的第一个填充位置 e+1，那里的价值保留，之后的 r = V = 0。"""
    T = len(kl_rewards)
    r = [kl_rewards[t] if t <= seq_len else 0.0 for t in range(T)]
    v = [values[t] if t <= seq_len + 1 else 0.0 for t in range(T)]
    r[seq_len + 1 if seq_len + 1 < T else seq_len] += score
    adv, last = [0.0] * T, 0.0
    for t in reversed(range(T)):
        next_v = v[t + 1] if t < T - 1 else 0.0
        last = r[t] + gamma * next_v - v[t] + gamma * lam * last
        adv[t] = last
    return adv


def test_trl_score_after_eos_differs_from_score_on_eos_when_lambda_below_one():
    """ppo.md 的差异表：TRL 在 EOS 之后的第一个填充位置放分数、保留那里的价值，λ < 1 时真实 token 上的优势与本书不同。

    γ = 1 时 EOS（位置 e）上：TRL 给 r_e − V_e + λs + (1 − λ)V_{e+1}，本书给 r_e + s − V_e。
    """
    kl_rewards = [-0.02, 0.01, -0.03, 0.0, 0.0]
    values = [0.2, 0.3, 0.5, 0.8, 0.0]  # 位置 3 是 EOS 之后的第一个填充位置，它的价值 0.8 在 TRL 里保留
    score, e = 1.0, 2
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0]])
    ours_rewards, _ = kl_penalized_rewards(
        torch.tensor([score]), torch.zeros(1, 5), torch.zeros(1, 5), mask, kl_coef=0.0
    )
    ours_rewards = ours_rewards + torch.tensor([kl_rewards]) * mask
    for lam in (1.0, 0.95, 0.0):
        ours, _ = gae_advantages(ours_rewards, torch.tensor([values]), mask, 1.0, lam)
        trl = trl_ppo_gae(kl_rewards, values, e, score, 1.0, lam)
        assert trl[e] == pytest.approx(kl_rewards[e] - values[e] + lam * score + (1 - lam) * values[e + 1], abs=1e-6)
        assert ours[0, e].item() == pytest.approx(kl_rewards[e] + score - values[e], abs=1e-6)
        same = all(abs(ours[0, t].item() - trl[t]) < 1e-6 for t in range(e + 1))
        assert same == (lam == 1.0)


def n_step_advantage(rewards, values, positions, i, n, gamma):
    """Â^(n)_t = Σ_{l<n} γ^l r_{t+l} + γ^n V_{t+n} − V_t，只数掩码为 1 的位置；越过结尾处 r = V = 0。"""
    steps = positions[i : i + n]
    total = sum(gamma**j * rewards[t] for j, t in enumerate(steps))
    if i + n < len(positions):
        total += gamma**n * values[positions[i + n]]
    return total - values[positions[i]]


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (0.9, 0.5), (0.99, 0.0), (1.0, 1.0)])
def test_gae_is_exponentially_weighted_mix_of_n_step_estimates(gamma, lam):
    """式 ppo-gae-nstep：Â_t = (1 − λ) Σ_{n<N} λ^{n−1} Â^(n)_t + λ^{N−1} Â^(N)_t，N 是 t 及其后的真实 token 数。"""
    torch.manual_seed(2)
    rewards, values = torch.randn(3, 6), torch.randn(3, 6)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 0, 1, 1, 0, 1]], dtype=torch.float32)
    adv, _ = gae_advantages(rewards, values, mask, gamma, lam)
    for b in range(3):
        positions = [t for t in range(6) if mask[b, t] == 1]
        r, v = rewards[b].tolist(), values[b].tolist()
        for i, t in enumerate(positions):
            N = len(positions) - i
            mix = sum((1 - lam) * lam ** (n - 1) * n_step_advantage(r, v, positions, i, n, gamma) for n in range(1, N))
            mix += lam ** (N - 1) * n_step_advantage(r, v, positions, i, N, gamma)
            assert adv[b, t].item() == pytest.approx(mix, abs=1e-5)


def test_td_residual_with_exact_value_is_the_advantage():
    """式 ppo-advantage：两个 token 的回答，V 与 Q 按定义枚举算出；用精确的 V 时 δ_t = Q − V = A（转移是确定的）。"""
    torch.manual_seed(3)
    first = torch.softmax(torch.randn(2), 0)  # π(y_0)
    second = torch.softmax(torch.randn(2, 2), 1)  # π(y_1 | y_0)
    score = torch.randn(2, 2)  # s(y_0, y_1)，放在最后一个 token 上；γ = 1、不扣 KL
    v1 = (second * score).sum(1)  # V(s_1) = E[G_1 | y_0]
    v0 = (first * v1).sum()  # V(s_0)
    for y0 in range(2):
        for y1 in range(2):
            rewards = torch.tensor([[0.0, score[y0, y1].item()]])
            values = torch.tensor([[v0.item(), v1[y0].item()]])
            delta, returns = gae_advantages(rewards, values, torch.ones(1, 2), gamma=1.0, lam=0.0)
            q0, q1 = v1[y0], score[y0, y1]  # Q(s_0, y_0)、Q(s_1, y_1)
            assert delta[0, 0].item() == pytest.approx((q0 - v0).item(), abs=1e-6)
            assert delta[0, 1].item() == pytest.approx((q1 - v1[y0]).item(), abs=1e-6)
    # 优势在策略下的期望为 0：E_{y_0}[A(s_0, y_0)] = 0
    assert (first * (v1 - v0)).sum().item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_gae_at_t1_is_reward_minus_value_for_any_lambda(lam):
    """T = 1（查表任务）：GAE 就是 r − V(x)，λ 不起作用；γ 也不起作用。"""
    torch.manual_seed(4)
    rewards, values = torch.randn(8, 1), torch.randn(8, 1)
    for gamma in (1.0, 0.9):
        adv, ret = gae_advantages(rewards, values, torch.ones(8, 1), gamma, lam)
        torch.testing.assert_close(adv, rewards - values)
        torch.testing.assert_close(ret, rewards)


def test_importance_weighted_mean_under_old_policy_is_the_mean_under_new_policy():
    """式 ppo-is：E_{y~π_old}[w f(y)] = E_{y~π_θ}[f(y)]，w = π_θ/π_old；精确求和与从 π_old 采样的估计。"""
    torch.manual_seed(5)
    old, new = TablePolicy.random(3, 5, scale=1.0), TablePolicy.random(3, 5, scale=1.0)
    f = torch.randn(3, 5)
    prompts = torch.arange(3).repeat_interleave(5)
    answers = torch.arange(5).repeat(3).unsqueeze(1)
    with torch.no_grad():
        w = (new.logps(prompts, answers) - old.logps(prompts, answers)).exp().view(3, 5)
        weighted = (old.probs() * w * f).sum(1)
        torch.testing.assert_close(weighted, (new.probs() * f).sum(1))
        completions, _ = old.sample(torch.arange(3), 20000)  # 只从旧策略采样
        group_prompts = torch.arange(3).repeat_interleave(20000)
        w_sample = (new.logps(group_prompts, completions) - old.logps(group_prompts, completions)).exp()[:, 0]
        estimate = (w_sample * f[group_prompts, completions[:, 0]]).view(3, -1).mean(1)
    torch.testing.assert_close(estimate, (new.probs() * f).sum(1).detach(), atol=0.05, rtol=0)


def test_gae_bad_inputs():
    with pytest.raises(ValueError, match=r"values 的形状是 \(2, 2\)，期望 \(2, 3\)"):
        gae_advantages(torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"lam 应在 \[0, 1\] 内"):
        gae_advantages(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), lam=1.5)
    with pytest.raises(ValueError, match=r"mask 只能含 0 和 1"):
        gae_advantages(torch.zeros(2, 3), torch.zeros(2, 3), torch.full((2, 3), 0.5))


def test_whiten_matches_bessel_formula_and_edge_cases():
    x = torch.tensor([[1.0, 2.0, 4.0], [8.0, 100.0, -100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    vals = [1.0, 2.0, 4.0, 8.0]
    mean = sum(vals) / 4
    var = sum((v - mean) ** 2 for v in vals) / 3  # Bessel
    out = whiten(x, mask)
    for (i, j), v in zip([(0, 0), (0, 1), (0, 2), (1, 0)], vals, strict=True):
        assert out[i, j].item() == pytest.approx((v - mean) / math.sqrt(var + 1e-8), rel=1e-5)
    assert out[1, 1].item() == 0.0 and out[1, 2].item() == 0.0
    kept = whiten(x, mask, shift_mean=False)
    assert kept[0, 0].item() == pytest.approx((1.0 - mean) / math.sqrt(var) + mean, rel=1e-5)
    assert torch.equal(whiten(torch.full((2, 2), 0.3), torch.ones(2, 2)), torch.zeros(2, 2))  # 常数
    assert torch.equal(whiten(x, torch.zeros(2, 3)), torch.zeros(2, 3))  # 掩码全为 0
    assert torch.equal(whiten(torch.tensor([5.0]), torch.ones(1)), torch.zeros(1))  # 只有一个元素


# ---------------------------------------------------------------- 截断的策略损失


@pytest.mark.parametrize(
    ("advantage", "ratio", "zero_grad"),
    [
        (1.0, 1.5, True),  # A > 0，比率超过 1+ε：截断，梯度为 0
        (1.0, 0.5, False),  # A > 0，比率低于 1−ε：不截断（min 取未截断项）
        (-1.0, 0.5, True),  # A < 0，比率低于 1−ε：截断，梯度为 0
        (-1.0, 1.5, False),  # A < 0，比率超过 1+ε：不截断，继续把概率往下压
        (1.0, 1.1, False),
        (-1.0, 0.9, False),
    ],
)
def test_clip_gives_zero_gradient_exactly_where_it_should(advantage, ratio, zero_grad):
    eps = 0.2
    old = torch.tensor([[math.log(0.4)]])
    logps = (old + math.log(ratio)).requires_grad_(True)
    loss, metrics = ppo_policy_loss(logps, old, torch.tensor([[advantage]]), torch.ones(1, 1), eps)
    loss.backward()
    clipped_value = -min(ratio * advantage, min(max(ratio, 1 - eps), 1 + eps) * advantage)
    assert loss.item() == pytest.approx(clipped_value, rel=1e-5)
    if zero_grad:
        assert logps.grad.item() == 0.0
        assert metrics["policy/clipfrac_avg"] == 1.0
    else:  # ∂(−wA)/∂log π = −wA
        assert logps.grad.item() == pytest.approx(-ratio * advantage, rel=1e-5)
        assert metrics["policy/clipfrac_avg"] == 0.0


def test_policy_loss_is_masked_token_mean_and_approx_kl():
    old = torch.log(torch.tensor([[0.5, 0.2, 0.3], [0.6, 0.1, 0.1]]))
    new = torch.log(torch.tensor([[0.55, 0.3, 0.9], [0.5, 0.1, 0.9]]))
    adv = torch.tensor([[1.0, -2.0, 3.0], [0.5, 1.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    loss, m = ppo_policy_loss(new, old, adv, mask, 0.2)
    terms, k1, k3 = [], [], []
    for i in range(2):
        for t in range(2):
            w = math.exp(new[i, t].item() - old[i, t].item())
            a = adv[i, t].item()
            terms.append(max(-w * a, -min(max(w, 0.8), 1.2) * a))
            k1.append(-math.log(w))
            k3.append(w - 1 - math.log(w))
    assert loss.item() == pytest.approx(sum(terms) / 4, rel=1e-5)
    assert m["policy/approxkl_k1"] == pytest.approx(sum(k1) / 4, rel=1e-5)
    assert m["policy/approxkl_k3"] == pytest.approx(sum(k3) / 4, rel=1e-5)


def test_policy_loss_bad_inputs_and_empty_mask():
    with pytest.raises(ValueError, match=r"advantages 的形状是 \(2,\)，期望 \(2, 3\)"):
        ppo_policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"epsilon 应 ≥ 0"):
        ppo_policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), -0.1)
    loss, m = ppo_policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3))
    assert loss.item() == 0.0 and m["policy/clipfrac_avg"] == 0.0


# ---------------------------------------------------------------- 价值损失


def test_value_loss_clipping_by_hand():
    old = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, -0.5, 0.1, 1.0]], requires_grad=True)
    returns = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    mask = torch.ones(1, 4)
    c = 0.2
    loss, m = ppo_value_loss(values, old, returns, mask, c)
    loss.backward()
    expected, grads, clipped = 0.0, [], 0
    for v, vo, r in zip(values[0].tolist(), old[0].tolist(), returns[0].tolist(), strict=True):
        vc = vo + min(max(v - vo, -c), c)
        a, b = (v - r) ** 2, (vc - r) ** 2
        expected += 0.5 * max(a, b) / 4
        clipped += b > a
        grads.append((v - r) / 4 if a >= b else (0.0 if vc != v else (v - r) / 4))
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert m["val/clipfrac_avg"] == pytest.approx(clipped / 4)
    # 位置 0：V 往回报方向走了 0.5 > c，截断项更大 → 梯度为 0；位置 1：离回报更远 → 正常梯度
    assert values.grad[0, 0].item() == 0.0
    torch.testing.assert_close(values.grad[0], torch.tensor(grads))
    plain, m0 = ppo_value_loss(values, old, returns, mask, None)
    assert plain.item() == pytest.approx(0.5 * ((values - returns) ** 2).mean().item())
    assert m0["val/clipfrac_avg"] == 0.0
    with pytest.raises(ValueError, match=r"returns 的形状是 \(1, 3\)，期望 \(1, 4\)"):
        ppo_value_loss(values, old, returns[:, :3], mask)


def test_explained_variance():
    v, r, mask = torch.tensor([[1.0, 2.0, 0.0]]), torch.tensor([[1.5, 2.5, 9.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    assert explained_variance(v, r, mask) == pytest.approx(1.0)  # 误差是常数
    assert math.isnan(explained_variance(v, torch.ones(1, 3), mask))  # 回报无方差：没有定义
    assert math.isnan(explained_variance(v, r, torch.zeros(1, 3)))


# ---------------------------------------------------------------- 熵


def test_entropy_from_logits_matches_definition_and_extremes():
    logits = torch.tensor([[0.0, 1.0, 2.0], [5.0, -1.0, 0.5]])
    for row in range(2):
        p = [math.exp(z) for z in logits[row].tolist()]
        p = [q / sum(p) for q in p]
        assert entropy_from_logits(logits)[row].item() == pytest.approx(-sum(q * math.log(q) for q in p), rel=1e-6)
    extreme = torch.tensor([[0.0, -1e4, float("-inf")]], requires_grad=True)
    h = entropy_from_logits(extreme)
    h.sum().backward()
    assert h.item() == 0.0 and torch.isfinite(extreme.grad).all()
    with pytest.raises(ValueError, match="NaN"):
        entropy_from_logits(torch.tensor([float("nan"), 0.0]))


def test_one_step_with_entropy_bonus_raises_entropy_and_wrong_sign_lowers_it():
    torch.manual_seed(3)
    policy = TablePolicy.random(4, 6, scale=1.0)
    prompts, completions, mask = torch.arange(4), torch.zeros(4, 1, dtype=torch.long), torch.ones(4, 1)
    h0 = policy.entropy(prompts, completions).mean().item()
    for sign, direction in ((1.0, 1), (-1.0, -1)):  # sign = −1 是“熵奖励写成 +c·H”的错误
        p = TablePolicy(policy.logits)
        loss = sign * entropy_bonus(p.entropy(prompts, completions), mask, ent_coef=0.1)
        loss.backward()
        with torch.no_grad():
            p.logits -= 1.0 * p.logits.grad
        h1 = p.entropy(prompts, completions).mean().item()
        assert direction * (h1 - h0) > 0


# ---------------------------------------------------------------- 逐 token 奖励


def test_kl_penalized_rewards_score_on_last_token():
    logps = torch.log(torch.tensor([[0.5, 0.4, 0.3], [0.2, 0.9, 0.9], [0.3, 0.3, 0.3], [0.9, 0.1, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.4, 0.6], [0.4, 0.9, 0.9], [0.3, 0.3, 0.3], [0.9, 0.2, 0.5]]))
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]], dtype=torch.float32)
    scores = torch.tensor([1.0, 2.0, 3.0, -1.0])
    beta = 0.1
    rewards, kl = kl_penalized_rewards(scores, logps, ref, mask, beta, "k1")
    for i in range(4):
        real = [t for t in range(3) if mask[i, t] == 1]
        for t in range(3):
            k = (logps[i, t] - ref[i, t]).item() if t in real else 0.0
            expected = -beta * k + (scores[i].item() if real and t == real[-1] else 0.0)
            assert rewards[i, t].item() == pytest.approx(expected, abs=1e-6)
            assert kl[i, t].item() == pytest.approx(k, abs=1e-6)
    assert rewards[2].abs().sum().item() == 0.0  # 掩码全为 0：分数无处可放
    _, kl3 = kl_penalized_rewards(scores, logps, ref, mask, beta, "k3")
    d = (ref - logps)[0, 0].item()
    assert kl3[0, 0].item() == pytest.approx(math.exp(d) - d - 1, rel=1e-6)
    with pytest.raises(ValueError, match=r"scores 的形状是 \(3,\)，期望 \(4,\)"):
        kl_penalized_rewards(scores[:3], logps, ref, mask)
    with pytest.raises(ValueError, match="未知的 kl_estimator='k2'"):
        kl_penalized_rewards(scores, logps, ref, mask, beta, "k2")


class ZeroReward:
    def reward(self, prompts, completions):
        return torch.zeros(len(completions))


def test_kl_penalty_pulls_policy_toward_reference():
    """奖励恒为 0 时，PPO 只剩 −β·KL：策略应当回到参考模型。"""
    torch.manual_seed(4)
    task = BanditTask.make(6, 5)
    ref = TablePolicy.random(6, 5)
    policy = TablePolicy(ref.logits + 2.0 * torch.randn(6, 5))
    before = exact_kl(policy, ref)
    config = PPOConfig(kl_coef=1.0, steps=15, num_generations=8)
    train_ppo(policy, TableValueModel(6), task, config, reward_model=ZeroReward(), ref_policy=ref)
    assert exact_kl(policy, ref) < 0.5 * before


def test_ppo_against_learned_reward_model_raises_true_success():
    torch.manual_seed(5)
    task = BanditTask.make(20, 8)
    reward_model, _, _ = build_reward_model(task, steps=60)
    policy = TablePolicy.random(20, 8)
    start = task.success_prob(policy)
    history = train_ppo(policy, TableValueModel(20), task, PPOConfig(steps=15), reward_model, evaluate=task.evaluate)
    assert history[-1]["success_prob"] > start + 0.2
    assert history[-1]["objective/scores"] > history[0]["objective/scores"]
    keys = {
        "objective/kl",
        "policy/clipfrac_avg",
        "policy/approxkl_k1",
        "policy/approxkl_k3",
        "val/explained_variance",
        "policy/entropy_avg",
        "loss/policy_avg",
        "loss/value_avg",
        "val/clipfrac_avg",
    }
    assert keys <= set(history[-1])
    with pytest.raises(ValueError, match="num_ppo_epochs"):
        train_ppo(policy, TableValueModel(20), task, PPOConfig(num_ppo_epochs=0))


def test_more_bad_inputs():
    with pytest.raises(ValueError, match=r"completions 的形状是 \(3, 1\)，期望第 0 维为 2"):
        TableValueModel(4).values(torch.tensor([0, 1]), torch.zeros(3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="n_prompts ≥ 1"):
        TableValueModel(0)
    with pytest.raises(ValueError, match=r"ent_coef 应 ≥ 0"):
        entropy_bonus(torch.ones(2, 1), torch.ones(2, 1), ent_coef=-1.0)
    with pytest.raises(ValueError, match=r"mask 的形状是 \(2, 2\)，期望 \(2, 1\)"):
        entropy_bonus(torch.ones(2, 1), torch.ones(2, 2), ent_coef=0.1)
    with pytest.raises(ValueError, match=r"mask 的形状是 \(3,\)，期望 \(2,\)"):
        whiten(torch.ones(2), torch.ones(3))
    with pytest.raises(ValueError, match=r"x 含 1 个非有限值"):
        whiten(torch.tensor([1.0, float("nan")]), torch.ones(2))
    with pytest.raises(ValueError, match=r"completions 的形状是 \(2, 2\)，期望 \(2, 1\)"):
        TablePolicy.random(3, 4).entropy(torch.tensor([0, 1]), torch.zeros(2, 2, dtype=torch.long))


@pytest.mark.parametrize("name", ["reward-model", "ppo"])
def test_demos_quick(name, capsys):
    from rlhf_toy.demos import DEMOS

    history = DEMOS[name](seed=0, quick=True)
    out = capsys.readouterr().out
    if name == "ppo":
        assert history[-1]["success_prob"] > 0.5 and "真实正确概率" in out
    else:
        assert history[-1]["eval_accuracy"] > 0.5 and "留出偏好对准确率" in out
