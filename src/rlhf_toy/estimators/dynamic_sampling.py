r"""动态采样（dynamic sampling）：丢掉组内奖励全相同的组——这样的组优势全为零，只占批次、不给梯度。

出自 DAPO（Yu et al., 2025, arXiv 2503.14476）在数据一侧的两个技巧之一；另一个是软超长惩罚（`rlhf_toy.estimators.overlong`）。
DAPO 在损失一侧的两个技巧：clip-higher 是 [`grpo_loss`][rlhf_toy.losses.grpo.grpo_loss] 的 `epsilon_high`；
按 token 平均是 `loss_type="dapo"`（同 TRL，按整批的 token 数平均；DAPO 论文则按每组回答的 token 数平均）。
这里是纯函数，只看奖励，不碰策略。
"""

# --8<-- [start:imports]
from __future__ import annotations

from torch import Tensor

from rlhf_toy._checks import check_groups

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
        >>> import torch
        >>> dynamic_sampling_mask(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), num_generations=2)
        tensor([False,  True, False])
    """
    check_groups(rewards, num_generations)
    grouped = rewards.view(-1, num_generations)  # (n_prompts, G)
    return grouped.amax(dim=1) != grouped.amin(dim=1)


# --8<-- [end:dynamic_sampling_mask]
