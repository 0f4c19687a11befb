r"""第 6 章（续）的练习：按 `loss_type` 把逐 token 损失汇总成标量（`grpo`、`bnpo`、`dr_grpo`、`dapo`）。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, loss_outputs, run_check
from rlhf_toy.losses.aggregate import aggregate_loss

GRAD = ("per_token_loss",)


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(9)
    page = {
        "per_token_loss": torch.tensor([[1.0, 1.0, 1.0], [1.0, 7.0, 7.0]]),
        "mask": torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
    }
    x = torch.randn(3, 5, generator=g)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
    rand = {"per_token_loss": torch.where(mask.bool(), x, 5.0), "mask": mask}
    nan_pad = {"per_token_loss": torch.where(mask.bool(), x, float("nan")), "mask": mask}
    empty = {"per_token_loss": torch.where(mask.bool(), x, 3.0), "mask": torch.cat([mask[:2], torch.zeros(1, 5)])}
    return (
        Case("grpo，两条长短不一的回答（填充处的值是 7.0）", {**page, "loss_type": "grpo"}, grad=GRAD),
        Case("grpo，随机的逐 token 损失", {**rand, "loss_type": "grpo"}, grad=GRAD),
        Case("bnpo", {**rand, "loss_type": "bnpo"}, grad=GRAD),
        Case("dapo", {**rand, "loss_type": "dapo"}, grad=GRAD),
        Case(
            "dr_grpo，max_completion_length = 8",
            {**rand, "loss_type": "dr_grpo", "max_completion_length": 8},
            grad=GRAD,
        ),
        Case("dr_grpo，不给 max_completion_length（取 T）", {**rand, "loss_type": "dr_grpo"}, grad=GRAD),
        Case(
            "填充处是 NaN",
            {**nan_pad, "loss_type": "grpo"},
            grad=GRAD,
            key="nan_padding",
            hint="填充位置的值是任意的，甚至是 NaN；乘以掩码去不掉它（NaN · 0 仍是 NaN），要用 torch.where 按掩码选取。",
        ),
        Case(
            "grpo，一行掩码全为 0（空回答）",
            {**empty, "loss_type": "grpo"},
            grad=GRAD,
            key="empty_row",
            hint="整行掩码为 0 的回答对 grpo 贡献 0，但仍计入分母 B；每行的分母要限幅为至少 1（clamp(min=1)），否则是 0/0 = NaN。",
        ),
        Case(
            "bnpo，整批掩码全为 0",
            {"per_token_loss": x[:2, :3], "mask": torch.zeros(2, 3), "loss_type": "bnpo"},
            grad=GRAD,
            key="empty_batch",
            hint="整批掩码全为 0 时损失定义为 0：token 数的分母要限幅为至少 1。",
        ),
    )


def _agg(
    per_token_loss,
    mask,
    loss_type="grpo",
    max_completion_length=None,
    *,
    where=True,
    override=None,
    clamp=True,
    row_den="mask",
    dr_den="BL",
    skip_empty=False,
):
    kind = loss_type if override is None else override
    x = torch.where(mask.bool(), per_token_loss, 0.0) if where else per_token_loss * mask
    cl = (lambda t: t.clamp(min=1)) if clamp else (lambda t: t)
    if kind == "grpo":
        den = cl(mask.sum(-1)) if row_den == "mask" else torch.full_like(mask[:, 0], mask.shape[1])
        rows = x.sum(-1) / den
        if skip_empty:
            rows = rows[mask.sum(-1) > 0]
        return rows.mean()
    if kind == "dr_grpo":
        if dr_den == "tokens":
            return x.sum() / cl(mask.sum())
        length = per_token_loss.shape[1] if max_completion_length is None or dr_den == "BT" else max_completion_length
        return x.sum() / (per_token_loss.shape[0] * length)
    return x.sum() / cl(mask.sum())


def _m(**options):
    return lambda **inputs: _agg(**inputs, **options)


MISTAKES = (
    Mistake(
        "no_mask",
        "没有用掩码：填充 token 的损失被算了进去（填充处的值是任意的）。按掩码选取，再按 loss_type 的分母平均。",
        lambda per_token_loss, mask, loss_type="grpo", max_completion_length=None: per_token_loss.mean(-1).mean(),
    ),
    Mistake(
        "divide_by_T",
        "按序列平均时除以了补齐后的长度 T，而不是每条回答的真实长度 Σ_t m_{i,t}：短回答的损失被缩小了。",
        _m(row_den="T"),
    ),
    Mistake(
        "token_mean_for_grpo",
        "loss_type='grpo' 是先在每条回答内平均、再在回答间平均（DeepSeekMath 式 (3)）；全部 token 一起平均是 bnpo / dapo。"
        "两者给不同长度回答的 token 权重不同（长回答的 token 在 grpo 里权重小）。",
        _m(override="bnpo"),
    ),
    Mistake(
        "sequence_mean_for_token_types",
        "bnpo、dapo 是全部真实 token 一起平均（分母是整批的 token 数），不是先按序列平均：loss_type 没有区分开。",
        _m(override="grpo"),
    ),
    Mistake(
        "dr_grpo_token_count",
        "dr_grpo 的分母是常数 B·L（L 是 max_completion_length），与回答长度无关；除以 token 数就成了 bnpo，长度偏差又回来了。",
        _m(dr_den="tokens"),
    ),
    Mistake(
        "dr_grpo_ignores_max_length",
        "dr_grpo 的 L 是生成时的长度上限 max_completion_length，不是这一批补齐后的 T（只有不给 max_completion_length 时才取 T）。",
        _m(dr_den="BT"),
    ),
    Mistake(
        "nan_times_zero",
        "用乘以掩码去掉了填充：填充处是 NaN 时 NaN · 0 仍是 NaN，整个损失和梯度都成了 NaN。用 torch.where(mask.bool(), x, 0.0) 选取。",
        _m(where=False),
    ),
    Mistake(
        "empty_row_excluded",
        "把空回答从分母里去掉了：grpo 里整行掩码为 0 的回答贡献 0，但仍计入分母 B（同 TRL）。",
        _m(skip_empty=True),
    ),
    Mistake(
        "denominator_not_clamped",
        "分母没有限幅为至少 1：空回答（或整批没有 token）时是 0/0 = NaN。用 mask.sum(...).clamp(min=1)。",
        _m(clamp=False),
    ),
)

EXERCISE = Exercise("aggregate_loss", aggregate_loss, _cases(), loss_outputs, MISTAKES)


def check_aggregate_loss(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `aggregate_loss(per_token_loss, mask, loss_type="grpo", max_completion_length=None)`（第 6 章续）。

    用例：四种 `loss_type` 在长短不一的回答上、`dr_grpo` 给与不给 `max_completion_length`、填充处是 NaN、
    空回答、整批掩码全为 0；比较损失与它对 `per_token_loss` 的梯度（也就是每个 token 分到的权重）。参考实现是
    [`aggregate_loss`][rlhf_toy.losses.aggregate.aggregate_loss]。

    Args:
        your_fn: 读者的函数；`per_token_loss`、`mask` 形状 `(B, T)`，返回标量。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_aggregate_loss(aggregate_loss, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
