r"""DAPO 在数据一侧的两个技巧：动态采样（丢掉奖励全相同的组）与软超长惩罚。

DAPO（Yu et al., 2025, arXiv 2503.14476）另外两个技巧在损失一侧：clip-higher 是
[`grpo_loss`][rlhf_toy.losses.grpo.grpo_loss] 的 `epsilon_high`；按 token 平均是 `loss_type="dapo"`。
它同 TRL 的 `loss_type="dapo"`，按整批的 token 数平均；DAPO 论文则按每组回答的 token 数平均。
这里的两个函数都是纯函数，只看奖励或长度，不碰策略。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_finite, check_groups, check_ndim

# --8<-- [end:imports]


# --8<-- [start:dynamic_sampling_mask]
def dynamic_sampling_mask(rewards: Tensor, num_generations: int) -> Tensor:
    r"""动态采样（dynamic sampling）：标出奖励**不**全相同、因而优势不全为 0 的组。

    DAPO 式 (11) 的约束 $0 < \lvert\{o_i : o_i \text{ 正确}\}\rvert < G$ 在 0/1 奖励下就是“组内奖励不全相同”；
    对一般的奖励取同样的判据，与 verl `algorithm.filter_groups`（`metric` 的组内标准差 $> 0$）相同。
    组内奖励全相同时组内相对优势恰为 0，这一组对策略梯度毫无贡献，却仍占着损失的分母。

    Args:
        rewards: 每个回答的标量奖励，形状 `(B,)`，浮点；同一提示词的 `num_generations` 个回答相邻。
        num_generations: 每组回答数 $G$，须整除 `B`。

    Returns:
        形状 `(n_prompts,)` 的布尔张量，`True` 表示保留这一组。要得到逐回答的掩码用
        `.repeat_interleave(num_generations)`，要下标用 `.nonzero().squeeze(-1)`。
        判据是组内最大值等于最小值（精确比较，不受浮点求和误差影响）。`num_generations == 1` 时
        每组只有一个回答，按定义“全相同”，全部丢弃（与 `group_advantages` 此时给 0 一致；
        verl 保留大小为 1 的组，因为它此时取 $\hat A = r$）。

    Raises:
        ValueError: `rewards` 不是一维或含非有限值，`num_generations` 不是正整数或不整除 `B`。

    Examples:
        >>> dynamic_sampling_mask(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), num_generations=2)
        tensor([False,  True, False])
    """
    check_groups(rewards, num_generations)
    grouped = rewards.view(-1, num_generations)  # (n_prompts, G)
    return grouped.amax(dim=1) != grouped.amin(dim=1)


# --8<-- [end:dynamic_sampling_mask]


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
