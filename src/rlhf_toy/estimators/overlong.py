r"""软超长惩罚（soft overlong punishment）：回答接近长度上限时，在任务奖励上线性扣分，超过上限扣 1。

出自 DAPO（Yu et al., 2025, arXiv 2503.14476）在数据一侧的两个技巧之一；另一个是动态采样（`rlhf_toy.estimators.dynamic_sampling`）。
这里是纯函数，只看长度，不碰策略。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_finite, check_ndim

# --8<-- [end:imports]


# --8<-- [start:soft_overlong_punishment]
def soft_overlong_punishment(lengths: Tensor, max_completion_len: int, soft_punish_cache: int) -> Tensor:
    r"""DAPO 的软超长惩罚（soft overlong punishment），式 (13)，加在任务奖励上。

    记 $L_{\max}$ = `max_completion_len`，$L_{\text{cache}}$ = `soft_punish_cache`：

    $$R_{\text{length}}(y) = \begin{cases}
    0, & \lvert y\rvert \le L_{\max} - L_{\text{cache}},\\
    \dfrac{(L_{\max} - L_{\text{cache}}) - \lvert y\rvert}{L_{\text{cache}}}, & L_{\max} - L_{\text{cache}} < \lvert y\rvert \le L_{\max},\\
    -1, & L_{\max} < \lvert y\rvert.
    \end{cases}$$

    与 TRL `trl.rewards.get_soft_overlong_punishment(max_completion_len, soft_punish_cache)` 逐式相同；
    verl 0.9.1 的 `reward.reward_kwargs.overlong_buffer_cfg`（`len` = $L_{\text{cache}}$，`penalty_factor` = 1，
    另设 `reward.reward_kwargs.max_resp_len` = $L_{\max}$；旧配方写作 `reward_model.overlong_buffer`）在
    $\lvert y\rvert \le L_{\max}$ 时给出同样的值。论文取 $L_{\max} = 20480$、$L_{\text{cache}} = 4096$。

    Args:
        lengths: 每个回答的 token 数 $\lvert y\rvert$（例如 `mask.sum(-1)`），形状 `(B,)`，整数或浮点，$\ge 0$。
        max_completion_len: $L_{\max}$，正整数。
        soft_punish_cache: $L_{\text{cache}}$，$0 \le L_{\text{cache}} \le L_{\max}$；为 0 时没有线性段，
            超过 $L_{\max}$ 直接得 $-1$。

    Returns:
        形状 `(B,)` 的惩罚，取值在 $[-1, 0]$；dtype 为 `lengths` 的浮点 dtype，整数输入时为
        `torch.get_default_dtype()`。在 $\lvert y\rvert = L_{\max} - L_{\text{cache}}$ 与 $L_{\max}$ 处连续
        （分别为 0 与 $-1$）。

    Raises:
        ValueError: `lengths` 不是一维、含负数或非有限值，`max_completion_len` 不是正整数，
            或 `soft_punish_cache` 不在 $[0, L_{\max}]$ 内。

    Examples:
        >>> soft_overlong_punishment(torch.tensor([10, 16, 20, 21]), max_completion_len=20, soft_punish_cache=5)
        tensor([ 0.0000, -0.2000, -1.0000, -1.0000])
    """
    check_ndim("lengths", lengths, 1, "(B,)")
    if not isinstance(max_completion_len, int) or max_completion_len < 1:
        raise ValueError(f"max_completion_len 应是正整数，实际是 {max_completion_len!r}")
    if not isinstance(soft_punish_cache, int) or not 0 <= soft_punish_cache <= max_completion_len:
        raise ValueError(
            f"soft_punish_cache 应是 [0, max_completion_len={max_completion_len}] 内的整数，实际是 {soft_punish_cache!r}"
        )
    dtype = lengths.dtype if lengths.is_floating_point() else torch.get_default_dtype()
    lengths = lengths.to(dtype)
    check_finite("lengths", lengths)
    if (lengths < 0).any():
        raise ValueError(f"lengths 应 ≥ 0，实际含 {int((lengths < 0).sum())} 个负数")
    start = max_completion_len - soft_punish_cache  # 从这里开始扣分
    linear = (start - lengths) / max(soft_punish_cache, 1)  # L_cache = 0 时这一段为空，分母取 1 只为避免 0/0
    penalty = torch.where(lengths <= start, torch.zeros_like(lengths), linear)
    return torch.where(lengths > max_completion_len, torch.full_like(lengths, -1.0), penalty)


# --8<-- [end:soft_overlong_punishment]
