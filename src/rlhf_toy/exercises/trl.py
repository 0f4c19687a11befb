r"""第 10 章的练习：给 TRL 写奖励函数 `addition_reward(completion_ids, a, b, **kwargs) -> list[float]`。

TRL 用关键字参数调用奖励函数：`prompts`、`completions`（解码后的文本，TRL 1.16 解码时 `skip_special_tokens=True`，
`<eos>`、`<pad>` 都被去掉）、`completion_ids`（每条回答的 token 编号），再加上数据集的其余列（这里是 `a`、`b`）。
检查器用同样的参数名调用读者的函数（不需要安装 TRL），但不传 TRL 的 `trainer_state`、`log_extra` 等其余参数，
`prompts` 也不带 `<bos>`：所以它查不出签名里漏了 `**kwargs`。
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, OutputError, run_check
from rlhf_toy.tasks.addition import BOS, EOS, PAD, VOCAB, AdditionTask, decode, encode

_TASK = AdditionTask()


def addition_reward(
    completion_ids: Sequence[Sequence[int]], a: Sequence[int], b: Sequence[int], **kwargs: Any
) -> list[float]:
    """参考实现：与 `rlhf_toy.integrations.trl.reward_function(AdditionTask())` 相同（那里要装 TRL 才能导入）。

    回答恰好是 `a + b` 的十进制数字、并以 EOS 结束时为 1.0，否则为 0.0。

    Args:
        completion_ids: 每条回答的 token 编号（长短不一的列表）。
        a: 每条回答对应题目的第一个加数（数据集的 `a` 列）。
        b: 第二个加数。
        **kwargs: TRL 传来的其余参数（`prompts`、`completions` 等），不使用。

    Returns:
        长度为 `B` 的浮点列表。
    """
    width = _TASK.max_completion_length
    rows = [list(ids)[:width] + [PAD] * (width - min(len(ids), width)) for ids in completion_ids]
    prompts = _TASK.encode_prompts(torch.tensor(list(zip(a, b, strict=True))).reshape(-1, 2))
    return _TASK.reward(prompts, torch.tensor(rows, dtype=torch.long).reshape(len(rows), width)).tolist()


def _text(ids: Sequence[int]) -> str:
    """TRL 交给奖励函数的文本：解码时去掉特殊 token。"""
    return "".join(VOCAB[i] for i in ids if i not in (PAD, BOS, EOS))


def _inputs(ids: list[list[int]], a: list[int], b: list[int]) -> dict[str, Any]:
    return {
        "prompts": [f"{x}+{y}=" for x, y in zip(a, b, strict=True)],
        "completions": [_text(row) for row in ids],
        "completion_ids": ids,
        "a": a,
        "b": b,
    }


def _outputs(ret: Any) -> dict[str, torch.Tensor]:
    if isinstance(ret, torch.Tensor):
        raise OutputError("TRL 要的是浮点列表 list[float]，这里返回了张量；用 .tolist()")
    if not isinstance(ret, list | tuple) or not all(isinstance(v, bool | int | float) for v in ret):
        raise OutputError(f"应返回浮点列表 list[float]，实际是 {type(ret).__name__}")
    return {"rewards": torch.tensor([float(v) for v in ret])}


def _cases() -> tuple[Case, ...]:
    return (
        Case(
            "三道题：对、错、对（都以 EOS 结束）",
            _inputs([encode("81") + [EOS], encode("13") + [EOS], encode("100") + [EOS]], [23, 7, 40], [58, 5, 60]),
        ),
        Case(
            "回答 81 后面跟 EOS、跟填充、两者都没有",
            _inputs([encode("81") + [EOS], encode("81") + [PAD], encode("81")], [23, 23, 23], [58, 58, 58]),
        ),
        Case("前导零 081、多一位 810", _inputs([encode("081") + [EOS], encode("810") + [EOS]], [23, 23], [58, 58])),
        Case("空回答（只有 EOS）", _inputs([[EOS], encode("0") + [EOS]], [0, 0], [0, 0])),
    )


def _reads_text(completion_ids, a, b, completions=None, **kwargs):
    return [float(text == str(x + y)) for text, x, y in zip(completions, a, b, strict=True)]


def _parses_int(completion_ids, a, b, **kwargs):
    out = []
    for ids, x, y in zip(completion_ids, a, b, strict=True):
        text = decode(ids)
        ok = EOS in ids and text.isdigit() and int(text) == x + y
        out.append(float(ok))
    return out


MISTAKES = (
    Mistake(
        "eos_not_required",
        "没有要求回答以 EOS 结束（多半是比较了 completions 文本）：TRL 1.16 解码时用 skip_special_tokens=True，"
        "“81<eos>”“81<pad>”“81” 解码出来都是 “81”。看 completion_ids：里面有 EOS 才算答完。",
        _reads_text,
    ),
    Mistake(
        "parses_int",
        "用 int() 解析了回答：“081” 也会被当成 81。可验证奖励要求回答恰好是和的十进制写法，比较字符串 str(a + b)。",
        _parses_int,
    ),
)

EXERCISE = Exercise("addition_reward", addition_reward, _cases(), _outputs, MISTAKES)


def check_addition_reward(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写给 TRL 的奖励函数 `addition_reward(completion_ids, a, b, **kwargs)`（第 10 章）。

    用 TRL 1.16 的参数名以关键字参数调用（`prompts`、`completions`、`completion_ids`、`a`、`b`；不传 `trainer_state` 等）。用例：对错混合、
    回答 81 后面跟 EOS / 填充 / 什么都没有、前导零、空回答；比较返回的奖励列表（参考实现与
    `rlhf_toy.integrations.trl.reward_function(AdditionTask())` 相同）。

    Args:
        your_fn: 读者的函数，返回长度为 `B` 的 `list[float]`。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_addition_reward(addition_reward, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
