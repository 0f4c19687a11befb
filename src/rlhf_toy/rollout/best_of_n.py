r"""最优 N 选一（best-of-N）：从策略采 $N$ 个回答，交给奖励模型打分，留下分数最高的那个。

在查表策略上，best-of-N 的分布有闭式解（Beirami et al., 2024，[arXiv 2401.01879](https://arxiv.org/abs/2401.01879)，§2）：
把回答按代理奖励 $\hat r$ 排序，记 $F(y) = \pi(\hat r(Y) \le \hat r(y))$、$F^-(y) = \pi(\hat r(Y) < \hat r(y))$，则

$$\pi_N(y) = \frac{\pi(y)}{\pi(T_y)}\Big(F(y)^N - F^-(y)^N\Big),$$

$T_y$ 是与 $y$ 分数相同的回答集合（分数相同时在它们之间随机挑一个；没有并列时 $\pi(y)/\pi(T_y) = 1$）。
同一篇论文 §3 证明了常被当作等式引用的 $\mathrm{KL}(\pi_N\|\pi) = \log N - (N-1)/N$ 其实只是上界。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math

import torch
from torch import Tensor

from rlhf_toy._checks import check_finite, check_ndim, check_shape

# --8<-- [end:imports]


# --8<-- [start:best_of_n_probs]
def best_of_n_probs(probs: Tensor, rewards: Tensor, n: int) -> Tensor:
    r"""best-of-N 策略的精确分布 $\pi_N(y\mid x)$（每行一个提示词）。

    Args:
        probs: 基础策略 $\pi(y\mid x)$，形状 `(P, K)`，每行非负、和为 1。
        rewards: 代理奖励 $\hat r(x, y)$，形状 `(P, K)`，有限值。
        n: 采样数 $N \ge 1$；$N = 1$ 时 $\pi_N = \pi$。

    Returns:
        形状 `(P, K)` 的概率，每行和为 1（至浮点舍入）；$\pi(y) = 0$ 的回答概率为 0。

    Raises:
        ValueError: 形状不符、含非有限值、概率为负或行和不为 1，或 `n` 不是正整数。

    Examples:
        >>> best_of_n_probs(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.0, 1.0]]), n=2)
        tensor([[0.2500, 0.7500]])
    """
    check_ndim("probs", probs, 2, "(P, K)")
    check_shape("rewards", rewards, probs.shape, "probs")
    check_finite("probs", probs)
    check_finite("rewards", rewards)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n 应是正整数，实际是 {n!r}")
    if (probs < 0).any() or not torch.allclose(probs.sum(-1), torch.ones(len(probs), dtype=probs.dtype), atol=1e-5):
        raise ValueError("probs 的每行应非负且和为 1")
    p = probs.double()
    le = rewards[:, None, :] <= rewards[:, :, None]  # le[x, y, y'] = r(y') <= r(y)
    eq = rewards[:, None, :] == rewards[:, :, None]
    F = (le * p[:, None, :]).sum(-1)  # (P, K)
    tie = (eq * p[:, None, :]).sum(-1)  # π(T_y)
    F_minus = F - tie
    mass = F.pow(n) - F_minus.pow(n)  # best-of-N 落在 T_y 里的概率
    out = torch.where(tie > 0, p / tie.clamp_min(1e-300) * mass, torch.zeros_like(p))
    return out.to(probs.dtype)


def kl_upper_bound(n: int) -> float:
    r"""常被引用的 $\log N - (N-1)/N$：best-of-N 到基础策略的 KL 的上界（Beirami et al. 2024，§3）。

    Examples:
        >>> kl_upper_bound(1), round(kl_upper_bound(4), 4)
        (0.0, 0.6363)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n 应是正整数，实际是 {n!r}")
    return math.log(n) - (n - 1) / n


# --8<-- [end:best_of_n_probs]
