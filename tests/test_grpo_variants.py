"""第 6 章（续）GRPO 变体的公式测试：每个期望值都在测试里按公式独立算出（纯 Python 的 math，或独立写出的 torch 式子），
再与 rlhf_toy 比较。

式号指 docs/grpo-variants.md 里的编号：
  eq:gv-agg        四种 loss_type 的汇总（TRL grpo / bnpo / dr_grpo / dapo）
  eq:gv-clip       非对称截断 clip(w, 1 − ε_low, 1 + ε_high)
  eq:gv-gspo       GSPO 的长度归一化序列比率 s_i
  eq:gv-gspo-grad  GSPO 损失对 log π_θ(o_{i,t}) 的梯度
  eq:gv-dynamic    动态采样：只保留组内奖励不全相同的组
  eq:gv-overlong   DAPO 的软超长惩罚
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from rlhf_toy import (
    BanditTask,
    GRPOConfig,
    TablePolicy,
    dynamic_sampling_mask,
    group_advantages,
    grpo_loss,
    sequence_log_ratio,
    soft_overlong_punishment,
    train_grpo,
)

# B = 4、T = 5，长度 5、2、3、0（最后一行整行是填充）；填充位置填了很大的有限值，被算进去会很显眼
LOGPS = [
    [-0.9, -1.6, -0.2, -2.2, -0.4],
    [-2.0, -0.3, 40.0, -50.0, 30.0],
    [-0.5, -1.1, -0.7, 25.0, -25.0],
    [9.0, -9.0, 9.0, -9.0, 9.0],
]
OLD = [
    [-1.1, -1.2, -0.2, -2.0, -0.9],
    [-1.5, -0.6, -9.0, 9.0, -9.0],
    [-0.8, -1.0, -0.4, -7.0, 7.0],
    [1.0, 1.0, 1.0, 1.0, 1.0],
]
REF = [
    [-1.0, -1.4, -0.3, -2.1, -0.5],
    [-1.8, -0.5, 0.0, 0.0, 0.0],
    [-0.6, -0.9, -0.6, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0],
]
LENGTHS = [5, 2, 3, 0]
ADV = [1.3, -0.7, 0.4, -1.0]
MASK = [[1.0 if t < n else 0.0 for t in range(5)] for n in LENGTHS]
EPS, EPS_HIGH, BETA = 0.2, 0.28, 0.05


def tensors(requires_grad: bool = True):
    f64 = dict(dtype=torch.float64)
    logps = torch.tensor(LOGPS, **f64).requires_grad_(requires_grad)
    return (
        logps,
        torch.tensor(OLD, **f64),
        torch.tensor(REF, **f64),
        torch.tensor(ADV, **f64),
        torch.tensor(MASK, **f64),
    )


# ------------------------------------------------------------ 独立实现（只照公式写，不调用 rlhf_toy）


def hand_clip(w: float, A: float, eps: float, eps_high: float) -> float:
    """式 eq:gv-clip：−min(wA, clip(w, 1−ε_low, 1+ε_high)A)。"""
    return -min(w * A, min(max(w, 1 - eps), 1 + eps_high) * A)


def hand_k3(lp: float, ref: float) -> float:
    d = ref - lp
    return math.exp(d) - d - 1


def hand_per_token_losses(level: str, beta: float) -> list[list[float]]:
    """ℓ_{i,t}（只在真实 token 上有意义）：token 级用 w_{i,t}；sequence 级每个 token 都是 ℓ_i(s_i) + β k3。"""
    rows = []
    for i, n in enumerate(LENGTHS):
        if level == "sequence":
            log_s = sum(LOGPS[i][t] - OLD[i][t] for t in range(n)) / max(n, 1)
            seq = hand_clip(math.exp(log_s), ADV[i], EPS, EPS_HIGH)
            policy = [seq] * 5
        else:
            policy = [hand_clip(math.exp(LOGPS[i][t] - OLD[i][t]), ADV[i], EPS, EPS_HIGH) for t in range(5)]
        rows.append([policy[t] + beta * hand_k3(LOGPS[i][t], REF[i][t]) for t in range(5)])
    return rows


def hand_aggregate(rows: list[list[float]], loss_type: str, L: int) -> float:
    """式 eq:gv-agg：TRL `_compute_loss` 的四种分母（单进程、无梯度累积）。"""
    sums = [sum(rows[i][t] for t in range(n)) for i, n in enumerate(LENGTHS)]
    B, N = len(LENGTHS), sum(LENGTHS)
    if loss_type == "grpo":
        return sum(s / max(n, 1) for s, n in zip(sums, LENGTHS, strict=True)) / B
    if loss_type == "dr_grpo":
        return sum(sums) / (B * L)
    return sum(sums) / max(N, 1)  # bnpo、dapo


def torch_gspo_formula(logps, old, ref, adv, mask, beta):
    """式 eq:gv-gspo 的另一份独立 torch 写法（用于 autograd 对照）：按序列循环、不向量化。"""
    total = logps.new_zeros(())
    for i in range(logps.shape[0]):
        n = int(mask[i].sum().item())
        if n == 0:
            continue
        log_s = sum(logps[i, t] - old[i, t] for t in range(n)) / n
        s = torch.exp(log_s)
        seq = -torch.minimum(s * adv[i], torch.clamp(s, 1 - EPS, 1 + EPS_HIGH) * adv[i])
        kl = sum(torch.exp(ref[i, t] - logps[i, t]) - (ref[i, t] - logps[i, t]) - 1 for t in range(n))
        total = total + (n * seq + beta * kl) / n
    return total / logps.shape[0]


# ------------------------------------------------------------ 汇总 × 比率层级，式 eq:gv-agg / eq:gv-gspo


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_loss_matches_independent_formula(loss_type, level):
    logps, old, ref, adv, mask = tensors()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sequence + token 汇总的警告另有测试
        loss, _ = grpo_loss(
            logps,
            old,
            ref,
            adv,
            mask,
            epsilon=EPS,
            epsilon_high=EPS_HIGH,
            beta=BETA,
            loss_type=loss_type,
            max_completion_length=7,
            importance_sampling_level=level,
        )
    expected = hand_aggregate(hand_per_token_losses(level, BETA), loss_type, L=7)
    assert loss.item() == pytest.approx(expected, abs=1e-12)


def test_gspo_gradient_matches_autograd_of_independent_formula():
    logps, old, ref, adv, mask = tensors()
    loss, _ = grpo_loss(
        logps, old, ref, adv, mask, epsilon=EPS, epsilon_high=EPS_HIGH, beta=BETA, importance_sampling_level="sequence"
    )
    (got,) = torch.autograd.grad(loss, logps)
    x = logps.detach().clone().requires_grad_(True)
    (want,) = torch.autograd.grad(torch_gspo_formula(x, old, ref, adv, mask, BETA), x)
    assert loss.item() == pytest.approx(torch_gspo_formula(x, old, ref, adv, mask, BETA).item(), abs=1e-12)
    assert torch.allclose(got, want, atol=1e-12)
    assert got[3].abs().sum() == 0 and (got * (1 - mask)).abs().sum() == 0  # 填充与空行没有梯度


def test_gspo_gradient_matches_closed_form():
    # 式 eq:gv-gspo-grad（β = 0，loss_type="grpo"）：∂L/∂log π(o_{i,t}) = −Â_i s_i m_{i,t} / (B |o_i|)，截断区内为 0
    logps, old, _, adv, mask = tensors()
    loss, _ = grpo_loss(
        logps, old, None, adv, mask, epsilon=EPS, epsilon_high=EPS_HIGH, beta=0.0, importance_sampling_level="sequence"
    )
    (got,) = torch.autograd.grad(loss, logps)
    B = len(LENGTHS)
    for i, n in enumerate(LENGTHS):
        s = math.exp(sum(LOGPS[i][t] - OLD[i][t] for t in range(n)) / max(n, 1))
        A = ADV[i]
        clipped = (A > 0 and s > 1 + EPS_HIGH) or (A < 0 and s < 1 - EPS)
        for t in range(5):
            want = 0.0 if clipped or t >= n else -A * s / (B * n)
            assert got[i, t].item() == pytest.approx(want, abs=1e-12), (i, t)


def test_gspo_ratio_is_one_on_policy_but_gradient_flows():
    logps, _, _, adv, mask = tensors()
    log_s = sequence_log_ratio(logps, logps.detach(), mask)
    assert log_s.shape == (4, 1) and log_s.detach().abs().max().item() == 0.0
    loss, metrics = grpo_loss(logps, None, None, adv, mask, beta=0.0, importance_sampling_level="sequence")
    (grad,) = torch.autograd.grad(loss, logps)
    want = torch.tensor([[-a / (4 * max(n, 1)) * (t < n) for t in range(5)] for a, n in zip(ADV, LENGTHS, strict=True)])
    assert torch.allclose(grad, want.to(grad.dtype), atol=1e-12)  # 同策略：GSPO 与 grpo 汇总的 GRPO 梯度相同
    token_loss, _ = grpo_loss(logps, None, None, adv, mask, beta=0.0)
    (token_grad,) = torch.autograd.grad(token_loss, logps)
    assert torch.allclose(grad, token_grad, atol=1e-12)
    assert metrics["clip_ratio"] == 0.0


def test_gspo_ratio_is_length_normalised_geometric_mean():
    # 每个 token 的比率都是 r 时，s_i = r，与长度无关；不开 |o_i| 次方的序列比率是 r^{|o_i|}
    r = 1.05
    for n in (1, 10, 100):
        logps = torch.full((1, n), math.log(r), dtype=torch.float64)
        log_s = sequence_log_ratio(logps, torch.zeros_like(logps), torch.ones_like(logps))
        assert math.exp(log_s.item()) == pytest.approx(r, rel=1e-12)
        assert math.exp(logps.sum().item()) == pytest.approx(r**n, rel=1e-12)
    # 一般情形：几何平均
    ratios = [0.5, 2.0, 1.5, 3.0]
    logps = torch.tensor([[math.log(x) for x in ratios] + [7.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    log_s = sequence_log_ratio(logps, torch.zeros_like(logps), mask)
    assert math.exp(log_s.item()) == pytest.approx(math.prod(ratios) ** (1 / 4), rel=1e-12)


def test_sequence_ratio_ignores_padding_values():
    logps, old, _, _, mask = tensors(requires_grad=False)
    noisy = logps + 100 * (1 - mask) * torch.randn_like(logps)
    assert torch.equal(sequence_log_ratio(logps, old, mask), sequence_log_ratio(noisy, old, mask))


def test_gspo_equals_token_level_when_every_completion_has_one_token():
    # T = 1（查表策略）：s_i = w_i，两种层级逐位相同；老虎机上的整个训练历史也相同
    histories = {}
    for level in ("token", "sequence"):
        torch.manual_seed(0)
        task = BanditTask.make(n_prompts=6, n_answers=5)
        policy = TablePolicy.random(6, 5)
        config = GRPOConfig(steps=5, importance_sampling_level=level, log_clip_sides=True)
        histories[level] = train_grpo(policy, task, config, evaluate=task.evaluate)
    assert histories["token"] == histories["sequence"]


def test_sequence_level_with_token_summed_loss_weights_each_completion_by_its_length():
    # 警告所说的原因：dapo/bnpo 下序列级损失的权重是 |o_i| / N，而 grpo 下是 1 / B
    logps, old, _, adv, mask = tensors()
    for loss_type, weights in (("grpo", [1 / 4] * 4), ("dapo", [n / sum(LENGTHS) for n in LENGTHS])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            loss, _ = grpo_loss(
                logps,
                old,
                None,
                adv,
                mask,
                epsilon=EPS,
                epsilon_high=EPS_HIGH,
                beta=0.0,
                loss_type=loss_type,
                importance_sampling_level="sequence",
            )
        per_seq = [hand_per_token_losses("sequence", 0.0)[i][0] for i in range(4)]
        per_seq[3] = 0.0  # 空行
        assert loss.item() == pytest.approx(sum(w * x for w, x in zip(weights, per_seq, strict=True)), abs=1e-12)


# ------------------------------------------------------------ 非对称截断，式 eq:gv-clip

RATIOS = [0.5, 0.75, 0.79, 0.81, 1.0, 1.15, 1.19, 1.21, 1.25, 1.27, 1.29, 1.5]  # 避开边界 0.8、1.2、1.28


@pytest.mark.parametrize("eps_high", [None, 0.28], ids=["symmetric", "clip-higher"])
def test_asymmetric_clip_gradient_regions_and_side_metrics(eps_high):
    eps_h = EPS if eps_high is None else eps_high
    n = len(RATIOS)
    old = torch.zeros(2, n, dtype=torch.float64)
    logps = torch.tensor([RATIOS, RATIOS], dtype=torch.float64).log().requires_grad_(True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, n, dtype=torch.float64)
    loss, metrics = grpo_loss(
        logps, old, None, adv, mask, epsilon=EPS, epsilon_high=eps_high, beta=0.0, loss_type="bnpo", log_clip_sides=True
    )
    (grad,) = torch.autograd.grad(loss, logps)
    high = [w > 1 + eps_h for w in RATIOS]  # Â > 0 一行：比率超过上界，截断起作用
    low = [w < 1 - EPS for w in RATIOS]  # Â < 0 一行：比率低于下界，截断起作用
    for row, A, clipped in ((0, 1.0, high), (1, -1.0, low)):
        for j, w in enumerate(RATIOS):
            want = 0.0 if clipped[j] else -A * w / (2 * n)  # d(−wA)/d log π = −A w，bnpo 再除以 token 数 2n
            assert grad[row, j].item() == pytest.approx(want, abs=1e-15), (A, w)
    assert metrics["clip_ratio/high_mean"] == pytest.approx(sum(high) / (2 * n))
    assert metrics["clip_ratio/low_mean"] == pytest.approx(sum(low) / (2 * n))
    assert metrics["clip_ratio"] == pytest.approx(metrics["clip_ratio/low_mean"] + metrics["clip_ratio/high_mean"])


def test_clip_higher_keeps_gradients_only_between_the_two_upper_bounds():
    w = torch.tensor([[1.1, 1.25, 1.35]], dtype=torch.float64)
    grads = {}
    for eps_high in (None, 0.28):
        logps = w.log().requires_grad_(True)
        loss, _ = grpo_loss(
            logps,
            torch.zeros_like(w),
            None,
            torch.ones(1, dtype=torch.float64),
            torch.ones_like(w),
            beta=0.0,
            epsilon_high=eps_high,
        )
        (grads[eps_high],) = torch.autograd.grad(loss, logps)
    assert grads[None][0].tolist() == pytest.approx([-1.1 / 3, 0.0, 0.0])
    assert grads[0.28][0].tolist() == pytest.approx([-1.1 / 3, -1.25 / 3, 0.0])


def test_sequence_level_clip_metrics_count_completions():
    # GSPO：截断判据作用在 s_i 上，clip_ratio 是截断起作用的回答比例（TRL 对 (B, 1) 取普通平均）
    logps = torch.tensor([[math.log(1.5)] * 3, [math.log(0.5)] * 3, [0.0] * 3], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    _, m = grpo_loss(
        logps,
        torch.zeros_like(logps),
        None,
        adv,
        mask,
        beta=0.0,
        importance_sampling_level="sequence",
        log_clip_sides=True,
    )
    assert (m["clip_ratio"], m["clip_ratio/low_mean"], m["clip_ratio/high_mean"]) == pytest.approx(
        (2 / 3, 1 / 3, 1 / 3)
    )


# ------------------------------------------------------------ 坏输入与不兼容的组合


@pytest.mark.parametrize("loss_type", ["bnpo", "dr_grpo", "dapo"])
def test_sequence_level_with_token_summed_loss_type_warns_with_reason(loss_type):
    logps, old, _, adv, mask = tensors()
    with pytest.warns(UserWarning, match=r"长度 \|o_i\|.*loss_type='grpo'"):
        grpo_loss(logps, old, None, adv, mask, beta=0.0, loss_type=loss_type, importance_sampling_level="sequence")


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_recommended_combinations_do_not_warn(level):
    logps, old, _, adv, mask = tensors()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grpo_loss(logps, old, None, adv, mask, beta=0.0, loss_type="grpo", importance_sampling_level=level)
        grpo_loss(logps, old, None, adv, mask, beta=0.0, loss_type="dapo", importance_sampling_level="token")


def test_bad_importance_sampling_level_and_per_token_advantages_are_refused():
    logps, old, _, adv, mask = tensors()
    with pytest.raises(ValueError, match=r"未知的 importance_sampling_level='seq'；可选：'token', 'sequence'"):
        grpo_loss(logps, old, None, adv, mask, beta=0.0, importance_sampling_level="seq")
    with pytest.raises(ValueError, match=r"未知的 loss_type='gspo'；可选：'grpo', 'bnpo', 'dr_grpo', 'dapo'"):
        grpo_loss(logps, old, None, adv, mask, beta=0.0, loss_type="gspo")
    with pytest.raises(ValueError, match=r"advantages 的形状应是 \(4,\)，实际是 \(4, 5\)"):
        grpo_loss(logps, old, None, adv[:, None] * mask, mask, beta=0.0, importance_sampling_level="sequence")
    with pytest.raises(ValueError, match=r"old_logps 的形状是 \(4, 4\)，期望 \(4, 5\)"):
        sequence_log_ratio(logps, old[:, :4], mask)


# ------------------------------------------------------------ 动态采样，式 eq:gv-dynamic


def hand_keep(rewards: list[float], G: int) -> list[bool]:
    return [len(set(rewards[g : g + G])) > 1 for g in range(0, len(rewards), G)]


def test_dynamic_sampling_keeps_exactly_the_groups_with_unequal_rewards():
    rewards = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.3, 0.9, 0.3, 0.3]
    keep = dynamic_sampling_mask(torch.tensor(rewards), num_generations=4)
    assert keep.dtype == torch.bool and keep.shape == (4,)
    assert keep.tolist() == hand_keep(rewards, 4) == [True, False, False, True]
    # 丢掉的组正是优势全为 0 的组
    adv = group_advantages(torch.tensor(rewards), 4).view(4, 4)
    assert ((adv != 0).any(dim=1) == keep).all()


def test_dynamic_sampling_edge_cases():
    assert dynamic_sampling_mask(torch.ones(8), 4).tolist() == [False, False]  # 全部相同 → 空
    assert dynamic_sampling_mask(torch.tensor([0.0, 1.0, 0.5]), 1).tolist() == [False, False, False]  # G = 1
    assert dynamic_sampling_mask(torch.tensor([0.1, 0.1, 0.1]), 3).tolist() == [False]  # 精确比较，不受求和误差影响
    with pytest.raises(ValueError, match=r"rewards 的形状是 \(6,\)，期望 \(n_prompts \* num_generations,\)"):
        dynamic_sampling_mask(torch.zeros(6), 4)
    with pytest.raises(ValueError, match=r"rewards 的形状是 \(2, 3\)，期望 1 维 \(B,\)"):
        dynamic_sampling_mask(torch.zeros(2, 3), 3)
    with pytest.raises(ValueError, match="num_generations 应是正整数"):
        dynamic_sampling_mask(torch.zeros(4), 0)


def test_dynamic_sampling_invariant_to_a_constant_per_group():
    torch.manual_seed(0)
    rewards = torch.randint(0, 2, (24,)).double()
    shifts = torch.tensor([3.0, -1.0, 0.5, 10.0, -7.0, 2.0], dtype=torch.float64).repeat_interleave(4)
    assert torch.equal(dynamic_sampling_mask(rewards, 4), dynamic_sampling_mask(rewards + shifts, 4))


def test_dropping_zero_variance_groups_only_rescales_the_grpo_loss_when_beta_is_zero():
    # β = 0 时被丢的组梯度恰为 0；loss_type="grpo" 的分母从 B 变成 B_kept，梯度整体乘 B / B_kept
    torch.manual_seed(1)
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    keep = dynamic_sampling_mask(rewards, 4).repeat_interleave(4)
    adv = group_advantages(rewards, 4)
    logps = (-torch.rand(12, 3, dtype=torch.float64)).requires_grad_(True)
    old = logps.detach() + 0.1 * torch.randn(12, 3, dtype=torch.float64)
    mask = torch.ones(12, 3, dtype=torch.float64)
    full, _ = grpo_loss(logps, old, None, adv, mask, beta=0.0)
    kept, _ = grpo_loss(logps[keep], old[keep], None, adv[keep], mask[keep], beta=0.0)
    (g_full,) = torch.autograd.grad(full, logps)
    (g_kept,) = torch.autograd.grad(kept, logps)
    assert g_full[~keep].abs().max().item() == 0.0
    assert torch.allclose(g_kept, g_full * 12 / keep.sum(), atol=1e-14)


def test_train_grpo_dynamic_sampling_logs_dropped_groups_and_effective_batch():
    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=10, n_answers=4)
    policy = TablePolicy.random(10, 4)
    history = train_grpo(policy, task, GRPOConfig(steps=15, dynamic_sampling=True), evaluate=task.evaluate)
    for h in history:
        assert h["effective_batch_size"] == round(80 * (1 - h["frac_reward_zero_std"]))
        assert h["effective_batch_size"] % 8 == 0
    assert history[-1]["frac_reward_zero_std"] > history[0]["frac_reward_zero_std"]  # 学会之后全对的组变多
    assert history[-1]["success_prob"] > 0.9


def test_train_grpo_with_every_group_dropped_does_not_update():
    task = BanditTask(correct=torch.tensor([0, 0]), n_answers=3)
    policy = TablePolicy(torch.tensor([[30.0, 0.0, 0.0], [30.0, 0.0, 0.0]]))  # 几乎必然全对
    before = policy.logits.detach().clone()
    history = train_grpo(policy, task, GRPOConfig(steps=2, num_generations=4, dynamic_sampling=True))
    assert torch.equal(policy.logits.detach(), before)
    assert [h["effective_batch_size"] for h in history] == [0, 0]
    assert history[0]["loss"] == 0.0 and history[0]["clip_ratio"] == 0.0 and history[0]["frac_reward_zero_std"] == 1.0


def test_default_config_history_is_unchanged_by_the_new_options():
    runs = []
    for extra in ({}, {"importance_sampling_level": "token", "dynamic_sampling": False, "log_clip_sides": False}):
        torch.manual_seed(0)
        task = BanditTask.make(n_prompts=6, n_answers=5)
        policy = TablePolicy.random(6, 5)
        runs.append(train_grpo(policy, task, GRPOConfig(steps=4, **extra), evaluate=task.evaluate))
    assert runs[0] == runs[1] and set(runs[0][0]) == {"step", "loss", "reward", "clip_ratio", "kl", "success_prob"}


# ------------------------------------------------------------ 软超长惩罚，式 eq:gv-overlong


def hand_overlong(n: float, L_max: int, L_cache: int) -> float:
    if n <= L_max - L_cache:
        return 0.0
    if n <= L_max:
        return ((L_max - L_cache) - n) / L_cache
    return -1.0


def test_overlong_penalty_three_regions_and_boundaries():
    L_max, L_cache = 20, 5
    lengths = [0, 10, 15, 16, 17, 18, 19, 20, 21, 100]  # 15 与 20 是两个边界
    got = soft_overlong_punishment(torch.tensor(lengths), L_max, L_cache)
    assert got.dtype == torch.get_default_dtype() and got.shape == (10,)
    assert got.tolist() == pytest.approx([hand_overlong(n, L_max, L_cache) for n in lengths], abs=1e-7)
    assert got[2].item() == 0.0 and got[7].item() == -1.0  # 两端连续
    assert got.tolist()[3:8] == pytest.approx([-0.2, -0.4, -0.6, -0.8, -1.0])


def test_overlong_penalty_paper_setting_dtypes_and_no_cache():
    L_max, L_cache = 20480, 4096
    lengths = torch.tensor([16384.0, 16385.0, 18432.0, 20480.0, 20481.0], dtype=torch.float64)
    got = soft_overlong_punishment(lengths, L_max, L_cache)
    assert got.dtype == torch.float64
    assert got.tolist() == pytest.approx([hand_overlong(n, L_max, L_cache) for n in lengths.tolist()], abs=1e-15)
    assert soft_overlong_punishment(torch.tensor([5, 6]), 5, 0).tolist() == [0.0, -1.0]  # L_cache = 0：硬截止
    assert soft_overlong_punishment(torch.tensor([0, 1, 3]), 3, 3).tolist() == pytest.approx([0.0, -1 / 3, -1.0])


def test_overlong_penalty_bad_input():
    with pytest.raises(ValueError, match=r"soft_punish_cache 应是 \[0, max_completion_len=10\] 内的整数，实际是 11"):
        soft_overlong_punishment(torch.tensor([3]), 10, 11)
    with pytest.raises(ValueError, match="max_completion_len 应是正整数，实际是 0"):
        soft_overlong_punishment(torch.tensor([3]), 0, 0)
    with pytest.raises(ValueError, match="lengths 应 ≥ 0"):
        soft_overlong_punishment(torch.tensor([-1, 3]), 10, 2)
    with pytest.raises(ValueError, match=r"lengths 的形状是 \(1, 2\)，期望 1 维 \(B,\)"):
        soft_overlong_punishment(torch.tensor([[1, 3]]), 10, 2)


def test_overlong_penalty_is_monotone_non_increasing_and_bounded():
    lengths = torch.arange(0, 40)
    pen = soft_overlong_punishment(lengths, 30, 8)
    assert (pen[1:] <= pen[:-1]).all() and pen.min() == -1.0 and pen.max() == 0.0
