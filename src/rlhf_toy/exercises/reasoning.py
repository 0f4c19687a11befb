r"""第 11 章的练习：pass@k 的无偏估计 $1 - \binom{n-c}{k}/\binom{n}{k}$（Chen et al. 2021，§2.1）。"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rlhf_toy.estimators.pass_at_k import pass_at_k
from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output


def _cases() -> tuple[Case, ...]:
    return (
        Case("n = 10、c = 3、k = 1（就是正确率 c/n）", {"n": 10, "c": 3, "k": 1}),
        Case("n = 10、c = 3、k = 5", {"n": 10, "c": 3, "k": 5}),
        Case("一个也不对：c = 0", {"n": 10, "c": 0, "k": 4}),
        Case("n − c < k：任取 k 个必含正确的", {"n": 10, "c": 9, "k": 2}),
        Case("n = 200、c = 5、k = 64（大 n，论文的设置）", {"n": 200, "c": 5, "k": 64}),
    )


def _off_by_one(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c, n + 1):  # 多乘了 i = n - c 这一项
        prod *= 1.0 - k / i
    return 1.0 - prod


MISTAKES = (
    Mistake(
        "no_one_minus",
        "返回的是 C(n−c, k)/C(n, k)：这是“抽 k 个全错”的概率，pass@k 是 1 减去它。",
        lambda n, c, k: math.comb(n - c, k) / math.comb(n, k),
    ),
    Mistake(
        "biased_from_pass_at_1",
        "用了 1 − (1 − c/n)^k：把 c/n 当成真实正确率、按“有放回地抽 k 次”算。n 个样本里抽 k 个是无放回的，"
        "这样算总是偏低（C(n−c, k)/C(n, k) ≤ (1 − c/n)^k）；无偏的是 1 − C(n−c, k)/C(n, k)。",
        lambda n, c, k: 1.0 - (1.0 - c / n) ** k,
    ),
    Mistake(
        "linear_in_k",
        "写成了 min(1, k·c/n)：k 个样本“至少一个对”的概率不是每个样本正确率的 k 倍（事件有重叠）。",
        lambda n, c, k: min(1.0, k * c / n),
    ),
    Mistake(
        "off_by_one",
        "连乘多了一项：数值稳定的写法是 ∏_{i=n−c+1}^{n} (1 − k/i)，从 n−c+1 开始，不是从 n−c 开始（Chen et al. 图 3）。",
        _off_by_one,
    ),
)

EXERCISE = Exercise("pass_at_k", pass_at_k, _cases(), tensor_output("pass_at_k"), MISTAKES)


def check_pass_at_k(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `pass_at_k(n, c, k)`：一道题 pass@k 的无偏估计（第 11 章，Chen et al. 2021 §2.1）。

    用例：$k = 1$、中等的 $k$、$c = 0$、$n - c < k$（结果为 1）与 $n = 200$、$k = 64$；比较返回的数（参考实现是
    [`pass_at_k`][rlhf_toy.estimators.pass_at_k.pass_at_k]）。

    Args:
        your_fn: 读者的函数；`n`、`c`、`k` 是整数，返回 $[0, 1]$ 内的浮点数。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_pass_at_k(pass_at_k, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
