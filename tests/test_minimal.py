"""最小实现（`rlhf_toy.losses.minimal`）与完整函数的等价性：同样的输入，值与梯度相同。

第 6、4、5 章的“代码”一节先展示最小实现，并说它与后面完整的函数在默认设置下相同；这里检查这句话。
每个测试用几个种子、float32 与 float64、带填充的掩码；GRPO 与 PPO 还让比率 ≠ 1（old_logps 与 logps 不同），
使截断真的起作用。
"""

from __future__ import annotations

import pytest
import torch

from rlhf_toy import (
    dpo_loss,
    gae_advantages,
    group_advantages,
    grpo_loss,
    kl_penalized_rewards,
    ppo_policy_loss,
    ppo_value_loss,
    whiten,
)
from rlhf_toy.losses.minimal import minimal_dpo_loss, minimal_grpo_loss, minimal_ppo_loss

SEEDS = [0, 1, 2, 3]
DTYPES = [torch.float32, torch.float64]


def right_padded_mask(lengths: list[int], T: int, dtype: torch.dtype) -> torch.Tensor:
    return (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).to(dtype)


def assert_same_value_and_grad(spine, full, leaves):
    """`spine()` 与 `full()` 各自求值、对 `leaves` 求梯度，逐项比较（容差取 dtype 的默认值）。"""
    got = spine()
    got_grads = torch.autograd.grad(got, leaves)
    want = full()
    want_grads = torch.autograd.grad(want, leaves)
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w)


# ---------------------------------------------------------------- GRPO


def grpo_inputs(seed: int, dtype: torch.dtype, off_policy: bool, binary: bool):
    gen = torch.Generator().manual_seed(seed)
    n_prompts, G, T = 3, 4, 5
    B = n_prompts * G
    if binary:  # 0/1 奖励，含全对、全错的组（优势恰为 0）
        rewards = (torch.rand(B, generator=gen) < 0.5).to(dtype)
        rewards[:G], rewards[G : 2 * G] = 1.0, 0.0
    else:
        rewards = torch.randn(B, generator=gen, dtype=dtype)
    logps = (-torch.rand(B, T, generator=gen, dtype=dtype) * 2).requires_grad_(True)
    # 比率在 exp(±0.5) 之间：一部分 token 落进截断区
    old_logps = (logps + torch.empty(B, T, dtype=dtype).uniform_(-0.5, 0.5, generator=gen)).detach()
    ref_logps = -torch.rand(B, T, generator=gen, dtype=dtype) * 2
    lengths = torch.randint(1, T + 1, (B,), generator=gen).tolist()
    mask = right_padded_mask(lengths, T, dtype)
    return rewards, logps, (old_logps if off_policy else None), ref_logps, mask, G


@pytest.mark.parametrize("binary", [False, True], ids=["continuous", "binary"])
@pytest.mark.parametrize("off_policy", [False, True], ids=["old=None", "old!=logps"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_minimal_grpo_matches_group_advantages_and_grpo_loss(seed, dtype, off_policy, binary):
    rewards, logps, old_logps, ref_logps, mask, G = grpo_inputs(seed, dtype, off_policy, binary)
    spine_old = logps.detach() if old_logps is None else old_logps

    def full():
        advantages = group_advantages(rewards, G)
        loss, _ = grpo_loss(logps, old_logps, ref_logps, advantages, mask, loss_type="grpo", epsilon=0.2, beta=0.04)
        return loss

    assert_same_value_and_grad(
        lambda: minimal_grpo_loss(rewards, logps, spine_old, ref_logps, mask, G, epsilon=0.2, beta=0.04),
        full,
        [logps],
    )


def test_minimal_grpo_differs_only_on_a_constant_group_of_inexact_rewards():
    """页面说的例外：8 个奖励全是 0.35（float32 里不精确，均值有舍入误差）时，group_advantages 置 0，最小实现照公式给出非 0。"""
    rewards = torch.tensor([0.35] * 8 + [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    logps = torch.full((16, 1), -1.0, requires_grad=True)
    mask, zeros = torch.ones(16, 1), torch.zeros(16, 1)
    spine_grad = torch.autograd.grad(
        minimal_grpo_loss(rewards, logps, logps.detach(), zeros, mask, 8, beta=0.0), logps
    )[0]
    full_loss, _ = grpo_loss(logps, None, None, group_advantages(rewards, 8), mask, beta=0.0)
    full_grad = torch.autograd.grad(full_loss, logps)[0]
    assert (full_grad[:8] == 0).all() and (spine_grad[:8] != 0).all()  # 常数组：完整函数给 0，最小实现不是
    torch.testing.assert_close(spine_grad[8:], full_grad[8:])  # 其余的组相同


def test_minimal_grpo_inputs_really_clip():
    """前提检查：off-policy 的输入里确有被截断的 token，否则上面的测试没有覆盖截断分支。"""
    rewards, logps, old_logps, ref_logps, mask, G = grpo_inputs(0, torch.float64, True, False)
    _, metrics = grpo_loss(logps, old_logps, ref_logps, group_advantages(rewards, G), mask)
    assert 0.0 < metrics["clip_ratio"] < 1.0


def test_minimal_grpo_defaults_are_grpo_loss_defaults():
    import inspect

    spine = inspect.signature(minimal_grpo_loss).parameters
    full = inspect.signature(grpo_loss).parameters
    for name in ("epsilon", "beta"):
        assert spine[name].default == full[name].default
    assert full["loss_type"].default == "grpo"
    assert inspect.signature(group_advantages).parameters["eps"].default == 1e-4


# ---------------------------------------------------------------- PPO


def ppo_inputs(seed: int, dtype: torch.dtype, off_policy: bool):
    gen = torch.Generator().manual_seed(seed)
    B, T = 6, 5

    def rand(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=dtype) * scale

    logps = (-torch.rand(B, T, generator=gen, dtype=dtype) * 2).requires_grad_(True)
    old_logps = (logps + rand(B, T, scale=0.3)).detach() if off_policy else logps.detach()
    ref_logps = -torch.rand(B, T, generator=gen, dtype=dtype) * 2
    old_values = rand(B, T)
    values = (old_values + rand(B, T, scale=0.3)).requires_grad_(True)  # 一部分超出 ±ε_V
    scores = rand(B)
    lengths = [5, 1] + torch.randint(1, T + 1, (B - 2,), generator=gen).tolist()
    mask = right_padded_mask(lengths, T, dtype)
    return scores, logps, old_logps, ref_logps, values, old_values, mask


@pytest.mark.parametrize("off_policy", [False, True], ids=["old=logps", "old!=logps"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_minimal_ppo_matches_the_full_pipeline(seed, dtype, off_policy):
    scores, logps, old_logps, ref_logps, values, old_values, mask = ppo_inputs(seed, dtype, off_policy)
    beta, gamma, lam, eps, eps_v, c_v = 0.05, 1.0, 0.95, 0.2, 0.2, 0.1

    def full():
        rewards, _ = kl_penalized_rewards(scores, old_logps, ref_logps, mask, beta, "k1")
        advantages, returns = gae_advantages(rewards, old_values, mask, gamma, lam)
        pg_loss, _ = ppo_policy_loss(logps, old_logps, whiten(advantages, mask), mask, eps)
        vf_loss, _ = ppo_value_loss(values, old_values, returns, mask, eps_v)
        return pg_loss + c_v * vf_loss

    def spine():
        return minimal_ppo_loss(
            scores, logps, old_logps, ref_logps, values, old_values, mask, beta, gamma, lam, eps, eps_v, c_v
        )

    assert_same_value_and_grad(spine, full, [logps, values])


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.9, 0.0), (0.99, 0.5)])
def test_minimal_ppo_matches_for_other_gamma_and_lambda(gamma, lam):
    scores, logps, old_logps, ref_logps, values, old_values, mask = ppo_inputs(7, torch.float64, True)

    def full():
        rewards, _ = kl_penalized_rewards(scores, old_logps, ref_logps, mask, 0.1, "k1")
        advantages, returns = gae_advantages(rewards, old_values, mask, gamma, lam)
        pg_loss, _ = ppo_policy_loss(logps, old_logps, whiten(advantages, mask), mask, 0.2)
        vf_loss, _ = ppo_value_loss(values, old_values, returns, mask, 0.2)
        return pg_loss + 0.1 * vf_loss

    assert_same_value_and_grad(
        lambda: minimal_ppo_loss(
            scores, logps, old_logps, ref_logps, values, old_values, mask, beta=0.1, gamma=gamma, lam=lam
        ),
        full,
        [logps, values],
    )


def test_minimal_ppo_inputs_really_clip():
    scores, logps, old_logps, ref_logps, values, old_values, mask = ppo_inputs(0, torch.float64, True)
    rewards, _ = kl_penalized_rewards(scores, old_logps, ref_logps, mask, 0.05, "k1")
    advantages, returns = gae_advantages(rewards, old_values, mask, 1.0, 0.95)
    _, pg_stats = ppo_policy_loss(logps, old_logps, whiten(advantages, mask), mask, 0.2)
    _, vf_stats = ppo_value_loss(values, old_values, returns, mask, 0.2)
    assert 0.0 < pg_stats["policy/clipfrac_avg"] < 1.0
    assert 0.0 < vf_stats["val/clipfrac_avg"] < 1.0


def test_minimal_ppo_defaults_are_ppo_config_defaults():
    import inspect

    from rlhf_toy import PPOConfig

    spine = inspect.signature(minimal_ppo_loss).parameters
    config = PPOConfig()
    pairs = {
        "beta": "kl_coef",
        "gamma": "gamma",
        "lam": "lam",
        "epsilon": "cliprange",
        "epsilon_value": "cliprange_value",
        "vf_coef": "vf_coef",
    }
    for spine_name, config_name in pairs.items():
        assert spine[spine_name].default == getattr(config, config_name), spine_name
    assert config.kl_estimator == "k1" and config.ent_coef == 0.0 and config.whiten_advantages


# ---------------------------------------------------------------- DPO


@pytest.mark.parametrize("beta", [0.1, 0.5])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_minimal_dpo_matches_dpo_loss(seed, dtype, beta):
    gen = torch.Generator().manual_seed(seed)
    chosen, rejected = ((-torch.rand(8, generator=gen, dtype=dtype) * 20).requires_grad_(True) for _ in range(2))
    ref_chosen, ref_rejected = (-torch.rand(8, generator=gen, dtype=dtype) * 20 for _ in range(2))
    assert_same_value_and_grad(
        lambda: minimal_dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta),
        lambda: dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)[0],
        [chosen, rejected],
    )
