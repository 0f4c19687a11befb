"""Sampler distributions: rlhf_toy `top_k_logps` / `top_p_logps` vs transformers' `TopKLogitsWarper` /
`TopPLogitsWarper` (temperature first, as `TemperatureLogitsWarper` in the default processor order)."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from rlhf_toy.rollout.samplers import top_k_logps, top_p_logps

from .same_inputs import SEEDS


def reference(logits, warpers):
    scores = logits.clone()
    for w in warpers:
        scores = w(None, scores)
    return torch.log_softmax(scores, dim=-1)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_top_k_matches_transformers(seed, top_k):
    logits = 2 * torch.randn(6, 10, generator=torch.Generator().manual_seed(seed))
    theirs = reference(logits, [TemperatureLogitsWarper(0.7), TopKLogitsWarper(top_k)])
    torch.testing.assert_close(top_k_logps(logits, top_k, 0.7), theirs)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("top_p", [0.3, 0.9, 1.0])
def test_top_p_matches_transformers(seed, top_p):
    logits = 2 * torch.randn(6, 10, generator=torch.Generator().manual_seed(seed))
    theirs = reference(logits, [TemperatureLogitsWarper(0.7), TopPLogitsWarper(top_p)])
    torch.testing.assert_close(top_p_logps(logits, top_p, 0.7), theirs)
