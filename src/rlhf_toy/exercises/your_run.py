r"""第 13 章的练习：从渲染好的对话里切出回答的损失掩码；数一数 LoRA 要训练多少个参数。

两道题都不需要装 transformers 或 peft：第一道的输入是 token 编号列表，第二道的输入是线性层的形状。
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, OutputError, as_tensor, run_check

# --8<-- [start:chat_completion_mask]


def chat_completion_mask(input_ids: Sequence[int], header_ids: Sequence[int], eos_id: int) -> list[int]:
    r"""参考实现：渲染好的对话里，最后一个助手回合的内容及其回合结束符为 1，其余为 0。

    找到 `header_ids`（生成提示，例如 `<|im_start|>assistant\n` 的编号）最后一次出现的位置；
    它之后、到第一个 `eos_id`（含）为止的 token 是回答。生成提示本身、之前的系统与用户消息、
    回合结束之后的换行与填充都是 0。没有找到生成提示时全为 0；回答没有结束符时一直到末尾。

    Args:
        input_ids: 整段对话的 token 编号。
        header_ids: 生成提示的 token 编号（非空）。
        eos_id: 回合结束符的编号。

    Returns:
        与 `input_ids` 等长的 0/1 列表。

    Raises:
        ValueError: `header_ids` 为空。

    Examples:
        >>> chat_completion_mask([1, 7, 8, 9, 1, 5, 6, 4, 2, 3, 0], header_ids=[1, 5], eos_id=2)
        [0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0]
    """
    ids, header = list(input_ids), list(header_ids)
    if not header:
        raise ValueError("header_ids 不能为空（期望生成提示的 token 编号，长度 ≥ 1）")
    starts = [i for i in range(len(ids) - len(header) + 1) if ids[i : i + len(header)] == header]
    mask = [0] * len(ids)
    if not starts:
        return mask
    for i in range(starts[-1] + len(header), len(ids)):
        mask[i] = 1
        if ids[i] == eos_id:
            break
    return mask


# --8<-- [end:chat_completion_mask]


def _mask_outputs(ret: Any) -> dict[str, torch.Tensor]:
    if isinstance(ret, list | tuple):
        if not all(isinstance(v, bool | int | float) for v in ret):
            raise OutputError("mask 应是 0/1 的列表（list[int]）或张量")
        ret = torch.tensor([float(v) for v in ret])
    mask = as_tensor("mask", ret).float()
    if not ((mask == 0) | (mask == 1)).all():
        raise OutputError("mask 只能含 0 和 1")
    return {"mask": mask}


# 编号：0 填充，1 <|im_start|>，2 <|im_end|>，3 换行，5 "assistant"，6–9 普通文本
def _mask_cases() -> tuple[Case, ...]:
    header = [1, 5, 3]
    system_user = [1, 7, 3, 8, 2, 3, 1, 9, 3, 6, 2, 3]
    return (
        Case(
            "系统、用户、助手三条消息；助手回合之后还有换行",
            {"input_ids": [*system_user, *header, 6, 7, 8, 2, 3], "header_ids": header, "eos_id": 2},
        ),
        Case(
            "左填充的一行（填充在最前面）",
            {"input_ids": [0, 0, *system_user, *header, 9, 2, 3], "header_ids": header, "eos_id": 2},
        ),
        Case(
            "两轮对话：只有最后一个助手回合是回答",
            {
                "input_ids": [*system_user, *header, 6, 2, 3, 1, 9, 3, 7, 2, 3, *header, 8, 8, 2, 3],
                "header_ids": header,
                "eos_id": 2,
            },
        ),
        Case(
            "回答被超长截停（没有回合结束符）",
            {"input_ids": [*system_user, *header, 6, 7, 8, 9], "header_ids": header, "eos_id": 2},
        ),
        Case(
            "回合结束符的编号不是 2",
            {"input_ids": [1, 9, 3, 6, 4, 3, *header, 6, 4, 3], "header_ids": header, "eos_id": 4},
        ),
    )


def _header_included(input_ids, header_ids, eos_id):
    mask = chat_completion_mask(input_ids, header_ids, eos_id)
    first = mask.index(1) if 1 in mask else len(mask)
    for i in range(max(first - len(header_ids), 0), first):
        mask[i] = 1
    return mask


def _eos_excluded(input_ids, header_ids, eos_id):
    mask = chat_completion_mask(input_ids, header_ids, eos_id)
    return [m if t != eos_id else 0 for t, m in zip(input_ids, mask, strict=True)]


def _to_the_end(input_ids, header_ids, eos_id):
    mask = chat_completion_mask(input_ids, header_ids, eos_id)
    first = mask.index(1) if 1 in mask else len(mask)
    return [0] * first + [1] * (len(mask) - first)


def _first_header(input_ids, header_ids, eos_id):
    ids, header = list(input_ids), list(header_ids)
    starts = [i for i in range(len(ids) - len(header) + 1) if ids[i : i + len(header)] == header]
    return _from(ids, starts[0] + len(header), eos_id) if starts else [0] * len(ids)


def _from(ids, start, eos_id):
    mask = [0] * len(ids)
    for i in range(start, len(ids)):
        mask[i] = 1
        if ids[i] == eos_id:
            break
    return mask


def _eos_hard_coded(input_ids, header_ids, eos_id):
    return chat_completion_mask(input_ids, header_ids, 2)


MASK_MISTAKES = (
    Mistake(
        "header_included",
        "生成提示（<|im_start|>assistant 和换行）被算进了回答：它是模板写的，不是模型写的，属于提示词。"
        "GRPO 里它在提示词里，TRL 的 completion_mask 只覆盖模型生成的 token。",
        _header_included,
    ),
    Mistake(
        "eos_excluded",
        "回合结束符没有算进回答：模型就学不到“在这里停”。第一个回合结束符计入，之后的换行与填充不计。",
        _eos_excluded,
    ),
    Mistake(
        "to_the_end",
        "掩码一直延伸到末尾：回合结束符之后的换行、下一轮的模板与填充都不是回答。在第一个回合结束符处停下。",
        _to_the_end,
    ),
    Mistake(
        "first_header",
        "从第一个助手回合开始算：多轮对话里，只有最后一个助手回合是这次要训练的回答（找生成提示最后一次出现的位置）。",
        _first_header,
    ),
    Mistake("eos_hard_coded", "回合结束符的编号写死成了 2：用参数 eos_id。", _eos_hard_coded),
)

MASK_EXERCISE = Exercise("chat_completion_mask", chat_completion_mask, _mask_cases(), _mask_outputs, MASK_MISTAKES)


def check_chat_completion_mask(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `chat_completion_mask(input_ids, header_ids, eos_id)`：对话里回答的损失掩码（第 13 章）。

    用例：三条消息、左填充、两轮对话、被超长截停、回合结束符的编号不是 2；比较 0/1 掩码
    （参考实现是 `rlhf_toy.exercises.your_run.chat_completion_mask`）。

    Args:
        your_fn: 读者的函数；返回与 `input_ids` 等长的 0/1 列表（或张量）。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_chat_completion_mask(chat_completion_mask, verbose=False).passed
        True
    """
    return run_check(MASK_EXERCISE, your_fn, verbose=verbose)


# --8<-- [start:lora_trainable_parameters]


def lora_trainable_parameters(shapes: Sequence[tuple[int, int]], r: int) -> int:
    r"""参考实现：给每个形状为 `(d_out, d_in)` 的线性层加秩 `r` 的 LoRA，要训练的参数个数 $\sum r(d_\text{in} + d_\text{out})$。

    $A$ 是 $r \times d_\text{in}$，$B$ 是 $d_\text{out} \times r$；冻结的 $W$ 不算（Hu et al., 2021, 第 4.1 节）。

    Args:
        shapes: 每个目标线性层的 `(d_out, d_in)`（与 `nn.Linear.weight.shape` 相同的顺序）。
        r: 秩（≥ 1）。

    Returns:
        整数。

    Raises:
        ValueError: `r < 1`。

    Examples:
        >>> lora_trainable_parameters([(48, 48), (192, 48)], r=8)
        2688
    """
    if r < 1:
        raise ValueError(f"r 应 ≥ 1，实际是 {r}")
    return sum(r * (d_in + d_out) for d_out, d_in in shapes)


# --8<-- [end:lora_trainable_parameters]


def _count_outputs(ret: Any) -> dict[str, torch.Tensor]:
    if isinstance(ret, torch.Tensor):
        return {"count": ret.detach().double()}
    if isinstance(ret, bool) or not isinstance(ret, int | float):
        raise OutputError(f"应返回一个整数，实际是 {type(ret).__name__}")
    return {"count": torch.tensor(float(ret), dtype=torch.float64)}


def _count_cases() -> tuple[Case, ...]:
    return (
        Case("一个方阵层 48 × 48，r = 8", {"shapes": [(48, 48)], "r": 8}),
        Case("非方阵层：up_proj 是 (192, 48)，down_proj 是 (48, 192)", {"shapes": [(192, 48), (48, 192)], "r": 4}),
        Case(
            "第 10 章模型的一层，七个线性层，r = 8", {"shapes": [(48, 48)] * 4 + [(192, 48)] * 2 + [(48, 192)], "r": 8}
        ),
        Case("一个 4096 × 4096 的层，r = 16", {"shapes": [(4096, 4096)], "r": 16}),
    )


def _with_frozen(shapes, r):
    return lora_trainable_parameters(shapes, r) + sum(o * i for o, i in shapes)


def _only_a(shapes, r):
    return sum(r * i for _, i in shapes)


def _square(shapes, r):
    return sum(2 * r * i for _, i in shapes)


def _rank_squared(shapes, r):
    return sum(r * r * (i + o) for o, i in shapes)


COUNT_MISTAKES = (
    Mistake(
        "with_frozen",
        "把冻结的 W（d_out × d_in）也算进去了：LoRA 只训练 A 与 B，W 的 requires_grad 是 False。",
        _with_frozen,
    ),
    Mistake("only_a", "只数了 A（r × d_in）：B（d_out × r）也要训练。", _only_a),
    Mistake(
        "square",
        "把每层当成了方阵（2 r d_in）：MLP 的 up_proj、down_proj 不是方阵，A 跟 d_in、B 跟 d_out。",
        _square,
    ),
    Mistake("rank_squared", "乘了两次 r：A、B 各有 r 行或 r 列，合起来是 r (d_in + d_out)。", _rank_squared),
)

COUNT_EXERCISE = Exercise(
    "lora_trainable_parameters", lora_trainable_parameters, _count_cases(), _count_outputs, COUNT_MISTAKES
)


def check_lora_trainable_parameters(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `lora_trainable_parameters(shapes, r)`：LoRA 要训练的参数个数（第 13 章）。

    用例：方阵层、非方阵层、第 10 章模型的一整层、一个 4096 维的层；比较返回的整数。

    Args:
        your_fn: 读者的函数；返回整数。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_lora_trainable_parameters(lora_trainable_parameters, verbose=False).passed
        True
    """
    return run_check(COUNT_EXERCISE, your_fn, verbose=verbose)
