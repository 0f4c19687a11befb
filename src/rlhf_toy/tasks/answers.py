r"""从自由文本里取出答案：`\boxed{...}` 或“答案标记”之后的数（第 13 章）。

有了对话模板，模型的回答不再是“81<eos>”这样的几个 token，而是一句话，例如
`"23 + 58 = 81, so the answer is \boxed{81}."`。可验证奖励先要从文本里取出答案，再与正确答案比较。
取法决定了奖励：取错了，对的回答得 0 分，错的回答反而得分。本模块只用 Python 标准库。
"""

from __future__ import annotations

# --8<-- [start:imports]
import re

# --8<-- [end:imports]

# --8<-- [start:extract_boxed]
BOXED = "\\boxed{"


def extract_boxed(text: str) -> str | None:
    r"""取出文本里**最后一个** `\boxed{...}` 的内容（花括号可以嵌套），去掉首尾空白。

    取最后一个：模型常在推理中途写出候选答案，最后一个才是结论。内容里的花括号按配对计数，
    所以 `\boxed{\frac{1}{2}}` 得到 `\frac{1}{2}`。

    Args:
        text: 模型的回答（解码后的字符串）。

    Returns:
        花括号里的字符串；没有 `\boxed{`、括号不配对或内容为空时返回 `None`。

    Raises:
        ValueError: `text` 不是字符串。

    Examples:
        >>> extract_boxed(r"first \boxed{80}, then \boxed{ 81 }.")
        '81'
        >>> extract_boxed(r"\boxed{81") is None
        True
    """
    if not isinstance(text, str):
        raise ValueError(f"text 应是字符串，实际是 {type(text).__name__}")
    start = text.rfind(BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(BOXED)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            inner = text[i:j].strip()
            return inner or None
    return None  # 括号没有配对：回答在 \boxed{ 之后被截停


# --8<-- [end:extract_boxed]


# --8<-- [start:parse_answer]
MARKERS = ("answer is", "Answer:", "答案是", "答案：")
# 逗号只许当千位分隔符：1,000、12,345,678；8,1 与 23,58 不是一个整数
_INTEGER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)")
# 标记之后的整数后面不能紧跟数字，也不能接逗号或小数点再接数字（81,82、81.5 读不出答案）；句末的逗号、句号可以
_AFTER_MARKER = re.compile(_INTEGER.pattern + r"(?![\d.,]*\d)")


def parse_answer(text: str) -> int | None:
    r"""回答里的整数答案：先找 `\boxed{}`，没有时找最后一个答案标记（`MARKERS`）之后紧跟的整数。

    盒子里必须恰好是一个整数（可带正负号与千位逗号，例如 `1,000`）；`\boxed{81.5}`、`\boxed{x}` 算没有答案。
    逗号只能当千位分隔符（每三位一个）：`\boxed{8,1}`、`\boxed{23,58}` 也算没有答案。
    标记之后只取紧跟的整数，它后面不能直接接数字，也不能接逗号或小数点再接数字（`Answer: 81,82`、`Answer: 81.5` 算没有答案；
    `Answer: 81, or maybe 82` 读出 81）。两样都没有时返回 `None`，不去猜文本里“最后一个数”：
    那样 `"23 + 58 = ?"` 会被读成答案 58。

    Args:
        text: 模型的回答（解码后的字符串）。

    Returns:
        整数答案，或 `None`（没有可读的答案）。

    Raises:
        ValueError: `text` 不是字符串。

    Examples:
        >>> parse_answer(r"23 + 58 = 81, so the answer is \boxed{81}.")
        81
        >>> parse_answer("The answer is 81.")
        81
        >>> parse_answer("23 + 58 = ?") is None
        True
    """
    boxed = extract_boxed(text)
    if boxed is not None:
        return int(boxed.replace(",", "")) if _INTEGER.fullmatch(boxed) else None
    if BOXED in text:  # 有盒子但没有配对（被截停）：不再退回标记
        return None
    best = max((text.rfind(m) + len(m) for m in MARKERS if m in text), default=-1)
    if best < 0:
        return None
    found = _AFTER_MARKER.match(text[best:].lstrip(" \t:：=*"))
    if found is None:
        return None
    return int(found.group().replace(",", ""))


# --8<-- [end:parse_answer]
