r"""第 13 章（续）的练习：数出 AdamW 训练要存的字节（ZeRO 论文 §3.1 的记账），按通过率窗口挑题。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlhf_toy.estimators.difficulty import pass_rate_window
from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, as_tensor, run_check


# --8<-- [start:training_state_bytes]
def training_state_bytes(n_params: int, dtype_bytes: int = 2, mixed_precision: bool = True) -> int:
    r"""AdamW 训练 `n_params` 个参数时，权重、梯度与优化器状态共占多少字节（不含激活）。

    混合精度：`dtype_bytes` 的权重与梯度，加 fp32 主权重（4 字节）与 fp32 的两个矩（8 字节），
    $\Psi(2b + 12)$，$b = 2$ 时是 $16\Psi$（ZeRO 论文 §3.1）。不用混合精度：四份都是 `dtype_bytes`，$4b\Psi$。

    Args:
        n_params: 参数个数 $\Psi$。
        dtype_bytes: 权重的每个数占几个字节 $b$（bf16 为 2，fp32 为 4）。
        mixed_precision: 是否另存 fp32 主权重、用 fp32 的矩。

    Returns:
        字节数（整数）。
    """
    if mixed_precision:
        return n_params * (2 * dtype_bytes + 4 + 8)
    return n_params * 4 * dtype_bytes


# --8<-- [end:training_state_bytes]


def _bytes_output(ret: Any) -> dict[str, Tensor]:
    if isinstance(ret, int) and not isinstance(ret, bool):
        return {"bytes": torch.tensor(ret, dtype=torch.float64)}
    return {"bytes": as_tensor("bytes", ret).double()}


def _reference_bytes(n_params: int, dtype_bytes: int = 2, mixed_precision: bool = True) -> Tensor:
    """参考实现的张量版（检查器比较张量）。"""
    return torch.tensor(training_state_bytes(n_params, dtype_bytes, mixed_precision), dtype=torch.float64)


BYTES_EXERCISE = Exercise(
    "training_state_bytes",
    _reference_bytes,
    (
        Case("1000 个参数，bf16 混合精度", {"n_params": 1000, "dtype_bytes": 2, "mixed_precision": True}),
        Case("1000 个参数，纯 bf16（不用混合精度）", {"n_params": 1000, "dtype_bytes": 2, "mixed_precision": False}),
        Case("7 个参数，纯 fp32", {"n_params": 7, "dtype_bytes": 4, "mixed_precision": False}),
        Case(
            "Qwen2.5-7B 的参数个数，bf16 混合精度", {"n_params": 7615616512, "dtype_bytes": 2, "mixed_precision": True}
        ),
    ),
    _bytes_output,
    (
        Mistake(
            "no_master_weights",
            "少了 fp32 主权重（每个参数 4 字节）：混合精度下优化器更新的是 fp32 的那份权重，bf16 的只是它的副本。",
            lambda n_params, dtype_bytes=2, mixed_precision=True: (
                n_params * (2 * dtype_bytes + 8) if mixed_precision else n_params * 4 * dtype_bytes
            ),
        ),
        Mistake(
            "no_gradients",
            "少了梯度：反向传播之后、优化器这一步之前，每个参数都有一份梯度（与权重同 dtype）。",
            lambda n_params, dtype_bytes=2, mixed_precision=True: (
                n_params * (dtype_bytes + 12) if mixed_precision else n_params * 3 * dtype_bytes
            ),
        ),
        Mistake(
            "no_optimizer_states",
            "少了 AdamW 的两个矩（一阶 m、二阶 v，混合精度下各 4 字节）：它们是最大的一项。",
            lambda n_params, dtype_bytes=2, mixed_precision=True: (
                n_params * (2 * dtype_bytes + 4) if mixed_precision else n_params * 2 * dtype_bytes
            ),
        ),
        Mistake(
            "ignores_mixed_precision",
            "不看 mixed_precision：不用混合精度时没有 fp32 主权重，两个矩也按参数的 dtype 存（PyTorch 的 AdamW），是 4b 字节每参数。",
            lambda n_params, dtype_bytes=2, mixed_precision=True: n_params * (2 * dtype_bytes + 12),
        ),
    ),
)


def check_training_state_bytes(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `training_state_bytes(n_params, dtype_bytes=2, mixed_precision=True)`。

    用例：bf16 混合精度、纯 bf16、纯 fp32 与 Qwen2.5-7B 的参数个数；参考实现是
    [`training_state_bytes`][rlhf_toy.exercises.your_run_settings.training_state_bytes]。

    Args:
        your_fn: 读者的函数，返回整数字节数。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_training_state_bytes(training_state_bytes, verbose=False).passed
        True
    """
    return run_check(BYTES_EXERCISE, your_fn, verbose=verbose)


def _keep_output(ret: Any) -> dict[str, Tensor]:
    return {"keep": as_tensor("keep", ret).float()}


WINDOW_EXERCISE = Exercise(
    "pass_rate_window",
    pass_rate_window,
    (
        Case("n = 10，窗口 [0.2, 0.8]", {"correct": torch.tensor([0, 1, 3, 5, 9, 10]), "n": 10}),
        Case("恰在端点上：2/10 与 8/10", {"correct": torch.tensor([2, 8]), "n": 10, "low": 0.2, "high": 0.8}),
        Case(
            "n = 16，窗口 [0.25, 0.75]",
            {"correct": torch.tensor([0, 3, 4, 8, 12, 13, 16]), "n": 16, "low": 0.25, "high": 0.75},
        ),
    ),
    _keep_output,
    (
        Mistake(
            "counts_not_rates",
            "拿正确的个数 c 去比窗口：要比的是通过率 c/n。",
            lambda correct, n, low=0.2, high=0.8: (correct >= low) & (correct <= high),
        ),
        Mistake(
            "inverted",
            "留反了：要留的是通过率在窗口里的题（组内有对有错，优势不为 0），不是两头的题。",
            lambda correct, n, low=0.2, high=0.8: ~((correct / n >= low) & (correct / n <= high)),
        ),
        Mistake(
            "open_window",
            "端点没算进窗口：通过率恰为 low 或 high 的题也留下（闭区间）。",
            lambda correct, n, low=0.2, high=0.8: (correct / n > low) & (correct / n < high),
        ),
    ),
)


def check_pass_rate_window(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `pass_rate_window(correct, n, low=0.2, high=0.8)`：通过率 $c/n$ 在 $[\text{low}, \text{high}]$ 里的题。

    用例：一般的计数、恰在端点上的题、另一个窗口；参考实现是
    [`pass_rate_window`][rlhf_toy.estimators.difficulty.pass_rate_window]。

    Args:
        your_fn: 读者的函数，返回形状 `(P,)` 的布尔张量。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_pass_rate_window(pass_rate_window, verbose=False).passed
        True
    """
    return run_check(WINDOW_EXERCISE, your_fn, verbose=verbose)
