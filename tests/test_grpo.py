"""第 6 章（GRPO）的公式测试：每个测试都先按公式独立算出期望值（纯 Python / math），再与 rlhf_toy 比较。

式号指 docs/grpo.md 里的编号：
  eq:grpo-adv          组内相对优势（Bessel 校正的组内标准差）
  eq:grpo-ratio        重要性采样比率 w = exp(log π_θ − log π_old)
  eq:grpo-clip         截断代理目标与逐 token 损失
  eq:grpo-clip-grad    截断代理损失对 log π_θ 的梯度（截断区内为 0）
  eq:grpo-token-loss   逐 token 损失 = 截断代理损失 + β·k3
  eq:grpo-loss         按序列平均（loss_type="grpo"），以及四种 loss_type 的汇总
"""

from __future__ import annotations

import math
import re
import statistics

import pytest
import torch

from rlhf_toy import BanditTask, GRPOConfig, TablePolicy, group_advantages, grpo_loss, train_grpo
from rlhf_toy.losses.grpo import clipped_surrogate

EPS_STD = 1e-4  # TRL 加在标准差上的常数，也是 group_advantages 的默认 eps


# ---------------------------------------------------------------- 组内相对优势，式 eq:grpo-adv


def hand_advantages(rewards: list[float], G: int, scale: str) -> list[float]:
    """式 eq:grpo-adv 的逐字实现：组均值、Bessel 校正的标准差（statistics.stdev 除以 n−1）。"""
    batch_std = statistics.stdev(rewards)
    out = []
    for start in range(0, len(rewards), G):
        group = rewards[start : start + G]
        mu = statistics.fmean(group)
        if scale == "group":
            denom = statistics.stdev(group) + EPS_STD
        elif scale == "batch":
            denom = batch_std + EPS_STD
        else:
            denom = 1.0
        out += [(r - mu) / denom for r in group]
    return out


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_match_bessel_formula(scale):
    rewards = [0.3, 1.0, 0.0, 0.7, 2.0, -1.0, 0.5, 0.5, 0.1, 0.2, 0.9, 0.4]
    got = group_advantages(torch.tensor(rewards, dtype=torch.float64), num_generations=4, scale_rewards=scale)
    assert got.tolist() == pytest.approx(hand_advantages(rewards, 4, scale), abs=1e-12)


def test_group_std_is_bessel_corrected_not_population():
    # [1, 0, 0, 0]：样本标准差 0.5（除以 G−1），总体标准差 √3/4 ≈ 0.433；两者给出的优势明显不同
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    got = group_advantages(rewards, num_generations=4)
    assert got[0].item() == pytest.approx(0.75 / (0.5 + EPS_STD), abs=1e-12)
    assert got[0].item() != pytest.approx(0.75 / (math.sqrt(3) / 4 + EPS_STD), abs=1e-3)


@pytest.mark.parametrize("scale", ["group", "none"])
def test_group_advantages_invariant_to_a_constant_per_group(scale):
    torch.manual_seed(0)
    rewards = torch.rand(12, dtype=torch.float64)
    shifts = torch.tensor([3.0, -7.0, 100.0], dtype=torch.float64).repeat_interleave(4)  # 每组加不同的常数
    a = group_advantages(rewards, 4, scale)
    b = group_advantages(rewards + shifts, 4, scale)
    assert (a - b).abs().max().item() < 1e-12


def test_batch_scaled_advantages_invariant_to_one_constant_for_the_whole_batch():
    torch.manual_seed(0)
    rewards = torch.rand(12, dtype=torch.float64)
    a = group_advantages(rewards, 4, "batch")
    assert (a - group_advantages(rewards + 5.0, 4, "batch")).abs().max().item() < 1e-12


@pytest.mark.parametrize("scale", ["group", "none"])
def test_zero_variance_group_gives_exactly_zero_and_no_nan(scale):
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    adv = group_advantages(rewards, 4, scale)
    assert torch.isfinite(adv).all()
    assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]  # 恰好为 0，不是“很小”
    assert adv[4:].abs().sum() > 0


def test_zero_variance_batch_with_batch_scaling_gives_exactly_zero():
    adv = group_advantages(torch.full((8,), 0.5), 4, "batch")
    assert adv.tolist() == [0.0] * 8


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_single_generation_gives_zero_advantage(scale):
    # TRL：G = 1 时 σ := 0，A = r − r = 0（verl 此时给 A = r）
    adv = group_advantages(torch.tensor([0.0, 1.0, 0.3]), num_generations=1, scale_rewards=scale)
    assert adv.tolist() == [0.0, 0.0, 0.0]


# ------------------------------------------------ 截断代理损失，式 eq:grpo-ratio / eq:grpo-clip / eq:grpo-clip-grad

RATIOS = [0.3, 0.7, 0.79, 0.81, 1.0, 1.1, 1.19, 1.21, 1.25, 1.27, 1.29, 1.6, 3.0]  # 避开边界 0.8、1.2、1.28


def hand_clip_loss_and_grad(w: float, A: float, eps: float, eps_high: float) -> tuple[float, float, bool]:
    """逐 token：损失 −min(wA, clip(w)A)；对 log π_θ 的梯度 −A·w（未截断）或 0（截断起作用）。"""
    clipped_w = min(max(w, 1 - eps), 1 + eps_high)
    loss = -min(w * A, clipped_w * A)
    is_clipped = (A > 0 and w > 1 + eps_high) or (A < 0 and w < 1 - eps)
    grad = 0.0 if is_clipped else -A * w  # d(−wA)/d log π_θ = −A·w，因为 dw/d log π_θ = w
    return loss, grad, is_clipped


@pytest.mark.parametrize("A", [1.5, -0.8], ids=["A>0", "A<0"])
@pytest.mark.parametrize("eps_high", [None, 0.28], ids=["symmetric", "clip-higher"])
def test_clipped_surrogate_gradient_matches_closed_form(A, eps_high):
    eps = 0.2
    old = torch.tensor([[-1.3] * len(RATIOS)], dtype=torch.float64)
    logps = (old + torch.tensor([RATIOS], dtype=torch.float64).log()).requires_grad_(True)
    adv = torch.full((1, 1), A, dtype=torch.float64)
    loss, is_clipped = clipped_surrogate(logps, old, adv, epsilon=eps, epsilon_high=eps_high)
    loss.sum().backward()
    expected = [hand_clip_loss_and_grad(w, A, eps, eps if eps_high is None else eps_high) for w in RATIOS]
    assert loss[0].tolist() == pytest.approx([e[0] for e in expected], abs=1e-12)
    assert logps.grad[0].tolist() == pytest.approx([e[1] for e in expected], abs=1e-12)
    assert is_clipped[0].tolist() == [e[2] for e in expected]
    # 截断区里梯度恰好为 0；截断区外一侧（A>0 时 w 小、A<0 时 w 大）梯度照常流动
    for w, g, clipped in zip(RATIOS, logps.grad[0].tolist(), is_clipped[0].tolist(), strict=True):
        if clipped:
            assert g == 0.0
        else:
            assert g != 0.0 and math.copysign(1, g) == -math.copysign(1, A), w


def test_clip_higher_only_moves_the_upper_bound():
    w = torch.tensor([[0.75, 1.25]], dtype=torch.float64)
    old = torch.zeros_like(w)
    _, sym = clipped_surrogate(w.log(), old, torch.ones(1, 1, dtype=torch.float64), 0.2)
    _, hi = clipped_surrogate(w.log(), old, torch.ones(1, 1, dtype=torch.float64), 0.2, epsilon_high=0.28)
    assert sym.tolist() == [[False, True]] and hi.tolist() == [[False, False]]
    _, sym_neg = clipped_surrogate(w.log(), old, -torch.ones(1, 1, dtype=torch.float64), 0.2)
    _, hi_neg = clipped_surrogate(w.log(), old, -torch.ones(1, 1, dtype=torch.float64), 0.2, epsilon_high=0.28)
    assert sym_neg.tolist() == hi_neg.tolist() == [[True, False]]  # 下界仍是 1 − ε


# ---------------------------------------------------------------- 汇总，式 eq:grpo-token-loss / eq:grpo-loss

# B = 2、T = 3；第 2 条回答只有 1 个 token，后两个位置是填充（填了很大的有限值，若被算进去会很显眼）
LOGPS = [[-0.9, -1.6, -0.2], [-2.0, 50.0, -60.0]]
OLD = [[-1.1, -1.2, -0.2], [-1.5, 9.0, 9.0]]
REF = [[-1.0, -2.0, -0.5], [-1.8, -40.0, 30.0]]
MASK = [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
ADV = [0.7, -1.3]
BETA, EPS, EPS_HIGH = 0.1, 0.2, 0.28


def hand_token_loss(lp, old, ref, A, beta=BETA, eps=EPS, eps_high=EPS_HIGH):
    w = math.exp(lp - old)
    surrogate = -min(w * A, min(max(w, 1 - eps), 1 + eps_high) * A)
    d = ref - lp
    return surrogate + beta * (math.exp(d) - d - 1)


def hand_aggregate(loss_type: str, L: int | None = None) -> float:
    ell = [[hand_token_loss(LOGPS[i][t], OLD[i][t], REF[i][t], ADV[i]) for t in range(3)] for i in range(2)]
    masked_sums = [sum(MASK[i][t] * ell[i][t] for t in range(3)) for i in range(2)]
    lengths = [sum(row) for row in MASK]
    if loss_type == "grpo":  # 1/B Σ_i 1/|o_i| Σ_t
        return sum(s / n for s, n in zip(masked_sums, lengths, strict=True)) / 2
    if loss_type in ("bnpo", "dapo"):  # Σ_{i,t} / Σ_{i,t} m
        return sum(masked_sums) / sum(lengths)
    return sum(masked_sums) / (2 * (3 if L is None else L))  # dr_grpo: Σ_{i,t} / (B·L)


def as_tensors(requires_grad=False):
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    logps = t(LOGPS).requires_grad_(requires_grad)
    return logps, t(OLD), t(REF), t(ADV), t(MASK)


@pytest.mark.parametrize(
    ("loss_type", "L"), [("grpo", None), ("bnpo", None), ("dapo", None), ("dr_grpo", None), ("dr_grpo", 8)]
)
def test_loss_value_matches_independent_computation(loss_type, L):
    logps, old, ref, adv, mask = as_tensors()
    loss, metrics = grpo_loss(
        logps,
        old,
        ref,
        adv,
        mask,
        epsilon=EPS,
        epsilon_high=EPS_HIGH,
        beta=BETA,
        loss_type=loss_type,
        max_completion_length=L,
    )
    assert loss.item() == pytest.approx(hand_aggregate(loss_type, L), abs=1e-12)
    k3 = [math.exp(REF[i][t] - LOGPS[i][t]) - (REF[i][t] - LOGPS[i][t]) - 1 for i in range(2) for t in range(3)]
    m = [MASK[i][t] for i in range(2) for t in range(3)]
    assert metrics["kl"] == pytest.approx(sum(a * b for a, b in zip(k3, m, strict=True)) / sum(m), rel=1e-6)


def test_loss_types_weight_tokens_as_the_formulas_say():
    """∂L/∂ℓ_{i,t}：grpo 给每条回答总权重 1/B，bnpo/dapo 给每个 token 1/Σm，dr_grpo 给每个 token 1/(B·L)。"""
    from rlhf_toy import aggregate_loss

    mask = torch.tensor(MASK)
    expected = {
        "grpo": [[1 / 6, 1 / 6, 1 / 6], [1 / 2, 0, 0]],
        "bnpo": [[1 / 4] * 3, [1 / 4, 0, 0]],
        "dapo": [[1 / 4] * 3, [1 / 4, 0, 0]],
        "dr_grpo": [[1 / 6] * 3, [1 / 6, 0, 0]],
    }
    for loss_type, weights in expected.items():
        ell = torch.zeros(2, 3, requires_grad=True)
        aggregate_loss(ell, mask, loss_type).backward()
        assert ell.grad.flatten().tolist() == pytest.approx(sum(weights, []), abs=1e-7), loss_type


def test_full_loss_gradient_matches_closed_form():
    """∂L/∂log π_θ(i,t) = 权重_{i,t} · (−A_i w_{i,t}·[未截断] + β(1 − e^{d_{i,t}}))，loss_type="grpo"。"""
    logps, old, ref, adv, mask = as_tensors(requires_grad=True)
    loss, _ = grpo_loss(logps, old, ref, adv, mask, epsilon=EPS, epsilon_high=EPS_HIGH, beta=BETA, loss_type="grpo")
    loss.backward()
    for i in range(2):
        n = sum(MASK[i])
        for t in range(3):
            w = math.exp(LOGPS[i][t] - OLD[i][t])
            _, g_clip, _ = hand_clip_loss_and_grad(w, ADV[i], EPS, EPS_HIGH)
            d = REF[i][t] - LOGPS[i][t]
            expected = MASK[i][t] / (2 * n) * (g_clip + BETA * (1 - math.exp(d)))
            assert logps.grad[i, t].item() == pytest.approx(expected, abs=1e-12), (i, t)


def test_on_policy_gradient_is_group_baseline_reinforce():
    """w ≡ 1（old_logps=None，TRL num_iterations=1 的做法）且 β = 0：∂L/∂log π_θ(i,t) = −A_i/(B·|o_i|)。"""
    logps, _, _, adv, mask = as_tensors(requires_grad=True)
    loss, metrics = grpo_loss(logps, None, None, adv, mask, beta=0.0, loss_type="grpo")
    loss.backward()
    expected = [[-ADV[i] * MASK[i][t] / (2 * sum(MASK[i])) for t in range(3)] for i in range(2)]
    assert logps.grad.flatten().tolist() == pytest.approx(sum(expected, []), abs=1e-12)
    assert loss.item() == pytest.approx(-sum(ADV) / 2, abs=1e-12)  # w = 1 时损失值就是 −mean(A)
    assert metrics["clip_ratio"] == 0.0 and "kl" not in metrics


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_all_zero_mask_row_contributes_nothing_and_no_nan(loss_type):
    logps, old, ref, adv, _ = as_tensors(requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    loss, metrics = grpo_loss(
        logps, old, ref, adv, mask, epsilon=EPS, epsilon_high=EPS_HIGH, beta=BETA, loss_type=loss_type
    )
    loss.backward()
    row0 = sum(hand_token_loss(LOGPS[0][t], OLD[0][t], REF[0][t], ADV[0]) for t in range(3))
    expected = {"grpo": row0 / 3 / 2, "bnpo": row0 / 3, "dapo": row0 / 3, "dr_grpo": row0 / 6}[loss_type]
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    assert torch.isfinite(logps.grad).all() and logps.grad[1].tolist() == [0.0, 0.0, 0.0]
    assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_all_zero_mask_gives_zero_loss(loss_type):
    logps, old, ref, adv, mask = as_tensors()
    loss, metrics = grpo_loss(logps, old, ref, adv, torch.zeros_like(mask), beta=BETA, loss_type=loss_type)
    assert loss.item() == 0.0 and metrics == {"clip_ratio": 0.0, "kl": 0.0}


# ---------------------------------------------------------------- 坏输入


def _ones(*shape):
    return torch.ones(*shape)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: grpo_loss(_ones(2, 3), _ones(2, 2), None, _ones(2), _ones(2, 3), beta=0.0),
            "old_logps 的形状是 (2, 2)，期望 (2, 3)（与 logps 相同）",
        ),
        (
            lambda: grpo_loss(_ones(2, 3), None, _ones(3, 3), _ones(2), _ones(2, 3)),
            "ref_logps 的形状是 (3, 3)，期望 (2, 3)（与 logps 相同）",
        ),
        (
            lambda: grpo_loss(_ones(2, 3), None, None, _ones(2), _ones(3, 2), beta=0.0),
            "mask 的形状是 (3, 2)，期望 (2, 3)（与 logps 相同）",
        ),
        (
            lambda: grpo_loss(_ones(2, 3), None, None, _ones(3), _ones(2, 3), beta=0.0),
            "advantages 的形状是 (3,)，期望 (2,)",
        ),
        (
            lambda: group_advantages(_ones(5), num_generations=2),
            "rewards 的形状是 (5,)，期望 (n_prompts * num_generations,)：5 不能被 num_generations=2 整除",
        ),
        (
            lambda: grpo_loss(_ones(2, 3), None, _ones(2, 3), _ones(2), _ones(2, 3), beta=-0.04),
            "beta 应 ≥ 0，实际是 -0.04",
        ),
        (
            lambda: grpo_loss(
                torch.tensor([[0.0, float("inf"), 0.0]] * 2), None, None, _ones(2), _ones(2, 3), beta=0.0
            ),
            "logps 含 2 个非有限值",
        ),
        (
            lambda: grpo_loss(_ones(2, 3), torch.full((2, 3), float("nan")), None, _ones(2), _ones(2, 3), beta=0.0),
            "old_logps 含 6 个非有限值",
        ),
        (
            lambda: grpo_loss(_ones(2, 3), None, None, _ones(2), _ones(2, 3), beta=0.04),
            "beta > 0 时需要 ref_logps（参考模型的对数概率），形状 (B, T)",
        ),
        (
            lambda: grpo_loss(_ones(2, 3), None, None, _ones(2), _ones(2, 3), beta=0.0, loss_type="token_mean"),
            "未知的 loss_type='token_mean'；可选：'grpo', 'bnpo', 'dr_grpo', 'dapo'",
        ),
    ],
    ids=[
        "old_logps",
        "ref_logps",
        "mask",
        "advantages",
        "num_generations",
        "negative-beta",
        "inf-logps",
        "nan-old_logps",
        "beta-without-ref",
        "loss_type",
    ],
)
def test_bad_input_raises_value_error_naming_argument_and_shapes(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


# ---------------------------------------------------------------- 极端 logits 与训练循环


def test_extreme_logits_give_finite_logps_and_finite_on_policy_loss():
    torch.manual_seed(0)
    logits = 1e4 * torch.randn(3, 5).sign()
    policy, ref = TablePolicy(logits), TablePolicy(logits.roll(1, dims=1))
    prompts = torch.arange(3).repeat_interleave(4)
    completions, mask = policy.sample(torch.arange(3), 4)
    all_answers = torch.arange(5).repeat(3, 1).reshape(-1, 1)
    assert torch.isfinite(policy.logps(torch.arange(3).repeat_interleave(5), all_answers)).all()
    ref_logps = ref.logps(prompts, completions).detach()
    adv = group_advantages(torch.rand(12), 4)
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        logps = policy.logps(prompts, completions)
        assert torch.isfinite(logps).all()
        loss, metrics = grpo_loss(logps, None, ref_logps, adv, mask, beta=0.04, loss_type=loss_type)
        (grad,) = torch.autograd.grad(loss, policy.logits)
        assert math.isfinite(loss.item()) and torch.isfinite(grad).all(), loss_type
        assert math.isfinite(metrics["kl"]) and metrics["clip_ratio"] == 0.0


def _bandit(seed: int, n_prompts: int = 6):
    torch.manual_seed(seed)
    task = BanditTask.make(n_prompts, 8)
    return task, TablePolicy.random(n_prompts, 8)


def test_train_grpo_improves_success_probability():
    task, policy = _bandit(seed=0)
    before = task.success_prob(policy)
    history = train_grpo(policy, task, GRPOConfig(steps=8), evaluate=task.evaluate)
    assert len(history) == 8
    assert history[-1]["success_prob"] > before + 0.4
    assert history[-1]["success_prob"] == pytest.approx(task.success_prob(policy))


def test_clip_ratio_is_zero_with_a_single_iteration_and_positive_with_two():
    task, policy = _bandit(seed=1)
    one = train_grpo(policy, task, GRPOConfig(steps=4, num_iterations=1))
    assert [h["clip_ratio"] for h in one] == [0.0] * 4
    task, policy = _bandit(seed=1)
    two = train_grpo(policy, task, GRPOConfig(steps=4, num_iterations=2))
    assert max(h["clip_ratio"] for h in two) > 0


@pytest.mark.parametrize(("num_iterations", "beta", "calls_per_step"), [(1, 0.0, 1), (1, 0.04, 1), (2, 0.0, 3)])
def test_old_logps_pass_is_skipped_with_a_single_iteration(num_iterations, beta, calls_per_step):
    """TRL：每批只更新一次时不算 log π_old（用 logps.detach()），更新多次时先在 no_grad 下算好。"""
    task, policy = _bandit(seed=2)
    ref = policy.frozen_copy()  # 在包装之前复制：参考模型的前向不计在内
    calls = []
    logps = policy.logps
    policy.logps = lambda *a, **k: (calls.append(1), logps(*a, **k))[1]
    train_grpo(policy, task, GRPOConfig(steps=3, num_iterations=num_iterations, beta=beta), ref_policy=ref)
    assert len(calls) == 3 * calls_per_step


def test_single_iteration_with_detached_logps_equals_explicit_old_logps():
    """省掉旧策略那次前向不改变结果：与先在 no_grad 下算 old_logps 的写法逐步相同。"""
    task, policy = _bandit(seed=3)
    explicit = policy.frozen_copy().requires_grad_(True)
    torch.manual_seed(0)
    train_grpo(policy, task, GRPOConfig(steps=3, num_iterations=1, beta=0.04))
    task, _ = _bandit(seed=3)
    ref = explicit.frozen_copy()
    optimizer = torch.optim.Adam(explicit.parameters(), lr=GRPOConfig().learning_rate, fused=True)
    torch.manual_seed(0)
    for _ in range(3):
        prompts = task.prompts()
        completions, mask = explicit.sample(prompts, 8)
        group = prompts.repeat_interleave(8)
        advantages = group_advantages(task.reward(group, completions), 8)
        with torch.no_grad():
            old, ref_logps = explicit.logps(group, completions), ref.logps(group, completions)
        loss, _ = grpo_loss(explicit.logps(group, completions), old, ref_logps, advantages, mask, beta=0.04)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert torch.allclose(policy.logits, explicit.logits, atol=1e-5)  # 只差末位的舍入


# ---------------------------------------------------------------- c(p) 与 GRPO 的驻点（docs/grpo.md “公式”与“运行结果”）

G_STATIONARY = 8


def advantage_scale(p: float, G: int = G_STATIONARY) -> float:
    """页面（与第 7 章）上 c(p) 的闭式：二元奖励时 GRPO 策略项的期望梯度是 c(p)·∇E_π[r]。"""
    s = sum(math.comb(G, k) * p ** (k - 1) * (1 - p) ** (G - k - 1) * math.sqrt(k * (G - k)) for k in range(1, G))
    return math.sqrt(G * (G - 1)) * s / (G * G)


def expected_advantage_given_reward(p: float, eps: float, G: int = G_STATIONARY) -> tuple[float, float]:
    """E[Â_1 | r_1 = 1] 与 E[Â_1 | r_1 = 0]：其余 G − 1 个回答里答对的个数 K ~ Bin(G − 1, p)，优势由 group_advantages 算。"""
    out = []
    for r in (1.0, 0.0):
        total = 0.0
        for k in range(G):
            rewards = torch.tensor([r] + [1.0] * k + [0.0] * (G - 1 - k), dtype=torch.float64)
            weight = math.comb(G - 1, k) * p**k * (1 - p) ** (G - 1 - k)
            total += weight * group_advantages(rewards, G, eps=eps)[0].item()
        out.append(total)
    return out[0], out[1]


@pytest.mark.parametrize("p", [0.05, 0.125, 0.5, 0.8, 0.9856, 0.999])
def test_advantage_scale_is_the_expected_group_advantage_gap(p):
    # docs/grpo.md: 二元奖励时策略项的期望梯度是 c(p)·∇E_π[r]。对查表策略，E_y[a(r(y))·∇log π(y)]
    # = (a(1) − a(0))·π(y*)(e_{y*} − π) = (a(1) − a(0))·∇E_π[r]，所以 c(p) = a(1) − a(0)。
    a1, a0 = expected_advantage_given_reward(p, eps=0.0)
    assert a1 - a0 == pytest.approx(advantage_scale(p), rel=1e-12)
    a1, a0 = expected_advantage_given_reward(p, eps=EPS_STD)  # TRL 的 eps 只改第四位有效数字
    assert a1 - a0 == pytest.approx(advantage_scale(p), rel=5e-4)
    # “G = 8 时，p 取遍 0 到 1，c(p) 在 1.736 到 2.475 之间”：最小在 p = 1/2，上确界是 p → 0、1 的极限 (G − 1)√G / G。
    assert 1.7358 < advantage_scale(p) < (G_STATIONARY - 1) * math.sqrt(G_STATIONARY) / G_STATIONARY


def test_expected_grpo_gradient_vanishes_at_the_stationary_point():
    # docs/grpo.md “运行结果”：驻点是系数 β/c(p) 的正向 KL 最优解（自洽地解）。在每个提示词的驻点上，
    # grpo_loss（同策略、loss_type="grpo"、k3 进损失）对 y ~ π 的精确期望梯度（样本看成固定）为 0；
    # 第 1 章的 π* 不是驻点。并核对页面打印的 β = 0.4、种子 0 的平均 0.8322。
    from rlhf_toy.studies.kl_estimators import forward_kl_optimum, reverse_kl_optimum

    beta = 0.4
    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    ref_logps = TablePolicy.random(20, 8).logits.detach().double().log_softmax(-1)

    def expected_gradient(logp_table: torch.Tensor, prompt: int, c: int) -> torch.Tensor:
        logits = logp_table.clone().requires_grad_(True)
        probs = logits.softmax(-1).detach()
        a1, a0 = expected_advantage_given_reward(probs[c].item(), eps=0.0)
        total = torch.zeros((), dtype=torch.float64)
        for y in range(8):
            logps = logits.log_softmax(-1)[y].reshape(1, 1)
            advantages = torch.tensor([a1 if y == c else a0], dtype=torch.float64)
            ref = ref_logps[prompt, y].reshape(1, 1)
            loss, _ = grpo_loss(logps, None, ref, advantages, torch.ones(1, 1, dtype=torch.float64), beta=beta)
            total = total + probs[y] * loss
        (grad,) = torch.autograd.grad(total, logits)
        return grad

    stationary = []
    for prompt, c in enumerate(task.correct.tolist()):
        rewards = torch.zeros(8, dtype=torch.float64)
        rewards[c] = 1.0
        beta_eff = beta
        for _ in range(40):
            log_p = forward_kl_optimum(ref_logps[prompt], rewards, beta_eff)
            beta_eff = beta / advantage_scale(log_p[c].exp().item())
        stationary.append(log_p[c].exp().item())
        assert expected_gradient(log_p, prompt, c).abs().max() < 1e-9
        pi_star = reverse_kl_optimum(ref_logps[prompt], rewards, beta)
        assert expected_gradient(pi_star, prompt, c).abs().max() > 1e-2
    assert sum(stationary) / len(stationary) == pytest.approx(0.8322, abs=5e-5)


# ---------------------------------------------------------------- “一屏读完”里两行设置的对照表


def test_book_defaults_are_the_first_row_of_the_settings_table():
    # docs/grpo.md，一屏读完：“演示的设置是 β = 0.04、同一批样本更新 2 次、`loss_type="grpo"`、学习率 0.5”；
    # “调用本书的 `GRPOConfig` 时不写这几个参数，得到的就是它；`grpo_loss` 不写 `beta`、`loss_type` 时也一样。”
    import inspect

    from rlhf_toy.losses.minimal import minimal_grpo_loss

    config = GRPOConfig()
    assert (config.beta, config.num_iterations, config.loss_type, config.learning_rate) == (0.04, 2, "grpo", 0.5)
    params = inspect.signature(grpo_loss).parameters
    assert (params["beta"].default, params["loss_type"].default) == (0.04, "grpo")
    assert inspect.signature(minimal_grpo_loss).parameters["beta"].default == 0.04
