r"""奖励模型的 Bradley–Terry 损失（Bradley & Terry, 1952；InstructGPT, arXiv 2203.02155, 式 (1)）。

与 TRL `RewardTrainer.compute_loss` 相同：可选的间隔（margin，Llama 2 的做法）与奖励居中项
（reward centring，Eisenstein et al., arXiv 2312.09244, 式 (2)；TRL `center_rewards_coefficient`）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf_toy._checks import check_finite, check_ndim, check_nonnegative, check_shape

# --8<-- [end:imports]


def _check_bt_inputs(chosen_rewards, rejected_rewards, margin, center_rewards_coefficient) -> None:
    check_ndim("chosen_rewards", chosen_rewards, 1, "(B,)")
    if chosen_rewards.numel() == 0:
        raise ValueError("chosen_rewards 的形状是 (0,)：至少需要一个偏好对")
    check_shape("rejected_rewards", rejected_rewards, chosen_rewards.shape, like="chosen_rewards")
    check_finite("chosen_rewards", chosen_rewards)
    check_finite("rejected_rewards", rejected_rewards)
    if margin is not None:
        check_shape("margin", margin, chosen_rewards.shape, like="chosen_rewards")
        check_finite("margin", margin)
    if center_rewards_coefficient is not None:
        check_nonnegative("center_rewards_coefficient", center_rewards_coefficient)


# --8<-- [start:bradley_terry_loss]
def bradley_terry_loss(
    chosen_rewards: Tensor,
    rejected_rewards: Tensor,
    margin: Tensor | None = None,
    center_rewards_coefficient: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""Bradley–Terry 负对数似然，加可选的间隔与居中项：

    $$\mathcal L = -\frac1B\sum_i \log\sigma\big(r_w^{(i)} - r_l^{(i)} - m^{(i)}\big)
    + c\,\frac1B\sum_i \big(r_w^{(i)} + r_l^{(i)}\big)^2 .$$

    Args:
        chosen_rewards: 奖励模型给被选回答 $y_w$ 的分数 $r_w$，形状 `(B,)`，浮点，带梯度。
        rejected_rewards: 给被拒回答 $y_l$ 的分数 $r_l$，形状 `(B,)`。
        margin: 每对的间隔 $m^{(i)}$，形状 `(B,)`；`None` 表示 0（TRL：数据集有 `margin` 列时才用）。
        center_rewards_coefficient: 居中系数 $c \ge 0$；`None` 表示不加（TRL 默认），推荐 0.01。

    Returns:
        `(loss, metrics)`：批平均的标量损失；`metrics` 同 TRL `RewardTrainer` 的日志：
        `accuracy`（$r_w > r_l$ 的比例，严格大于，平局算错）、`margin`（$r_w - r_l$ 的平均）、
        `min_reward` / `mean_reward` / `max_reward`（被选与被拒分数合在一起）。

    Raises:
        ValueError: 输入不是同形状的非空一维张量、含非有限值，或 `center_rewards_coefficient < 0`。

    Examples:
        >>> loss, m = bradley_terry_loss(torch.zeros(3), torch.zeros(3))
        >>> round(loss.item(), 4), m["accuracy"]  # log 2；平局不算对
        (0.6931, 0.0)
    """
    _check_bt_inputs(chosen_rewards, rejected_rewards, margin, center_rewards_coefficient)
    logits = chosen_rewards - rejected_rewards
    if margin is not None:
        logits = logits - margin
    loss = -F.logsigmoid(logits).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()
    both = torch.cat([chosen_rewards, rejected_rewards]).detach()
    metrics = {
        "accuracy": (chosen_rewards > rejected_rewards).float().mean().item(),
        "margin": (chosen_rewards - rejected_rewards).mean().item(),
        "min_reward": both.min().item(),
        "mean_reward": both.mean().item(),
        "max_reward": both.max().item(),
    }
    return loss, metrics


# --8<-- [end:bradley_terry_loss]
