"""KL estimators k1, k2, k3 with verl's clamps: rlhf_toy `kl_estimate` vs verl `kl_penalty`, value and gradient."""

from __future__ import annotations

import pytest
import torch
import verl.trainer.ppo.core_algos as core_algos

from rlhf_toy import kl_estimate

from .same_inputs import DTYPES, SEEDS, assert_same, token_batch

# verl's names for our estimators; k1 and k2 are never clamped in verl, k3 ("low_var_kl") always is
VERL_NAMES = {"k1": ["kl", "k1"], "k2": ["mse", "k2"], "k3": ["low_var_kl", "k3"]}
VERL_CLAMPS = {"k1": {}, "k2": {}, "k3": {"log_ratio_clamp": 20, "value_clamp": 10}}


def with_extremes(seed, dtype):
    """Log-ratios d = ref − logp of ±25 and ±12 (the log-ratio clamp at 20 and the value clamp at 10 both bite)."""
    batch = token_batch(seed, dtype)
    ref_logps = batch.ref_logps.clone()
    logps = batch.logps.detach()
    for row, d in ((4, 25.0), (5, -25.0), (6, 12.0), (7, -12.0), (8, 2.7)):
        ref_logps[row, 0] = logps[row, 0] + d
    return batch, ref_logps


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_match_verl_value_and_gradient(seed, dtype, estimator):
    batch, ref_logps = with_extremes(seed, dtype)
    for verl_name in VERL_NAMES[estimator]:
        ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
        ours = kl_estimate(ours_logps, ref_logps, estimator, **VERL_CLAMPS[estimator])
        theirs = core_algos.kl_penalty(their_logps, ref_logps, verl_name)
        assert_same(ours, theirs, f"{estimator} vs verl {verl_name!r}")
        (ours * batch.mask).sum().backward()
        (theirs * batch.mask).sum().backward()
        assert_same(ours_logps.grad, their_logps.grad, f"gradient of {estimator} vs verl {verl_name!r}")


def test_unclamped_k3_differs_from_verl_low_var_kl_at_extremes():
    """By design (docs/kl.md, eq. kl-clamp): our k3 is unclamped by default; verl clamps d to ±20 and k3 to ±10."""
    batch, ref_logps = with_extremes(0, torch.float64)
    logps = batch.logps.detach()
    ours = kl_estimate(logps, ref_logps, "k3")
    theirs = core_algos.kl_penalty(logps, ref_logps, "low_var_kl")
    assert theirs[4, 0] == 10 and ours[4, 0] > 1e10
    assert theirs[6, 0] == 10 and ours[6, 0] > 1e5
    far = ours > 10  # k3 ≥ 0, so only the upper value clamp can bite; |d| > 20 implies k3 > 10
    assert torch.equal(theirs[far], torch.full_like(theirs[far], 10.0))
    assert_same(ours[~far], theirs[~far], "k3 where no clamp bites")
