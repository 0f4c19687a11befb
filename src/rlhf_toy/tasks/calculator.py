r"""带计算器工具的加法：策略可以写一次工具调用，由环境把计算结果插进回答里。

* 词表在第 9 章的加法词表（`rlhf_toy.tasks.addition.VOCAB`）后面加三个 token：`<call>`、`<res>`、`</res>`。
* 一条用工具的回答（rollout）分三段：策略写 `<call>347+588<res>`（自己抄一遍操作数，工具算的是**它写下的**算式，
  抄错了结果就错）；环境接着写工具的输出 `935</res>`；策略再写最终答案 `935<eos>`。
  不用工具的回答直接写 `935<eos>`，与第 9 章相同。
* 奖励只看最终答案：最后一个 `</res>` 之后（没有调用时是整条回答）恰好是正确的和、并以 EOS 结束时为 1，否则为 0。
* `tool_mask` 标出每个 token 是谁写的：环境插入的 token 为 0，其余为 1，同 TRL 1.16 `GRPOTrainer` 的
  `tool_mask` 与 verl 0.9.1 agent loop 的 `response_mask`。
* 默认是三位数加法：极小的 Transformer 直接写答案时常错，抄写操作数和结果却容易学会。
"""

# --8<-- [start:imports]
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rlhf_toy._checks import check_ndim
from rlhf_toy.policies.transformer import TinyTransformerPolicy, completion_mask
from rlhf_toy.tasks import addition
from rlhf_toy.tasks.addition import EOS, PAD, AdditionTask

# --8<-- [end:imports]

# --8<-- [start:vocab]
VOCAB = (*addition.VOCAB, "<call>", "<res>", "</res>")
CALL, RES, END_RES = (VOCAB.index(s) for s in ("<call>", "<res>", "</res>"))
_DIGITS = {addition.VOCAB.index(c): c for c in "0123456789"}
_PLUS = addition.VOCAB.index("+")
# --8<-- [end:vocab]


def render(ids: list[int] | Tensor, tool_mask: list[int] | Tensor | None = None) -> str:
    """把一条回答写成可读的字符串：`<call>`、`<res>`、`</res>`、`<eos>` 原样写出，填充略去；
    给了 `tool_mask` 时，环境插入的 token 用方括号括起来。

    Args:
        ids: 回答的 token 编号（列表或一维张量）。
        tool_mask: 可选，同长度的 0/1（0 = 环境插入）。

    Returns:
        字符串，例如 `"<call>347+588<res>[935</res>]935<eos>"`。

    Examples:
        >>> render([CALL, 6, 13, 7, RES, 10, END_RES, 10, EOS, PAD], [1, 1, 1, 1, 1, 0, 0, 1, 1, 1])
        '<call>3+4<res>[7</res>]7<eos>'
    """
    ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
    marks = [1] * len(ids) if tool_mask is None else [int(m) for m in tool_mask]
    out, inside = [], False
    for i, m in zip(ids, marks, strict=True):
        if i == PAD:
            continue
        if m == 0 and not inside:
            out.append("[")
        if m == 1 and inside:
            out.append("]")
        inside = m == 0
        out.append("<eos>" if i == EOS else VOCAB[i])
    return "".join(out) + ("]" if inside else "")


# --8<-- [start:calculator]
def calculator(call: list[int]) -> list[int]:
    """计算器工具：把策略在 `<call>` 与 `<res>` 之间写下的 token 当作算式 `a+b` 求值。

    工具只看策略写了什么，不看题目：抄错了操作数，得到的就是抄错的算式的和。写得不成算式
    （缺操作数、多个加号、含非数字）时工具只返回 `</res>`，不给结果。

    Args:
        call: `<call>` 与 `<res>` 之间的 token 编号。

    Returns:
        工具输出的 token：和的各位数字加 `</res>`。

    Examples:
        >>> from rlhf_toy.tasks.addition import encode
        >>> calculator(encode("347+588")) == encode("935") + [END_RES]
        True
        >>> calculator(encode("34+")) == [END_RES]
        True
    """
    text = "".join("+" if i == _PLUS else _DIGITS.get(i, "?") for i in call)
    parts = text.split("+")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return [END_RES]
    return addition.encode(str(int(parts[0]) + int(parts[1]))) + [END_RES]


# --8<-- [end:calculator]


# --8<-- [start:calculator_task]
class CalculatorTask:
    """三位数（或 `n_digits` 位数）加法，策略可以调用计算器。题目划分与抽题沿用 `AdditionTask`。

    Args:
        n_digits: 每个操作数最多几位（1–3）。
        batch_size: 每次 `prompts()` 抽多少个训练提示词。
        n_heldout: 留出集题数。
        p_call: SFT 示范里用工具的比例（其余直接写答案）。
        seed: 题目划分与抽题的随机种子（任务自带生成器，不影响全局随机数）。

    Raises:
        ValueError: 参数超出范围。
    """

    call_id, res_id, end_id = CALL, RES, END_RES

    def __init__(
        self, n_digits: int = 3, batch_size: int = 16, n_heldout: int = 500, p_call: float = 0.5, seed: int = 0
    ):
        if not 0 <= p_call <= 1:
            raise ValueError(f"p_call 应在 [0, 1] 内，实际是 {p_call}")
        self.base = AdditionTask(n_digits=n_digits, batch_size=batch_size, n_heldout=n_heldout, seed=seed)
        self.n_digits, self.batch_size, self.p_call = n_digits, batch_size, p_call
        self.max_prompt_length = self.base.max_prompt_length
        # <call> a + b <res> | 和 </res> | 和 <eos>
        self.max_completion_length = (2 * n_digits + 3) + (n_digits + 2) + (n_digits + 2)
        self.generator = self.base.generator

    # --8<-- [end:calculator_task]

    def make_policy(self, **kwargs: Any) -> TinyTransformerPolicy:
        """按本任务的词表与长度建一个 `TinyTransformerPolicy`（其余参数原样传入，如 `d_model`、`temperature`）。

        Args:
            **kwargs: 传给 `TinyTransformerPolicy`。

        Returns:
            随机初始化的策略（消耗全局随机数生成器）。
        """
        return TinyTransformerPolicy(
            len(VOCAB),
            PAD,
            EOS,
            max_prompt_length=self.max_prompt_length,
            max_completion_length=self.max_completion_length,
            **kwargs,
        )

    def tool(self, call: list[int]) -> list[int]:
        """环境的工具：见 `calculator`。"""
        return calculator(call)

    def encode_prompts(self, problems: Tensor) -> Tensor:
        """`(P, 2)` 的题目 → 左填充的提示词 `<bos>a+b=`，形状 `(P, max_prompt_length)`。"""
        return self.base.encode_prompts(problems)

    def prompts(self) -> Tensor:
        """从训练集有放回地抽 `batch_size` 道题的提示词。"""
        return self.base.prompts()

    def heldout_prompts(self, n: int | None = None) -> Tensor:
        """留出集的前 `n` 道题（`None` 为全部）的提示词。"""
        return self.base.encode_prompts(self.base.heldout[:n])

    def answers(self, prompts: Tensor) -> list[int]:
        """从提示词解析出正确的和，长 `B` 的整数列表。"""
        return self.base.answers(prompts)

    # --8<-- [start:demonstration]
    def demonstration(self, a: int, b: int, call: bool) -> tuple[list[int], list[int]]:
        """一条示范回答与它的 `tool_mask`：`call=True` 时先调用工具（结果由 `calculator` 写出，tool_mask 为 0）。

        Args:
            a: 第一个操作数。
            b: 第二个操作数。
            call: 是否调用工具。

        Returns:
            `(ids, tool_mask)`，两个等长列表。
        """
        answer = addition.encode(str(a + b)) + [EOS]
        if not call:
            return answer, [1] * len(answer)
        written = [CALL, *addition.encode(f"{a}+{b}"), RES]
        result = self.tool(written[1:-1])
        return written + result + answer, [1] * len(written) + [0] * len(result) + [1] * len(answer)

    # --8<-- [end:demonstration]

    def sft_batch(self, batch_size: int) -> tuple[Tensor, Tensor, Tensor]:
        """SFT 的一批：比例 `p_call` 的示范调用工具；损失掩码在工具输出上为 0（只学策略自己写的 token）。

        Args:
            batch_size: 题数。

        Returns:
            `(prompts, completions, mask)`：`(B, Lp)`、`(B, max_completion_length)`、`(B, max_completion_length)`；
            `mask` = 回答掩码 × `tool_mask`。
        """
        problems = self.base.draw(batch_size)
        calls = (torch.rand(batch_size, generator=self.generator) < self.p_call).tolist()
        L = self.max_completion_length
        ids, tool_mask = torch.full((batch_size, L), PAD), torch.ones(batch_size, L)
        for row, ((a, b), call) in enumerate(zip(problems.tolist(), calls, strict=True)):
            x, m = self.demonstration(a, b, call)
            ids[row, : len(x)], tool_mask[row, : len(m)] = torch.tensor(x), torch.tensor(m, dtype=torch.float)
        return self.encode_prompts(problems), ids, completion_mask(ids, EOS) * tool_mask

    # --8<-- [start:reward]
    def final_answer(self, completion: list[int]) -> str | None:
        """最终答案：最后一个 `</res>` 之后（没有调用时从头）到第一个 EOS 之前的文字；没有 EOS 时为 `None`。"""
        start = max((i + 1 for i, t in enumerate(completion) if t == END_RES), default=0)
        rest = completion[start:]
        if EOS not in rest:
            return None
        return "".join(VOCAB[t] for t in rest[: rest.index(EOS)])

    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """可验证奖励：最终答案恰好是正确的和并以 EOS 结束时为 1.0，否则为 0.0（工具调用本身不计分）。

        Args:
            prompts: 提示词，形状 `(B, Lp)`。
            completions: 回答，形状 `(B, T)`（含环境插入的工具输出）。

        Returns:
            形状 `(B,)` 的浮点奖励。

        Raises:
            ValueError: 形状不符。
        """
        check_ndim("completions", completions, 2, "(B, T)")
        if completions.shape[0] != prompts.shape[0]:
            raise ValueError(
                f"completions 的形状是 {tuple(completions.shape)}，期望第 0 维为 {prompts.shape[0]}（与 prompts 相同）"
            )
        rows = completions.tolist()
        return torch.tensor(
            [float(self.final_answer(r) == str(s)) for r, s in zip(rows, self.answers(prompts), strict=True)]
        )

    # --8<-- [end:reward]

    def called(self, completions: Tensor) -> Tensor:
        """每条回答是否调用了工具（含 `<call>`），形状 `(B,)` 的 0/1 浮点。"""
        check_ndim("completions", completions, 2, "(B, T)")
        return (completions == CALL).any(dim=1).float()
