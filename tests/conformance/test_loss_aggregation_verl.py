"""Every `loss_type` aggregation: rlhf_toy `aggregate_loss` vs verl `agg_loss` (value and gradient).

verl's names: token-mean = bnpo = dapo (one process, whole batch); seq-mean-token-mean = grpo;
seq-mean-token-sum-norm with `loss_scale_factor=L` = dr_grpo with `max_completion_length=L`.
"""

from __future__ import annotations

import pytest
import torch
import verl.trainer.ppo.core_algos as core_algos

from rlhf_toy import aggregate_loss

from .same_inputs import DTYPES, SEEDS, assert_same, holes_mask, right_padded_mask

PAIRS = [  # (loss_type, verl loss_agg_mode, max_completion_length / loss_scale_factor)
    ("bnpo", "token-mean", None),
    ("dapo", "token-mean", None),
    ("grpo", "seq-mean-token-mean", None),
    ("dr_grpo", "seq-mean-token-sum-norm", None),
    ("dr_grpo", "seq-mean-token-sum-norm", 12),
]


def per_token_loss_and_mask(seed, dtype, empty_rows):
    g = torch.Generator().manual_seed(seed)
    per_token_loss = (3 * torch.randn(16, 7, generator=g, dtype=torch.float64)).to(dtype).requires_grad_(True)
    mask = right_padded_mask(16, 7, g, dtype) if seed % 2 == 0 else holes_mask(16, 7, g, dtype)
    mask[mask.sum(-1) == 0, 0] = 1  # no empty row: where verl and rlhf_toy agree
    if empty_rows:
        mask[:3] = 0
    return per_token_loss, mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("loss_type", "mode", "length"), PAIRS)
def test_aggregation_matches_verl_agg_loss(seed, dtype, loss_type, mode, length):
    per_token_loss, mask = per_token_loss_and_mask(seed, dtype, empty_rows=False)
    ours = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length=length)
    theirs = core_algos.agg_loss(per_token_loss, mask, mode, loss_scale_factor=length)
    assert_same(ours, theirs, f"{loss_type} vs {mode}")
    (ours_grad,) = torch.autograd.grad(ours, per_token_loss)
    (their_grad,) = torch.autograd.grad(theirs, per_token_loss)
    assert_same(ours_grad, their_grad, f"gradient of {loss_type} vs {mode}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_verl_seq_mean_token_sum_is_T_times_dr_grpo(dtype):
    """No rlhf_toy mode for verl's seq-mean-token-sum: it is dr_grpo times T (without empty rows)."""
    per_token_loss, mask = per_token_loss_and_mask(0, dtype, empty_rows=False)
    theirs = core_algos.agg_loss(per_token_loss, mask, "seq-mean-token-sum")
    assert_same(7 * aggregate_loss(per_token_loss, mask, "dr_grpo"), theirs, "T·dr_grpo vs seq-mean-token-sum")


@pytest.mark.parametrize(
    ("loss_type", "mode"), [("grpo", "seq-mean-token-mean"), ("dr_grpo", "seq-mean-token-sum-norm")]
)
def test_empty_rows_counted_by_us_dropped_by_verl(loss_type, mode):
    """By design (docs/grpo-variants.md, “与 TRL / verl 对照”; docs/ratio-shaping.md, SAPO): rlhf_toy and TRL divide
    by B, counting completions whose mask is all zero. verl's agg_loss called bare (no `global_batch_size`) divides by
    the number of non-empty completions (verl/trainer/ppo/core_algos.py:1198-1202); in verl's trainer
    `global_batch_size` is `ppo_mini_batch_size * rollout.n` (verl/trainer/ppo/ray_trainer.py:1352-1362, passed on by
    verl/workers/utils/losses.py:67), all completions of the mini-batch, so there it counts them as we do."""
    per_token_loss, mask = per_token_loss_and_mask(0, torch.float64, empty_rows=True)
    batch, non_empty = mask.shape[0], int((mask.sum(-1) > 0).sum())
    ours = aggregate_loss(per_token_loss, mask, loss_type)
    theirs = core_algos.agg_loss(per_token_loss, mask, mode)
    assert_same(ours * batch / non_empty, theirs, f"{loss_type} rescaled to verl's count")
    assert (ours - theirs).abs() > 1e-3
    in_trainer = core_algos.agg_loss(per_token_loss, mask, mode, global_batch_size=batch)
    assert_same(ours, in_trainer, f"{loss_type} vs verl {mode} with the trainer's global_batch_size")
