"""Tool-output tokens: rlhf_toy's `tool_loss_mask` + `grpo_loss` vs TRL 1.16 `GRPOTrainer._compute_loss` with a
`tool_mask` in its inputs (docs/offpolicy.md, the tools section: TRL multiplies `completion_mask * tool_mask`
before the loss and the logged `entropy` / `kl`).
"""

from __future__ import annotations

import pytest
import torch
from trl import GRPOTrainer

from rlhf_toy import grpo_loss
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.train.tool_grpo import tool_loss_mask

from .trl_private import grpo_inputs, grpo_trainer


def batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    B, T = 6, 9
    lengths = torch.tensor([9, 7, 4, 9, 1, 6])
    mask = (torch.arange(T) < lengths[:, None]).float()
    tool_mask = torch.ones(B, T)
    tool_mask[0, 3:6] = 0  # a tool result in the middle
    tool_mask[1, 2:4] = 0
    tool_mask[3, 5:9] = 0  # a tool result that ends the completion (truncated)
    logps = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    ref_logps = logps - 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    entropies = torch.rand(B, T, generator=g, dtype=torch.float64)
    advantages = torch.randn(B, generator=g, dtype=torch.float64)
    return logps, ref_logps, entropies, advantages, mask, tool_mask


@pytest.mark.parametrize("loss_type", ["dapo", "dr_grpo", "bnpo", "grpo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("seed", [0, 1])
def test_tool_mask_matches_trl(seed, beta, loss_type):
    logps, ref_logps, entropies, advantages, mask, tool_mask = batch(seed)
    loss_mask = tool_loss_mask(mask, tool_mask)
    ours_logps = logps.clone().requires_grad_()
    ours, metrics = grpo_loss(
        ours_logps, None, ref_logps if beta else None, advantages, loss_mask, beta=beta, loss_type=loss_type,
        max_completion_length=9,
    )  # fmt: skip
    ours.backward()
    their_logps = logps.clone().requires_grad_()
    trainer = grpo_trainer(their_logps, loss_type=loss_type, beta=beta, max_completion_length=9)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (their_logps, entropies, None)
    inputs = grpo_inputs(mask, advantages, ref_logps=ref_logps if beta else None)
    inputs["tool_mask"] = tool_mask
    inputs["num_items_in_batch"] = loss_mask.sum()  # TRL: gather(loss_mask.sum()) with loss_mask = mask * tool_mask
    theirs = GRPOTrainer._compute_loss(trainer, None, inputs)
    theirs.backward()
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_logps.grad, their_logps.grad)
    assert (their_logps.grad[tool_mask == 0] == 0).all()  # no gradient through a tool token
    assert logged["entropy"] == pytest.approx(masked_mean(entropies, loss_mask).item())
    if beta:
        assert logged["kl"] == pytest.approx(metrics["kl"])
