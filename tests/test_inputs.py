"""Bad input gets a clear ValueError naming the argument, its shape and the expected shape;
numerical edge cases are defined (no silent NaN, no wrong broadcast)."""

from __future__ import annotations

import pytest
import torch

from rlhf_toy import (
    BanditTask,
    TablePolicy,
    aggregate_loss,
    dpo_loss,
    group_advantages,
    grpo_loss,
    importance_corrected_k3,
    kl_estimate,
    masked_mean,
    ppo_policy_loss,
    rloo_advantages,
    sequence_log_ratio,
    whiten,
)
from rlhf_toy.losses.aggregate import LOSS_TYPES

B, T = 4, 3


def ones(*shape):
    return torch.ones(*shape)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: grpo_loss(ones(B, T), ones(B, 2), ones(B, T), ones(B), ones(B, T)),
            r"old_logps 的形状是 \(4, 2\)，期望 \(4, 3\)（与 logps 相同）",
        ),
        (
            lambda: grpo_loss(ones(B, T), ones(B, T), ones(B, T), ones(B), ones(B, 2)),
            r"mask 的形状是 \(4, 2\)，期望 \(4, 3\)",
        ),
        (
            lambda: grpo_loss(ones(B, T), ones(B, T), ones(B, T), ones(B + 1), ones(B, T)),
            r"advantages 的形状是 \(5,\)，期望 \(4,\)",
        ),
        (lambda: grpo_loss(ones(B), ones(B), ones(B), ones(B), ones(B)), r"logps 的形状是 \(4,\)，期望 2 维 \(B, T\)"),
        (lambda: grpo_loss(ones(B, T), ones(B, T), ones(B, T), ones(B), ones(B, T), beta=-0.1), r"beta 应 ≥ 0"),
        (lambda: grpo_loss(ones(B, T), None, None, ones(B), ones(B, T), beta=0.1), r"beta > 0 时需要 ref_logps"),
        (
            lambda: grpo_loss(torch.full((B, T), float("nan")), None, None, ones(B), ones(B, T), beta=0.0),
            r"logps 含 12 个非有限值",
        ),
        (lambda: grpo_loss(ones(B, T), None, None, ones(B), 2 * ones(B, T), beta=0.0), r"mask 只能含 0 和 1"),
        (
            lambda: grpo_loss(ones(B, T), None, None, ones(B), ones(B, T), beta=0.0, loss_type="mean"),
            r"未知的 loss_type='mean'；可选：'grpo', 'bnpo', 'dr_grpo', 'dapo'",
        ),
        (
            lambda: group_advantages(ones(6), num_generations=4),
            r"rewards 的形状是 \(6,\).*不能被 num_generations=4 整除",
        ),
        (lambda: group_advantages(ones(2, 4), num_generations=4), r"rewards 的形状是 \(2, 4\)，期望 1 维 \(B,\)"),
        (lambda: group_advantages(ones(4), num_generations=0), r"num_generations 应是正整数"),
        (lambda: group_advantages(torch.tensor([1.0, float("inf")]), num_generations=2), r"rewards 含 1 个非有限值"),
        (lambda: group_advantages(ones(4), num_generations=2, scale_rewards="std"), r"未知的 scale_rewards='std'"),
        (lambda: dpo_loss(ones(B), ones(B + 1), ones(B), ones(B)), r"rejected_logps 的形状是 \(5,\)，期望 \(4,\)"),
        (lambda: dpo_loss(ones(B), ones(B), ones(B), ones(B), beta=-1.0), r"beta 应 ≥ 0"),
        (lambda: kl_estimate(ones(B, T), ones(B, 1)), r"ref_logps 的形状是 \(4, 1\)，期望 \(4, 3\)"),
        (lambda: kl_estimate(ones(B, T), ones(B, T), estimator="k4"), r"可选：'k1', 'k2', 'k3'"),
        (
            lambda: aggregate_loss(ones(B, T), ones(B, T), "dr_grpo", max_completion_length=0),
            r"max_completion_length 应 ≥ 1",
        ),
        (lambda: masked_mean(ones(B, T), ones(T, B)), r"mask 的形状是 \(3, 4\)，期望 \(4, 3\)（与 x 相同）"),
        (lambda: TablePolicy(ones(3)), r"logits 的形状是 \(3,\)，期望 2 维"),
        (
            lambda: TablePolicy(ones(3, 4)).logps(torch.arange(3), torch.zeros(3, 2, dtype=torch.long)),
            r"completions 的形状是 \(3, 2\)，期望 \(3, 1\)",
        ),
        (lambda: BanditTask.make(n_prompts=5, n_answers=1), r"n_answers ≥ 2"),
    ],
)
def test_bad_input_raises_value_error_naming_argument_and_shapes(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_equal_rewards_in_a_group_give_exactly_zero_advantage():
    adv = group_advantages(torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0]), num_generations=3)
    assert torch.equal(adv, torch.zeros(6))


def test_all_zero_mask_row_contributes_nothing_and_gives_no_nan():
    logps = torch.randn(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        loss, metrics = grpo_loss(
            logps, None, logps.detach() - 0.1, torch.tensor([1.0, -1.0]), mask, loss_type=loss_type
        )
        loss.backward()
        assert torch.isfinite(loss)
        assert torch.equal(logps.grad[1], torch.zeros(3)), loss_type
        logps.grad = None
    empty, _ = grpo_loss(logps, None, None, torch.ones(2), torch.zeros(2, 3), beta=0.0, loss_type="bnpo")
    assert empty.item() == 0.0


def test_extreme_logits_give_finite_log_probs_and_losses():
    logits = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 0.0]])
    policy = TablePolicy(logits)
    prompts = torch.tensor([0, 1])
    completions = torch.tensor([[1], [0]])  # the answers the policy gives ~0 probability
    logps = policy.logps(prompts, completions)
    assert torch.isfinite(logps).all() and (logps < -1e3).all()
    with torch.no_grad():  # a reference model is a constant
        ref = TablePolicy(torch.zeros(2, 3)).logps(prompts, completions)
    loss, m = grpo_loss(logps, logps.detach(), ref, torch.tensor([1.0, -1.0]), torch.ones(2, 1), beta=0.0)
    assert torch.isfinite(loss)
    d_loss, _ = dpo_loss(logps[:, 0], ref[:, 0], ref[:, 0], ref[:, 0], beta=0.1)
    assert torch.isfinite(d_loss)


# --- cases found by trying the API: each was a silent NaN, a zero gradient or torch's own error before ---


@pytest.mark.parametrize("eps", [1e-4, 1e-6, 1e-8, 1e-9, 0.0])
@pytest.mark.parametrize("scale_rewards", ["group", "batch"])
def test_equal_rewards_not_exact_in_float32_give_exactly_zero_advantage(eps, scale_rewards):
    # mean([0.35] * 8) is not 0.35 in float32: without the guard the rounding error was divided by σ + ε
    rewards = torch.tensor([0.35] * 8 + [0.2] * 8)
    adv = group_advantages(rewards, num_generations=8, scale_rewards=scale_rewards, eps=eps)
    assert torch.equal(adv, torch.zeros(16))


def test_constant_groups_are_zeroed_without_touching_the_other_groups():
    rewards = torch.tensor([0.35, 0.35, 1.0, 0.0])
    adv = group_advantages(rewards, num_generations=2)
    assert torch.equal(adv[:2], torch.zeros(2))
    assert torch.allclose(adv[2:], torch.tensor([0.5, -0.5]) / (torch.tensor([1.0, 0.0]).std() + 1e-4))


@pytest.mark.parametrize(
    ("eps", "match"),
    [(-0.5, r"eps 应 ≥ 0，实际是 -0.5"), (float("nan"), r"eps 应 ≥ 0，实际是 nan"), (float("inf"), r"eps 应是有限数")],
)
def test_eps_must_be_finite_and_nonnegative(eps, match):
    # before: eps=-0.5 gave ±inf advantages, whiten(eps=-10) NaN
    with pytest.raises(ValueError, match=match):
        group_advantages(torch.tensor([1.0, 0.0]), num_generations=2, eps=eps)
    with pytest.raises(ValueError, match=match):
        whiten(torch.tensor([1.0, 2.0, 3.0]), torch.ones(3), eps=eps)


@pytest.mark.parametrize("advantage_fn", [group_advantages, rloo_advantages])
def test_integer_rewards_are_refused_with_a_value_error(advantage_fn):
    with pytest.raises(
        ValueError, match=r"rewards 应是浮点张量，实际 dtype 是 torch.int64；请先转换，例如 rewards.float\(\)"
    ):
        advantage_fn(torch.tensor([1, 0, 1, 0]), num_generations=2)


def _policy_logps():
    return torch.randn(B, T, requires_grad=True)


def test_old_logps_with_a_gradient_are_refused_not_silently_zero_gradient():
    # the TRL#2703 bug: old log-probs from a forward pass with grad; the ratio's gradient cancels to exactly 0
    logps = _policy_logps()
    advantages, mask = torch.randn(B), ones(B, T)
    calls = [
        lambda: grpo_loss(logps, logps * 1.0, None, advantages, mask, beta=0.0),
        lambda: ppo_policy_loss(logps, logps * 1.0, advantages[:, None].expand(B, T), mask),
        lambda: sequence_log_ratio(logps, logps * 1.0, mask),
        lambda: importance_corrected_k3(logps, torch.zeros(B, T), old_logps=logps * 1.0),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"old_logps 带着梯度（requires_grad=True）.*torch.no_grad\(\)"):
            call()


def test_reference_log_probs_with_a_gradient_are_refused():
    logps = _policy_logps()
    with pytest.raises(ValueError, match=r"ref_logps 带着梯度"):
        grpo_loss(logps, None, logps * 1.0, torch.randn(B), ones(B, T), beta=0.04)
    chosen, rejected = torch.randn(B, requires_grad=True), torch.randn(B, requires_grad=True)
    with pytest.raises(ValueError, match=r"ref_chosen_logps 带着梯度.*恒为 0"):
        dpo_loss(chosen, rejected, chosen, rejected, beta=0.1)  # the policy's own tensors as the reference


def test_grpo_loss_treats_advantages_as_constants_like_ppo_and_reinforce():
    logps = _policy_logps()
    advantages = torch.randn(B, requires_grad=True)
    loss, _ = grpo_loss(logps, None, None, advantages, ones(B, T), beta=0.0)
    loss.backward()
    assert advantages.grad is None and logps.grad is not None


@pytest.mark.parametrize(
    "call",
    [
        lambda x: kl_estimate(x, torch.zeros(B, T)),
        lambda x: kl_estimate(torch.zeros(B, T), x),
        lambda x: importance_corrected_k3(x, torch.zeros(B, T)),
    ],
)
def test_nan_is_refused_by_functions_without_a_mask(call):
    x = torch.zeros(B, T)
    x[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"含 1 个非有限值"):
        call(x)


def _nan_at(mask_value: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(B, T)
    mask = ones(B, T)
    mask[1, 2] = mask_value
    x[1, 2] = float("nan")
    return x, mask


@pytest.mark.parametrize(
    "call",
    [
        lambda x, m: masked_mean(x, m),
        lambda x, m: masked_mean(x, m, dim=-1),
        lambda x, m: sequence_log_ratio(x, torch.zeros(B, T), m),
        *[lambda x, m, lt=lt: aggregate_loss(x, m, lt) for lt in LOSS_TYPES],
    ],
)
def test_nan_at_a_real_position_is_refused(call):
    x, mask = _nan_at(1.0)
    with pytest.raises(ValueError, match=r"在掩码为 1 的位置含 1 个非有限值"):
        call(x, mask)


@pytest.mark.parametrize(
    "call",
    [
        lambda x, m: masked_mean(x, m),
        lambda x, m: masked_mean(x, m, dim=-1),
        lambda x, m: sequence_log_ratio(x, torch.zeros(B, T), m),
        *[lambda x, m, lt=lt: aggregate_loss(x, m, lt) for lt in LOSS_TYPES],
    ],
)
def test_nan_at_a_padding_position_changes_neither_value_nor_gradient(call):
    x, mask = _nan_at(0.0)
    clean = torch.where(mask.bool(), x, 0.0)
    x.requires_grad_(True)
    clean.requires_grad_(True)
    got, want = call(x, mask), call(clean, mask)
    assert torch.equal(got, want)
    got.sum().backward()
    want.sum().backward()
    assert torch.equal(x.grad, clean.grad) and x.grad[1, 2] == 0


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_an_empty_batch_is_refused_for_every_loss_type(loss_type):
    # before: NaN for grpo / dr_grpo (mean over no rows), 0 for bnpo / dapo
    with pytest.raises(ValueError, match=r"per_token_loss 的形状是 \(0, 3\)：空批次（B = 0）"):
        aggregate_loss(torch.zeros(0, T), torch.zeros(0, T), loss_type)
    with pytest.raises(ValueError, match=r"空批次"):
        grpo_loss(
            torch.zeros(0, T, requires_grad=True),
            None,
            None,
            torch.zeros(0),
            torch.zeros(0, T),
            beta=0.0,
            loss_type=loss_type,
        )


def test_infinite_beta_is_refused_instead_of_giving_nan():
    logps = _policy_logps()
    with pytest.raises(ValueError, match=r"beta 应是有限数，实际是 inf"):
        grpo_loss(logps, None, torch.zeros(B, T), torch.randn(B), ones(B, T), beta=float("inf"))
    with pytest.raises(ValueError, match=r"beta 应是有限数，实际是 inf"):
        dpo_loss(torch.zeros(B), torch.zeros(B), torch.zeros(B), torch.zeros(B), beta=float("inf"))


def test_dr_grpo_refuses_a_max_completion_length_below_a_real_length():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate_loss(torch.ones(2, 3), mask, "dr_grpo", max_completion_length=3).item() == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match=r"max_completion_length=2 小于最长回答的真实长度 3"):
        aggregate_loss(torch.ones(2, 3), mask, "dr_grpo", max_completion_length=2)
