"""第 2 章：对数导数技巧、REINFORCE 损失、基线与 RLOO 的留一法恒等式。

每个断言都对照测试里按公式独立写出的计算，而不是对照包里的另一段代码。
"""

from __future__ import annotations

import math

import pytest
import torch

from rlhf_toy import BanditTask, RLOOConfig, TablePolicy, reinforce_loss, rloo_advantages, train_rloo
from rlhf_toy.studies.gradient_variance import expected_reward, policy_gradient_stats
from rlhf_toy.train.reinforce import ReinforceConfig, reinforce_advantages, train_reinforce


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # 小张量：多线程只增加开销
    yield
    torch.set_num_threads(previous)


def test_log_derivative_trick_exact():
    """∇ Σ_y π(y) r(y) = Σ_y π(y) r(y) ∇log π(y)：两边都用 autograd 精确求出。"""
    torch.manual_seed(0)
    logits = torch.randn(5, requires_grad=True)
    r = torch.tensor([0.0, 1.0, 0.5, -2.0, 3.0])
    (lhs,) = torch.autograd.grad((logits.softmax(-1) * r).sum(), logits)
    p = logits.softmax(-1).detach()
    rhs = torch.zeros(5)
    for y in range(5):
        (g,) = torch.autograd.grad(torch.log_softmax(logits, -1)[y], logits)
        rhs += p[y] * r[y] * g
    torch.testing.assert_close(lhs, rhs)


def test_reinforce_gradient_matches_closed_form():
    """查表策略：∂/∂θ_x [−Â log π(y|x)] = −Â (e_y − π(·|x))，再除以 B。"""
    torch.manual_seed(1)
    policy = TablePolicy.random(3, 4, scale=1.0)
    prompts = torch.tensor([0, 0, 2])
    completions = torch.tensor([[1], [3], [2]])
    adv = torch.tensor([0.5, -1.0, 2.0])
    loss, _ = reinforce_loss(policy.logps(prompts, completions), adv, torch.ones(3, 1))
    loss.backward()
    probs = policy.probs().detach()
    expected = torch.zeros(3, 4)
    for x, y, a in zip(prompts.tolist(), completions[:, 0].tolist(), adv.tolist(), strict=True):
        onehot = torch.zeros(4)
        onehot[y] = 1.0
        expected[x] += -a * (onehot - probs[x]) / 3
    torch.testing.assert_close(policy.logits.grad, expected)


def test_reinforce_loss_sums_tokens_within_mask():
    logps = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([2.0, -1.0])
    loss, _ = reinforce_loss(logps, adv, mask)
    expected = -(2.0 * (-6.0) + (-1.0) * (-1.0)) / 2
    assert loss.item() == pytest.approx(expected)
    loss_tok, _ = reinforce_loss(logps, adv.unsqueeze(1).expand(2, 3), mask)  # (B, T) 形式给出同样结果
    assert loss_tok.item() == pytest.approx(expected)


def test_reinforce_loss_empty_row_contributes_zero():
    loss, _ = reinforce_loss(torch.tensor([[-1.0], [-2.0]]), torch.tensor([1.0, 5.0]), torch.tensor([[1.0], [0.0]]))
    assert loss.item() == pytest.approx(0.5)  # −(1·(−1) + 0)/2


def test_rloo_identity_matches_leave_one_out_loop():
    torch.manual_seed(2)
    k = 5
    rewards = torch.randn(3 * k)
    got = rloo_advantages(rewards, k)
    for i in range(rewards.numel()):
        g = i // k
        others = [rewards[j].item() for j in range(g * k, g * k + k) if j != i]
        assert got[i].item() == pytest.approx(rewards[i].item() - sum(others) / (k - 1), abs=1e-6)


def test_rloo_edge_cases():
    assert torch.equal(rloo_advantages(torch.full((6,), 0.3), 3), torch.zeros(6))  # 组内全相同：恰为 0
    assert torch.equal(rloo_advantages(torch.tensor([1.0, 0.0]), 1), torch.zeros(2))  # 没有“其余回答”
    with pytest.raises(ValueError, match=r"不能被 num_generations=4 整除"):
        rloo_advantages(torch.ones(6), 4)
    with pytest.raises(ValueError, match=r"rewards 的形状是 \(2, 2\)，期望 1 维"):
        rloo_advantages(torch.ones(2, 2), 2)
    with pytest.raises(ValueError, match=r"非有限值"):
        rloo_advantages(torch.tensor([1.0, float("nan")]), 2)
    with pytest.raises(ValueError, match=r"num_generations 应是正整数"):
        rloo_advantages(torch.ones(2), 0)


def test_reinforce_advantages_baselines():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 0.0, 0.0])
    assert torch.equal(reinforce_advantages(r, 4, "none"), r)
    torch.testing.assert_close(
        reinforce_advantages(r, 4, "mean"), torch.tensor([0.75, -0.25, -0.25, -0.25, 1, 1, -1, -1])
    )
    torch.testing.assert_close(reinforce_advantages(r, 4, "rloo"), reinforce_advantages(r, 4, "mean") * 4 / 3)
    with pytest.raises(ValueError, match=r"未知的 baseline='opt'"):
        reinforce_advantages(r, 4, "opt")


def test_expected_reward_is_mean_success_prob():
    torch.manual_seed(3)
    task, policy = BanditTask.make(6, 5), TablePolicy.random(6, 5)
    assert expected_reward(policy, task).item() == pytest.approx(task.success_prob(policy))


def test_gradient_estimator_bias_and_offset_variance():
    """无基线与 RLOO 无偏（系数 ≈ 1）；含自身的均值基线把梯度缩成 (G−1)/G；奖励加常数只放大无基线的方差。"""
    torch.manual_seed(4)
    task, policy = BanditTask.make(10, 4), TablePolicy.random(10, 4)
    k = 4
    stats = {b: policy_gradient_stats(policy, task, b, k, n_batches=150) for b in ("none", "mean", "rloo")}
    assert stats["none"]["scale"] == pytest.approx(1.0, abs=0.08)
    assert stats["rloo"]["scale"] == pytest.approx(1.0, abs=0.08)
    assert stats["mean"]["scale"] == pytest.approx((k - 1) / k, abs=0.08)
    shifted = {b: policy_gradient_stats(policy, task, b, k, n_batches=150, reward_offset=1.0) for b in ("none", "rloo")}
    assert shifted["none"]["variance"] > 4 * stats["none"]["variance"]
    assert shifted["rloo"]["variance"] == pytest.approx(stats["rloo"]["variance"], rel=0.2)
    with pytest.raises(ValueError, match="n_batches"):
        policy_gradient_stats(policy, task, "none", k, n_batches=1)


def test_training_raises_success_and_baseline_survives_offset():
    torch.manual_seed(5)
    task, init = BanditTask.make(20, 8), TablePolicy.random(20, 8)
    start = task.success_prob(init)
    final = {}
    for baseline in ("none", "rloo"):
        torch.manual_seed(6)
        policy = TablePolicy(init.logits)
        config = ReinforceConfig(baseline=baseline, steps=40, reward_offset=5.0)
        final[baseline] = train_reinforce(policy, task, config, evaluate=task.evaluate)[-1]["success_prob"]
    assert final["rloo"] > start + 0.4
    assert final["rloo"] > final["none"] + 0.3


def test_train_rloo_kl_metric_and_config_check():
    torch.manual_seed(7)
    task, policy = BanditTask.make(5, 4), TablePolicy.random(5, 4)
    history = train_rloo(policy, task, RLOOConfig(steps=3))
    assert [h["step"] for h in history] == [1, 2, 3]
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # 第一步 π_old = π_ref
    assert all(math.isfinite(h["loss"]) for h in history)
    with pytest.raises(ValueError, match="baseline 应是 'rloo'"):
        train_rloo(policy, task, RLOOConfig(baseline="none"))


class _TwoTokenPolicy(torch.nn.Module):
    """测试用的两 token 策略：每个位置一张独立的表；第一个 token 为 0 的回答第二个 token 被掩掉。"""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(logits.clone())  # (n_prompts, 2, n_answers)

    def sample(self, prompts, num_generations):
        with torch.no_grad():
            probs = self.logits[prompts].softmax(-1).repeat_interleave(num_generations, dim=0)  # (B, 2, A)
            completions = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(-1, 2)
        mask = torch.ones(completions.shape)
        mask[:, 1] = (completions[:, 0] != 0).float()
        return completions, mask

    def logps(self, prompts, completions):
        return self.logits[prompts].log_softmax(-1).gather(2, completions.unsqueeze(-1)).squeeze(-1)

    def frozen_copy(self):
        ref = _TwoTokenPolicy(self.logits.detach())
        ref.requires_grad_(False)
        return ref


class _FirstTokenTask:
    def __init__(self, correct):
        self.correct = correct

    def prompts(self):
        return torch.arange(self.correct.shape[0])

    def reward(self, prompts, completions):
        return (completions[:, 0] == self.correct[prompts]).float()


def test_train_reinforce_kl_in_reward_matches_formula_when_kl_nonzero():
    """式 (pg-kl-reward)：第二步起 π_old ≠ π_ref，逐 token 的 k1 在掩码内按序列求和，乘 β 后在留一法之前从奖励扣掉。"""
    torch.manual_seed(8)
    n_prompts, k, beta = 6, 4, 0.5
    task = _FirstTokenTask(torch.randint(0, 3, (n_prompts,)))
    policy = _TwoTokenPolicy(0.3 * torch.randn(n_prompts, 2, 3))
    ref = policy.frozen_copy()
    config = ReinforceConfig(baseline="rloo", beta=beta, steps=1, learning_rate=0.5)
    train_reinforce(policy, task, config, ref_policy=ref)  # 第一步之后 π_old ≠ π_ref
    start = policy.logits.detach().clone()

    torch.manual_seed(9)
    step2 = train_reinforce(policy, task, config, ref_policy=ref)[0]

    # 按式独立重算同一批（同一种子 → 同样的样本）
    torch.manual_seed(9)
    hand = _TwoTokenPolicy(start)
    prompts = task.prompts()
    completions, mask = hand.sample(prompts, k)
    group_prompts = prompts.repeat_interleave(k)
    assert mask[:, 1].min() == 0 and mask[:, 1].max() == 1  # 批里既有一个 token 也有两个 token 的回答
    r = task.reward(group_prompts, completions)
    logp = torch.log_softmax(start, -1)[group_prompts]  # (B, 2, A)
    ref_logp = torch.log_softmax(ref.logits, -1)[group_prompts]
    per_token = [
        logp[i, t, completions[i, t]] - ref_logp[i, t, completions[i, t]] for i in range(len(r)) for t in (0, 1)
    ]
    kl_seq = torch.stack(per_token).reshape(-1, 2).mul(mask).sum(-1)
    assert (kl_seq.abs() > 1e-2).float().mean() > 0.5  # 多数回答的 KL 不为 0
    penalised = (r - beta * kl_seq).reshape(-1, k)
    adv = torch.stack(
        [penalised[g, i] - (penalised[g].sum() - penalised[g, i]) / (k - 1) for g in range(n_prompts) for i in range(k)]
    )
    seq_logp = torch.stack([logp[i, t, completions[i, t]] for i in range(len(r)) for t in (0, 1)]).reshape(-1, 2)
    expected_loss = -(adv * (seq_logp * mask).sum(-1)).mean()
    assert step2["kl"] == pytest.approx(kl_seq.mean().item(), rel=1e-5)
    assert step2["loss"] == pytest.approx(expected_loss.item(), rel=1e-5)


def test_reinforce_loss_bad_inputs():
    with pytest.raises(ValueError, match=r"advantages 的形状是 \(3,\)，期望 \(2,\)"):
        reinforce_loss(torch.zeros(2, 1), torch.zeros(3), torch.ones(2, 1))
    with pytest.raises(ValueError, match=r"mask 的形状是 \(2, 2\)，期望 \(2, 1\)"):
        reinforce_loss(torch.zeros(2, 1), torch.zeros(2), torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"logps 的形状是 \(2,\)，期望 2 维"):
        reinforce_loss(torch.zeros(2), torch.zeros(2), torch.ones(2))


@pytest.mark.parametrize("name", ["reinforce", "rloo"])
def test_demos_quick(name, capsys):
    from rlhf_toy.demos import DEMOS

    results = DEMOS[name](seed=0, quick=True)
    assert "success_prob" in capsys.readouterr().out
    if name == "rloo":
        assert results[-1]["success_prob"] > 0.5
    else:  # 奖励加 5 时，RLOO 明显好于无基线
        final = {(r["offset"], r["baseline"]): r["success_prob"] for r in results}
        assert final[(5.0, "rloo")] > final[(5.0, "none")] + 0.3
