"""Random inputs shared by the conformance tests, and the comparison they all use.

Batches are `num_prompts × num_generations` completions of at most `T` tokens, right-padded; every batch has
empty rows (mask all zero) and full rows. Log-probabilities are detached where the library expects samples
(`old_logps`, `ref_logps`); `logps` is the leaf whose gradient is compared.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

DTYPES = [torch.float64, torch.float32]
SEEDS = [0, 1, 2]


def assert_same(ours: Tensor | float, theirs: Tensor | float, what: str) -> None:
    """Equal to float rounding: the dtype's default tolerance of `torch.testing.assert_close`."""
    ours, theirs = torch.as_tensor(ours), torch.as_tensor(theirs)
    torch.testing.assert_close(ours, theirs.to(ours.dtype), msg=lambda m: f"{what}: rlhf_toy vs library\n{m}")


def right_padded_mask(batch: int, length: int, g: torch.Generator, dtype: torch.dtype) -> Tensor:
    """Lengths drawn from 0..T; row 0 is empty and row 1 full, whatever the draw."""
    lengths = torch.randint(0, length + 1, (batch,), generator=g)
    lengths[0], lengths[1] = 0, length
    return (torch.arange(length)[None, :] < lengths[:, None]).to(dtype)


def holes_mask(batch: int, length: int, g: torch.Generator, dtype: torch.dtype) -> Tensor:
    """Zeros in the middle of a completion (e.g. tool output or a second prompt in a multi-turn rollout)."""
    mask = (torch.rand(batch, length, generator=g) > 0.3).to(dtype)
    mask[:, 0] = 1
    return mask


@dataclass
class TokenBatch:
    logps: Tensor  # (B, T), leaf: the gradient is compared
    old_logps: Tensor  # (B, T), detached
    ref_logps: Tensor  # (B, T), detached
    advantages: Tensor  # (B,)
    mask: Tensor  # (B, T)

    def fresh_logps(self) -> Tensor:
        """A new leaf with the same values, so each library gets its own gradient."""
        return self.logps.detach().clone().requires_grad_(True)


def token_batch(seed: int, dtype: torch.dtype, batch: int = 16, length: int = 7, spread: float = 0.4) -> TokenBatch:
    """Log-probs around old_logps; a few positions far off (ratio e^{±3}) so both clip sides bite."""
    g = torch.Generator().manual_seed(seed)
    old_logps = -3 * torch.rand(batch, length, generator=g, dtype=torch.float64)
    logps = old_logps + spread * torch.randn(batch, length, generator=g, dtype=torch.float64)
    logps[2, :3] = old_logps[2, :3] + 3.0
    logps[3, :3] = old_logps[3, :3] - 3.0
    ref_logps = old_logps + 0.5 * torch.randn(batch, length, generator=g, dtype=torch.float64)
    advantages = torch.randn(batch, generator=g, dtype=torch.float64)
    advantages[2], advantages[3] = 1.5, -1.5
    return TokenBatch(
        logps=logps.to(dtype).requires_grad_(True),
        old_logps=old_logps.to(dtype),
        ref_logps=ref_logps.to(dtype),
        advantages=advantages.to(dtype),
        mask=right_padded_mask(batch, length, g, dtype),
    )


def group_rewards(seed: int, dtype: torch.dtype, num_prompts: int = 6, num_generations: int = 8) -> Tensor:
    """Rewards for `num_prompts` groups: one constant group, one 0/1 group, one with a 1e4 outlier, the rest normal."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(num_prompts, num_generations, generator=g, dtype=torch.float64)
    rewards[0] = 1.0
    rewards[1] = (torch.rand(num_generations, generator=g) > 0.5).to(torch.float64)
    rewards[2, 0] = 1e4
    return rewards.view(-1).to(dtype)
