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
    kl_estimate,
    masked_mean,
)

B, T = 4, 3


def ones(*shape):
    return torch.ones(*shape)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: grpo_loss(ones(B, T), ones(B, 2), ones(B, T), ones(B), ones(B, T)),
         r"old_logps 的形状是 \(4, 2\)，期望 \(4, 3\)（与 logps 相同）"),
        (lambda: grpo_loss(ones(B, T), ones(B, T), ones(B, T), ones(B), ones(B, 2)),
         r"mask 的形状是 \(4, 2\)，期望 \(4, 3\)"),
        (lambda: grpo_loss(ones(B, T), ones(B, T), ones(B, T), ones(B + 1), ones(B, T)),
         r"advantages 的形状是 \(5,\)，期望 \(4,\)"),
        (lambda: grpo_loss(ones(B), ones(B), ones(B), ones(B), ones(B)), r"logps 的形状是 \(4,\)，期望 2 维 \(B, T\)"),
        (lambda: grpo_loss(ones(B, T), ones(B, T), ones(B, T), ones(B), ones(B, T), beta=-0.1), r"beta 应 ≥ 0"),
        (lambda: grpo_loss(ones(B, T), None, None, ones(B), ones(B, T), beta=0.1), r"beta > 0 时需要 ref_logps"),
        (lambda: grpo_loss(torch.full((B, T), float("nan")), None, None, ones(B), ones(B, T), beta=0.0),
         r"logps 含 12 个非有限值"),
        (lambda: grpo_loss(ones(B, T), None, None, ones(B), 2 * ones(B, T), beta=0.0), r"mask 只能含 0 和 1"),
        (lambda: grpo_loss(ones(B, T), None, None, ones(B), ones(B, T), beta=0.0, loss_type="mean"),
         r"未知的 loss_type='mean'；可选：'grpo', 'bnpo', 'dr_grpo', 'dapo'"),
        (lambda: group_advantages(ones(6), num_generations=4), r"rewards 的形状是 \(6,\).*不能被 num_generations=4 整除"),
        (lambda: group_advantages(ones(2, 4), num_generations=4), r"rewards 的形状是 \(2, 4\)，期望 1 维 \(B,\)"),
        (lambda: group_advantages(ones(4), num_generations=0), r"num_generations 应是正整数"),
        (lambda: group_advantages(torch.tensor([1.0, float("inf")]), num_generations=2), r"rewards 含 1 个非有限值"),
        (lambda: group_advantages(ones(4), num_generations=2, scale_rewards="std"), r"未知的 scale_rewards='std'"),
        (lambda: dpo_loss(ones(B), ones(B + 1), ones(B), ones(B)), r"rejected_logps 的形状是 \(5,\)，期望 \(4,\)"),
        (lambda: dpo_loss(ones(B), ones(B), ones(B), ones(B), beta=-1.0), r"beta 应 ≥ 0"),
        (lambda: kl_estimate(ones(B, T), ones(B, 1)), r"ref_logps 的形状是 \(4, 1\)，期望 \(4, 3\)"),
        (lambda: kl_estimate(ones(B, T), ones(B, T), estimator="k4"), r"可选：'k1', 'k2', 'k3'"),
        (lambda: aggregate_loss(ones(B, T), ones(B, T), "dr_grpo", max_completion_length=0),
         r"max_completion_length 应 ≥ 1"),
        (lambda: masked_mean(ones(B, T), ones(T, B)), r"mask 的形状是 \(3, 4\)，期望 \(4, 3\)（与 x 相同）"),
        (lambda: TablePolicy(ones(3)), r"logits 的形状是 \(3,\)，期望 2 维"),
        (lambda: TablePolicy(ones(3, 4)).logps(torch.arange(3), torch.zeros(3, 2, dtype=torch.long)),
         r"completions 的形状是 \(3, 2\)，期望 \(3, 1\)"),
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
        loss, metrics = grpo_loss(logps, None, logps.detach() - 0.1, torch.tensor([1.0, -1.0]), mask,
                                  loss_type=loss_type)
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
    ref = TablePolicy(torch.zeros(2, 3)).logps(prompts, completions)
    loss, m = grpo_loss(logps, logps.detach(), ref, torch.tensor([1.0, -1.0]), torch.ones(2, 1), beta=0.0)
    assert torch.isfinite(loss)
    d_loss, _ = dpo_loss(logps[:, 0], ref[:, 0], ref[:, 0], ref[:, 0], beta=0.1)
    assert torch.isfinite(d_loss)
