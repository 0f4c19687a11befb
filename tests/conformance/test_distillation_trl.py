"""Full-vocabulary distillation divergence: rlhf_toy `divergence_loss` vs TRL 1.16 `_chunked_divergence_loss`.

TRL's `beta`: 0 = forward KL(teacher || student), 1 = reverse KL(student || teacher), else the generalized JSD with
mixture (1 - beta) p_student + beta p_teacher (trl/kernels/chunked_divergence.py). Page: .ch12/distillation/page.md.
"""

from __future__ import annotations

import pytest
import torch
from trl.trainer.distillation_trainer import _chunked_divergence_loss

from rlhf_toy.losses.distillation import divergence_loss

from .same_inputs import assert_same


def inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    B, T, H, V = 3, 5, 8, 11
    h_s = torch.randn(B, T, H, generator=g)
    h_t = torch.randn(B, T, 6, generator=g)  # the teacher may be wider or narrower; only V must match
    w_s, b_s = torch.randn(V, H, generator=g), torch.randn(V, generator=g)
    w_t, b_t = 2 * torch.randn(V, 6, generator=g), torch.randn(V, generator=g)
    mask = torch.ones(B, T)
    mask[0] = 0  # an empty row
    mask[1, 3:] = 0
    return h_s, h_t, w_s, b_s, w_t, b_t, mask


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 1.0])
def test_divergence_loss_matches_trl_value_and_gradient(seed, beta):
    h_s, h_t, w_s, b_s, w_t, b_t, mask = inputs(seed)
    ours_h, their_h = h_s.clone().requires_grad_(True), h_s.clone().requires_grad_(True)
    ours = divergence_loss(ours_h @ w_s.T + b_s, h_t @ w_t.T + b_t, mask, beta)
    theirs, _, n_valid = _chunked_divergence_loss(
        their_h, h_t, w_s, w_t, mask, beta, student_lm_head_bias=b_s, teacher_lm_head_bias=b_t
    )
    assert int(n_valid) == int(mask.sum())
    assert_same(ours, theirs, f"divergence beta={beta}")
    ours.backward()
    theirs.backward()
    assert_same(ours_h.grad, their_h.grad, f"gradient beta={beta}")


def test_trl_beta_zero_is_forward_and_one_is_reverse_kl():
    """The page's sentence: in TRL 1.16 beta=0 is forward KL, beta=1 reverse KL (the docstring says so; checked here)."""
    h_s, h_t, w_s, b_s, w_t, b_t, _ = inputs(2)
    mask = torch.ones(h_s.shape[:2])
    p = torch.log_softmax(h_s @ w_s.T + b_s, -1)
    q = torch.log_softmax(h_t @ w_t.T + b_t, -1)
    forward = (q.exp() * (q - p)).sum(-1).mean()
    reverse = (p.exp() * (p - q)).sum(-1).mean()
    at = {beta: _chunked_divergence_loss(h_s, h_t, w_s, w_t, mask, beta, None, b_s, b_t)[0] for beta in (0.0, 1.0)}
    assert_same(at[0.0], forward, "TRL beta=0")
    assert_same(at[1.0], reverse, "TRL beta=1")
