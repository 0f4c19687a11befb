"""DPO loss types: rlhf_toy `dpo_loss` vs TRL `DPOTrainer._compute_loss` (loss, gradient and the four rewards/*
metrics), for every loss_type both implement: sigmoid, hinge, ipo, robust, sigmoid_norm."""

from __future__ import annotations

import pytest
import torch

from rlhf_toy import dpo_loss

from .same_inputs import DTYPES, SEEDS, assert_same
from .trl_private import trl_dpo_loss

PROMPT, SEQUENCE = 3, 9  # tokens in the prompt and in prompt + completion
LENGTH_NORMALIZED = ("ipo", "sigmoid_norm")  # TRL divides each log-ratio by the completion length
CASES = [
    ("sigmoid", 0.0),
    ("hinge", 0.0),
    ("ipo", 0.0),
    ("robust", 0.0),
    ("robust", 0.1),
    ("robust", 0.3),
    ("sigmoid_norm", 0.0),
]
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")


def preference_batch(seed, dtype, pairs=8):
    """Chosen rows 0..B-1, rejected rows B..2B-1; completions of 1..6 tokens, right-padded; chosen 0 is empty."""
    g = torch.Generator().manual_seed(seed)
    completion_mask = torch.zeros(2 * pairs, SEQUENCE)
    for row in range(2 * pairs):
        n = int(torch.randint(1, SEQUENCE - PROMPT + 1, (1,), generator=g))
        completion_mask[row, PROMPT : PROMPT + n] = 1
    completion_mask[0] = 0
    shifted = completion_mask[:, 1:]  # TRL scores next-token labels: position t predicts token t + 1
    per_token_logps = (-2 * torch.rand(2 * pairs, SEQUENCE - 1, generator=g, dtype=torch.float64)) * shifted
    ref_logps = per_token_logps.sum(1) + 0.5 * torch.randn(2 * pairs, generator=g, dtype=torch.float64)
    ref_logps[1] = per_token_logps[1].sum() + 40  # an extreme log-ratio of −40
    return per_token_logps.to(dtype), completion_mask, ref_logps.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "label_smoothing"), CASES)
@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_loss_matches_trl(seed, dtype, loss_type, label_smoothing, beta):
    per_token_logps, completion_mask, ref_logps = preference_batch(seed, dtype)
    pairs = len(ref_logps) // 2
    ours_per_token = per_token_logps.clone().requires_grad_(True)
    their_per_token = per_token_logps.clone().requires_grad_(True)
    logps, lengths = ours_per_token.sum(1), completion_mask.sum(1)
    kwargs = {}
    if loss_type in LENGTH_NORMALIZED:
        kwargs = {"chosen_lengths": lengths[:pairs], "rejected_lengths": lengths[pairs:]}
    ours, metrics = dpo_loss(
        logps[:pairs],
        logps[pairs:],
        ref_logps[:pairs],
        ref_logps[pairs:],
        beta,
        loss_type=loss_type,
        label_smoothing=label_smoothing,
        **kwargs,
    )
    theirs, their_metrics = trl_dpo_loss(
        their_per_token,
        completion_mask,
        ref_logps[:pairs],
        ref_logps[pairs:],
        loss_type=loss_type,
        beta=beta,
        label_smoothing=label_smoothing,
    )
    assert_same(ours, theirs, f"{loss_type} loss")
    ours.backward()
    theirs.backward()
    assert_same(ours_per_token.grad, their_per_token.grad, f"{loss_type} gradient")
    for key in METRICS:
        assert_same(metrics[key], their_metrics[key], f"{loss_type} {key}")


def test_trl_sigmoid_ignores_label_smoothing():
    """By design (docs/dpo-variants.md, cDPO): our sigmoid with label_smoothing ε > 0 is cDPO, as TRL ≤ 0.28 and
    OpenRLHF; TRL 1.16's sigmoid ignores label_smoothing and gives plain DPO."""
    per_token_logps, completion_mask, ref_logps = preference_batch(0, torch.float64)
    pairs = len(ref_logps) // 2
    logps = per_token_logps.sum(1)
    args = (logps[:pairs], logps[pairs:], ref_logps[:pairs], ref_logps[pairs:], 0.1)
    theirs, _ = trl_dpo_loss(
        per_token_logps,
        completion_mask,
        ref_logps[:pairs],
        ref_logps[pairs:],
        loss_type="sigmoid",
        beta=0.1,
        label_smoothing=0.2,
    )
    plain_dpo, _ = dpo_loss(*args, loss_type="sigmoid")
    cdpo, _ = dpo_loss(*args, loss_type="sigmoid", label_smoothing=0.2)
    assert_same(plain_dpo, theirs, "TRL sigmoid with label_smoothing=0.2 vs our plain DPO")
    assert (cdpo - theirs).abs() > 1e-3
