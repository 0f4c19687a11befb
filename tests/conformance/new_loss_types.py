"""Shared harness for TRL 1.16's newer GRPO loss types (cispo, sapo, luspo, vespo, and experimental GMPO).

Each test file calls `compare` with rlhf_toy's function and the TRL settings, on `token_batch` inputs whose ratios
reach e^{±3} (so caps, gates and clips act) and that contain an all-masked row. Value and gradient are compared
with the dtype's default tolerance, as in test_grpo_loss_trl.py.
"""

from __future__ import annotations

from .same_inputs import assert_same
from .trl_private import trl_gmpo_loss, trl_grpo_loss

BETAS = [0.0, 0.04]


def both(batch, ours_fn, ours_kwargs, trl_kwargs, *, beta, gmpo=False, mask=None):
    """(ours, our grad, our metrics), (theirs, their grad, their metrics) on the same off-policy batch."""
    mask = batch.mask if mask is None else mask
    ref_logps = batch.ref_logps if beta else None
    ours_logps, their_logps = batch.fresh_logps(), batch.fresh_logps()
    ours, metrics = ours_fn(ours_logps, batch.old_logps, ref_logps, batch.advantages, mask, beta=beta, **ours_kwargs)
    trl = trl_gmpo_loss if gmpo else trl_grpo_loss
    theirs, their_metrics = trl(
        their_logps, mask, batch.advantages, batch.old_logps, ref_logps, beta=beta, **trl_kwargs
    )
    ours.backward()
    theirs.backward()
    return (ours, ours_logps.grad, metrics), (theirs, their_logps.grad, their_metrics)


def compare(batch, ours_fn, ours_kwargs, trl_kwargs, *, beta, what, metric_names=(), gmpo=False):
    """Loss, gradient, the named metrics and `kl` (when beta > 0) agree; returns both sides for further checks."""
    (ours, grad, metrics), (theirs, their_grad, their_metrics) = both(
        batch, ours_fn, ours_kwargs, trl_kwargs, beta=beta, gmpo=gmpo
    )
    assert_same(ours, theirs, f"loss ({what})")
    assert_same(grad, their_grad, f"gradient ({what})")
    for name in metric_names:
        assert_same(metrics[name], their_metrics[name], f"{name} ({what})")
    if beta:
        assert_same(metrics["kl"], their_metrics["kl"], f"kl ({what})")
    return (ours, grad, metrics), (theirs, their_grad, their_metrics)
