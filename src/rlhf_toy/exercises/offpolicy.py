r"""第 12 章的练习：采样器与训练器之间的重要性权重 $\rho = \pi_{old}/\mu$，截断（TIS）与掩码（MIS），逐 token 与序列级。"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from rlhf_toy.estimators.importance import importance_weights
from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, run_check, tensor_output


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(12)
    sampler = -2.0 * torch.rand(3, 4, generator=g) - 0.1
    logps = (sampler + 1.2 * torch.randn(3, 4, generator=g)).clamp(max=-0.01)  # 有的比率落在界外
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    base = {"logps": logps, "sampler_logps": sampler, "mask": mask}
    # 填充位置上两边的对数概率是随意的值（差很大）：掩码之外的差值不该进权重
    junk = {**base, "logps": logps.masked_fill(mask == 0, -30.0)}
    extreme = {**base, "sampler_logps": sampler.index_put((torch.tensor([0]), torch.tensor([1])), torch.tensor(-20.0))}
    empty = {**base, "mask": torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])}
    return (
        Case("token_truncate，C_max = 3", {**base, "mode": "token_truncate", "clip_max": 3.0}),
        Case("token_mask，C_max = 2", {**base, "mode": "token_mask", "clip_max": 2.0}),
        Case(
            "token_mask，C_min = 0.5、C_max = 2（IcePop 的双侧掩码）",
            {**base, "mode": "token_mask", "clip_max": 2.0, "clip_min": 0.5},
        ),
        Case("sequence_truncate，C_max = 3", {**base, "mode": "sequence_truncate", "clip_max": 3.0}),
        Case("sequence_mask（TRL 的默认），C_max = 3", {**base, "mode": "sequence_mask", "clip_max": 3.0}),
        Case(
            "极端的比率：采样器给某个 token 的概率是 e^−20（sequence_mask 把整条序列置 0）",
            {**extreme, "mode": "sequence_mask", "clip_max": 3.0},
        ),
        Case("同上，sequence_truncate：截到 C_max", {**extreme, "mode": "sequence_truncate", "clip_max": 3.0}),
        Case(
            "填充位置上的对数概率是随意的值（sequence_truncate）",
            {**junk, "mode": "sequence_truncate", "clip_max": 3.0},
        ),
        Case(
            "掩码全为 0 的行（sequence_mask）：权重为 1，乘到损失上仍被掩码去掉",
            {**empty, "mode": "sequence_mask", "clip_max": 3.0},
            key="empty_row",
            hint="掩码全为 0 的行，掩码内的对数比率之和是 0，权重 exp(0) = 1（不是 0，也不是 NaN）。",
        ),
    )


def _weights(logps, sampler_logps, mask, mode="sequence_mask", clip_max=3.0, clip_min=None, **bug):
    diff = logps - sampler_logps
    if bug.get("inverted"):
        diff = -diff
    if not bug.get("no_mask"):
        diff = diff * mask
    if mode.startswith("sequence"):
        if bug.get("mean"):
            diff = diff.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
        else:
            diff = diff.sum(-1, keepdim=True)
    ratio = diff.exp()
    if mode.endswith("_truncate") or bug.get("clamp_in_mask_mode"):
        return ratio.clamp(min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    out_of_bounds = (ratio < low) | (ratio > high)
    return ratio.masked_fill(out_of_bounds, 1.0 if bug.get("mask_to_one") else 0.0)


def _m(**bug):
    def fn(logps, sampler_logps, mask, mode="sequence_mask", clip_max=3.0, clip_min=None):
        return _weights(logps, sampler_logps, mask, mode, clip_max, clip_min, **bug)

    return fn


MISTAKES = (
    Mistake(
        "inverted",
        "比率写反了：权重是 π_old/μ（训练器的概率除以采样器的概率），即 exp(logps − sampler_logps)；"
        "写成 μ/π_old 时，采样器偏爱的 token 反而被放大。",
        _m(inverted=True),
    ),
    Mistake(
        "sequence_mean",
        '序列级权重用了对数比率的平均（几何平均，GSPO 的做法）：TRL 的 sequence_* 与 verl 的 rollout_is="sequence" '
        "都是掩码内求和，即逐 token 比率之积——序列的似然比。",
        _m(mean=True),
    ),
    Mistake(
        "clamp_in_mask_mode",
        "*_mask 模式把界外的比率截到边界上了：那是 *_truncate（TIS）；掩码模式（MIS）把界外的权重置 0，整条序列或这个 token 不参与更新。",
        _m(clamp_in_mask_mode=True),
    ),
    Mistake(
        "mask_to_one",
        "界外的权重置成了 1：这等于对最离谱的样本不做任何修正；掩码模式应置 0。",
        _m(mask_to_one=True),
    ),
    Mistake(
        "no_mask",
        "差值没有先乘掩码：填充位置与工具输出的 token 不是采样器生成的，它们的对数概率不该进权重（TRL 用 completion_mask * tool_mask）。",
        _m(no_mask=True),
    ),
)

EXERCISE = Exercise("importance_weights", importance_weights, _cases(), tensor_output("weights"), MISTAKES)


def check_importance_weights(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `importance_weights(logps, sampler_logps, mask, mode="sequence_mask", clip_max=3.0, clip_min=None)`（第 12 章）。

    用例：四种 `mode`（`token_truncate`、`token_mask`、`sequence_truncate`、`sequence_mask`）、IcePop 式的双侧界、
    填充位置上随意的对数概率、掩码全为 0 的行；比较返回的权重（参考实现是
    [`importance_weights`][rlhf_toy.estimators.importance.importance_weights]，与 TRL 1.16 的 `vllm_importance_sampling_mode` 相同）。

    Args:
        your_fn: 读者的函数；`logps`、`sampler_logps`、`mask` 形状 `(B, T)`，返回逐 token 模式 `(B, T)`、序列模式 `(B, 1)` 的权重。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_importance_weights(importance_weights, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
