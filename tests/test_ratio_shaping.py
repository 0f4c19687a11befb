"""docs/ratio-shaping.md: the gradient coefficient ψ(w) of every loss on the page, from autograd of the book's functions,
against each equation written out independently (eq. rs-cispo … rs-cov). ψ is defined as in the page:
∂L/∂log π_θ = −ψ(w)·A/n on a batch of n one-token completions with log π_old = 0."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf_toy.losses import (
    clipped_is_weight_loss,
    gamma_weight_loss,
    geometric_mean_ratio_loss,
    grpo_loss,
    length_weighted_sequence_loss,
    soft_gate_loss,
)
from rlhf_toy.losses.clipped_is_weight_verl import cispo_loss_verl
from rlhf_toy.losses.covariance_clip import clip_cov_loss, kl_cov_loss
from rlhf_toy.losses.divergence_mask import dppo_loss
from rlhf_toy.losses.geometric_mean import gmpo_loss_verl
from rlhf_toy.losses.group_pg import gpg_loss
from rlhf_toy.losses.log_ratio_penalty import dro_loss
from rlhf_toy.losses.soft_gate_verl import sapo_loss_verl

W = torch.tensor([0.1, 0.5, 0.79, 0.9, 1.0, 1.1, 1.25, 1.45, 2.0, 3.0, 6.0], dtype=torch.float64)


def psi(fn, advantage: float, w: torch.Tensor = W) -> torch.Tensor:
    logps = w.log().reshape(-1, 1).clone().requires_grad_(True)
    advantages = torch.full((len(w),), advantage, dtype=w.dtype)
    loss = fn(logps, torch.zeros_like(logps), advantages, torch.ones_like(logps))
    (grad,) = torch.autograd.grad(loss, logps)
    return -grad[:, 0] * len(w) / advantage


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def expected(name: str, w: float, a: float) -> float:
    """Each equation of the page, written out by hand for one token."""
    if name == "grpo":
        return 0.0 if (a > 0 and w > 1.2) or (a < 0 and w < 0.8) else w
    if name == "cispo_trl":  # eq. rs-cispo-weight, TRL: min(w, ε_max)
        return min(w, 5.0)
    if name == "cispo_verl":  # eq. rs-cispo-weight, verl: clip(w, 0.8, 1.2)
        return min(max(w, 0.8), 1.2)
    if name == "sapo":  # eq. rs-sapo-grad
        tau = 1.0 if a > 0 else 1.05
        s = sigmoid(tau * (w - 1))
        return 4 * s * (1 - s) * w
    if name == "luspo":  # eq. rs-luspo: GSPO's s_i = w for one token, clipped as GSPO
        return 0.0 if (a > 0 and w > 1.2) or (a < 0 and w < 0.8) else w
    if name == "vespo":  # eq. rs-vespo
        k, lam = (2.0, 3.0) if a >= 0 else (3.0, 2.0)
        return w**k * math.exp(-lam * (w - 1))
    if name == "gmpo_trl":  # eq. rs-gmpo, ε = 0.4 in log space
        return 0.0 if (a > 0 and math.log(w) > 0.4) or (a < 0 and math.log(w) < -0.4) else w
    if name == "gmpo_verl":  # verl geo_mean: ε = 0.2 in log space
        return 0.0 if (a > 0 and math.log(w) > 0.2) or (a < 0 and math.log(w) < -0.2) else w
    if name == "gpg":  # eq. rs-gpg
        return 1.0
    if name == "dro":  # eq. rs-dro, β = 0.5
        return 1 - 0.5 * math.log(w) / a
    if name == "dppo":  # eq. rs-dppo with p_old = 0.1, δ = 0.2, C = 3
        p, p_old = 0.1 * w, 0.1
        valid = (p - p_old <= 0.2) if a > 0 else (p - p_old >= -0.2)
        return min(w, 3.0) if valid else 0.0
    raise KeyError(name)


LOSSES = {
    "grpo": lambda lp, old, a, m: grpo_loss(lp, old, None, a, m, beta=0.0)[0],
    "cispo_trl": lambda lp, old, a, m: clipped_is_weight_loss(lp, old, None, a, m, epsilon_high=5.0)[0],
    "cispo_verl": lambda lp, old, a, m: cispo_loss_verl(lp, old, a, m)[0],
    "sapo": lambda lp, old, a, m: soft_gate_loss(lp, old, None, a, m)[0],
    "luspo": lambda lp, old, a, m: length_weighted_sequence_loss(lp, old, None, a, m)[0],
    "vespo": lambda lp, old, a, m: gamma_weight_loss(lp, old, None, a, m)[0],
    "gmpo_trl": lambda lp, old, a, m: geometric_mean_ratio_loss(lp, old, None, a, m)[0],
    "gmpo_verl": lambda lp, old, a, m: gmpo_loss_verl(lp, old, a, m)[0],
    "gpg": lambda lp, old, a, m: gpg_loss(lp, a, m)[0],
    "dro": lambda lp, old, a, m: dro_loss(lp, old, a, m, beta=0.5)[0],
    "dppo": lambda lp, old, a, m: dppo_loss(lp + math.log(0.1), old + math.log(0.1), a, m, clip_ratio_c=3.0)[0],
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_gradient_coefficients_match_the_formulas(name, advantage):
    got = psi(LOSSES[name], advantage)
    want = torch.tensor([expected(name, w, advantage) for w in W.tolist()], dtype=torch.float64)
    torch.testing.assert_close(got, want)


def test_sapo_verl_has_the_same_coefficient_as_trl():
    for a in (1.0, -1.0):
        verl = psi(lambda lp, old, adv, m: sapo_loss_verl(lp, old, adv, m)[0], a)
        trl = psi(LOSSES["sapo"], a)
        torch.testing.assert_close(verl, trl)


def test_covariance_losses_leave_unselected_tokens_as_grpo_and_act_on_selected_ones():
    """Eq. rs-cov: with nothing eligible Clip-Cov is the clipped surrogate; KL-Cov's selected tokens get ±β/Â more."""
    for a in (1.0, -1.0):
        # covariance is 0 everywhere (one advantage, so Â − Ā = 0): no token lies in (ω_low, ω_high) = (1, 5)
        clip_cov = psi(lambda lp, old, adv, m: clip_cov_loss(lp, old, adv, m)[0], a)
        torch.testing.assert_close(clip_cov, psi(LOSSES["grpo"], a))
    # KL-Cov with kl_cov_ratio = 1 selects every token: ψ = w − β·sign(log w)/Â
    w = torch.tensor([0.5, 2.0], dtype=torch.float64)
    for a in (1.0, -1.0):
        got = psi(lambda lp, old, adv, m: kl_cov_loss(lp, old, adv, m, kl_cov_ratio=1.0)[0], a, w)
        want = w - 0.1 * torch.sign(w.log()) / a
        torch.testing.assert_close(got, want)
