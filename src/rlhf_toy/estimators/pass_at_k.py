r"""pass@k：再采 $k$ 个新回答、至少一个正确的概率 $1-(1-p_x)^k$（对题目平均），由每题 $n$ 个样本中 $c$ 个正确无偏地估计。

Chen et al.（2021，[arXiv 2107.03374](https://arxiv.org/abs/2107.03374)）第 2.1 节：

$$\text{pass@}k = 1 - \binom{n-c}{k}\Big/\binom{n}{k}
= 1 - \prod_{i=n-c+1}^{n}\Big(1 - \frac{k}{i}\Big),$$

右边的连乘是论文图 3 的数值稳定写法（不算大组合数）。
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

# --8<-- [end:imports]


# --8<-- [start:pass_at_k]
def pass_at_k(n: int, c: int, k: int) -> float:
    r"""一道题的 pass@k 无偏估计 $1 - \binom{n-c}{k}/\binom{n}{k}$（Chen et al. 2021，§2.1）。

    $n - c < k$ 时任取 $k$ 个必含正确的，结果为 1；否则用连乘 $\prod_{i=n-c+1}^{n}(1 - k/i)$，
    不会溢出，$n$ 上万也精确到浮点舍入。

    Args:
        n: 每道题采样的回答数，正整数。
        c: 其中正确的个数，$0 \le c \le n$。
        k: 抽几个，$1 \le k \le n$。

    Returns:
        $[0, 1]$ 内的浮点数；$c = 0$ 时为 0，$c = n$ 时为 1。

    Raises:
        ValueError: 参数不是整数或超出范围（`k > n` 时估计量没有定义）。

    Examples:
        >>> round(pass_at_k(10, 3, 1), 4), round(pass_at_k(10, 3, 2), 4), pass_at_k(10, 9, 2)
        (0.3, 0.5333, 1.0)
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} 应是整数，实际是 {value!r}")
    if n < 1:
        raise ValueError(f"n 应 ≥ 1，实际是 {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c 应在 [0, n={n}] 内，实际是 {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k 应在 [1, n={n}] 内，实际是 {k}（只有 n 个样本时无法无偏地估计 pass@k）")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(correct: Tensor | Sequence[int], n: int, ks: Sequence[int]) -> dict[int, float]:
    """一组题的平均 pass@k：`correct[j]` 是第 `j` 道题 `n` 个样本里正确的个数。

    Args:
        correct: 每道题的正确个数，长 `P` 的整数序列或一维张量。
        n: 每道题的样本数。
        ks: 要算的 $k$（每个都在 `1..n` 内）。

    Returns:
        `{k: 平均 pass@k}`。

    Raises:
        ValueError: `correct` 为空或不是一维，以及 `pass_at_k` 的报错。

    Examples:
        >>> {k: round(v, 4) for k, v in mean_pass_at_k([0, 5, 10], n=10, ks=[1, 10]).items()}
        {1: 0.5, 10: 0.6667}
    """
    if isinstance(correct, Tensor):
        if correct.dim() != 1:
            raise ValueError(f"correct 的形状是 {tuple(correct.shape)}，期望一维 (P,)")
        correct = correct.tolist()
    if len(correct) == 0:
        raise ValueError("correct 为空：至少要一道题")
    return {k: sum(pass_at_k(n, int(c), k) for c in correct) / len(correct) for k in ks}


# --8<-- [end:pass_at_k]
