"""DAPO's soft overlong punishment: rlhf_toy `soft_overlong_punishment` vs TRL `get_soft_overlong_punishment`."""

from __future__ import annotations

import pytest
import torch
from trl.rewards import get_soft_overlong_punishment

from rlhf_toy import soft_overlong_punishment

from .same_inputs import assert_same


@pytest.mark.parametrize(("max_completion_len", "soft_punish_cache"), [(20, 5), (20, 0), (20, 20), (20480, 4096)])
def test_soft_overlong_punishment_matches_trl(max_completion_len, soft_punish_cache):
    lengths = sorted(
        {
            0,
            1,
            max_completion_len - soft_punish_cache,
            max_completion_len - soft_punish_cache + 1,
            max_completion_len - 1,
            max_completion_len,
            max_completion_len + 1,
            3 * max_completion_len,
        }
    )
    reward_function = get_soft_overlong_punishment(max_completion_len, soft_punish_cache)
    theirs = reward_function(completion_ids=[[7] * n for n in lengths])
    ours = soft_overlong_punishment(torch.tensor(lengths), max_completion_len, soft_punish_cache)
    assert_same(ours, torch.tensor(theirs, dtype=ours.dtype), f"penalty at lengths {lengths}")
