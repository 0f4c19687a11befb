r"""逐 token 的熵（entropy）：PPO 的熵奖励与 TRL 日志里的 `entropy` 都用它。"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf_toy._checks import check_tensor

# --8<-- [end:imports]


# --8<-- [start:entropy_from_logits]
def entropy_from_logits(logits: Tensor) -> Tensor:
    r"""每个位置上整个词表分布的熵 $H = -\sum_v \pi(v)\log\pi(v)$，单位 nat。

    在有限的 logits 上与 TRL 1.16.0 的 `entropy_from_logits`（分块计算 $-\sum_v \pi(v)\log\pi(v)$）数值相同
    （这是不走融合核时的分块实现，CPU 上总是它；logits 在 CUDA/XPU 上、装了 Triton 且 dtype 与形状满足
    `_supports_trl_loss_kernel` 时，TRL 改走融合核 `_fused_logprob_entropy`，这里没有比较）；
    TRL v1.12 `PPOTrainer` 的日志里内联写成 $\log\sum_v e^{z_v} - \sum_v \pi(v) z_v$。
    两者遇到 $-\infty$ 的 logits 都得到 NaN；这里概率为 0 的词按 $0\log 0 = 0$ 处理，所以极端 logits 也给出有限的值与梯度。

    Args:
        logits: 形状 `(..., V)` 的浮点张量，最后一维是词表；例如 `(B, T, V)`。

    Returns:
        形状 `(...)`（去掉最后一维），带梯度；例如 `(B, T)`。取值在 $[0, \log V]$。

    Raises:
        ValueError: `logits` 是 0 维张量，或含 NaN、$+\infty$（允许 $-\infty$，表示被禁止的词）。

    Examples:
        >>> round(entropy_from_logits(torch.zeros(4)).item(), 4)  # 均匀分布：log 4
        1.3863
    """
    check_tensor("logits", logits)
    if logits.dim() == 0:
        raise ValueError("logits 的形状是 ()，期望至少 1 维 (..., V)")
    if torch.isnan(logits).any() or (logits == float("inf")).any():
        raise ValueError("logits 含 NaN 或 +inf；被禁止的词请用 -inf")
    logp = F.log_softmax(logits, dim=-1)
    p = logp.exp()
    safe_logp = torch.where(p > 0, logp, torch.zeros_like(logp))  # 0·log 0 = 0，且梯度有限
    return -(p * safe_logp).sum(-1)


# --8<-- [end:entropy_from_logits]
