"""SAPO: rlhf_toy `soft_gate_loss` vs TRL 1.16 `GRPOTrainer._compute_loss(loss_type="sapo")`.

beta ∈ {0, 0.04} × importance_sampling_level ∈ {token, sequence} × temperatures ∈ {TRL's defaults (1.0, 1.05),
(0.5, 2.0)}: loss, gradient and `kl`. The gate acts everywhere; the inputs' ratios reach e^{±3}.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from rlhf_toy.losses.soft_gate import soft_gate_loss

from .new_loss_types import BETAS, both, compare
from .same_inputs import DTYPES, SEEDS, token_batch

SETTINGS = list(itertools.product(BETAS, ["token", "sequence"], [(1.0, 1.05), (0.5, 2.0)]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_sapo_matches_trl(seed, dtype):
    batch = token_batch(seed, dtype)
    for beta, level, (pos, neg) in SETTINGS:
        temperatures = dict(sapo_temperature_pos=pos, sapo_temperature_neg=neg)
        compare(
            batch,
            soft_gate_loss,
            dict(importance_sampling_level=level, **temperatures),
            dict(loss_type="sapo", importance_sampling_level=level, **temperatures),
            beta=beta,
            what=f"sapo, beta={beta}, {level}, temperatures=({pos}, {neg})",
        )


def test_trl_uses_float32_temperatures_even_for_float64_inputs():
    """soft_gate_loss's docstring: TRL builds τ with `torch.where(cond, float, float)`, i.e. in the default dtype.

    In float64, rlhf_toy with τ_neg = float32(1.05) reproduces TRL to the last bit; with the exact 1.05 it does not, but
    stays within the float64 tolerance that test_sapo_matches_trl uses.
    """
    batch = token_batch(0, torch.float64)
    trl = dict(loss_type="sapo", sapo_temperature_neg=1.05)
    rounded = torch.tensor(1.05, dtype=torch.float32).item()
    (ours, grad, _), (theirs, their_grad, _) = both(
        batch, soft_gate_loss, dict(sapo_temperature_neg=rounded), trl, beta=0.0
    )
    assert torch.equal(ours, theirs) and torch.equal(grad, their_grad)
    (exact, exact_grad, _), _ = both(batch, soft_gate_loss, dict(sapo_temperature_neg=1.05), trl, beta=0.0)
    assert not torch.equal(exact_grad, their_grad)
    torch.testing.assert_close(exact_grad, their_grad)
