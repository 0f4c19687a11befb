r"""读训练日志：TRL 的 `trainer.state.log_history`、它写出的 `trainer_state.json`，或本书训练循环返回的每步指标字典列表。

读进来的日志是一张“指标 → 按步排列的数值”的表（`History`）。同一步可以有好几条记录（TRL 的训练日志与评估日志
各一条，训练结束时还有一条汇总），它们按 `step` 合并；没有 `step` 键的记录（本书某些循环之外的列表）按位置编号，
第 1 条是第 1 步。

值为 `None` 的指标当作这一步没有记录：TRL 1.16 的 `GRPOTrainer.log` 在一个指标这一段里的值全是 NaN 时记 `None`
（见 `trl/trainer/grpo_trainer.py` 的 `log`），JSON 里写成 `null`。除此之外，日志里的数必须是有限的实数：
NaN 或无穷大说明训练已经发散（或日志写坏了），诊断规则不对它们下结论，直接报错并指出第一次出现的位置。
"""

# --8<-- [start:imports]
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# --8<-- [end:imports]

# 不是指标的记账字段：不进指标表，也不算“未识别的指标”
BOOKKEEPING = ("step", "epoch")


@dataclass
class History:
    """按步排列的训练指标。

    Attributes:
        series: 指标名 → `[(step, value), ...]`，按 `step` 升序；每个指标只含它有记录的步。
        source: 日志从哪来（文件路径，或 `"log_history"`）。
        n_records: 原始记录条数（合并之前）。
        steps: 出现过的全部步，升序。
    """

    series: dict[str, list[tuple[int, float]]]
    source: str = "log_history"
    n_records: int = 0
    steps: list[int] = field(default_factory=list)

    def has(self, name: str) -> bool:
        """`name` 是否至少有一步有记录。"""
        return bool(self.series.get(name))

    def values(self, name: str) -> list[float]:
        """`name` 的值，按步升序；没有这个指标时返回空列表。"""
        return [v for _, v in self.series.get(name, [])]

    def points(self, name: str) -> list[tuple[int, float]]:
        """`name` 的 `(step, value)`，按步升序；没有这个指标时返回空列表。"""
        return list(self.series.get(name, []))

    def first(self, *names: str) -> str | None:
        """`names` 里第一个有记录的指标名（同一个量在 TRL 与本书循环里的不同名字）；都没有时返回 `None`。"""
        return next((n for n in names if self.has(n)), None)


def _number(value: object, where: str) -> float | None:
    """一条记录里的一个值 → 有限的 `float`；`None` 表示这一步没有记录。"""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} 不是数：{value!r}（{type(value).__name__}）；日志里的指标必须是实数或 null")
    x = float(value)
    if math.isnan(x):
        raise ValueError(
            f"{where} 是 NaN：训练在这里已经发散（或日志写坏了），诊断规则只读有限的数；先查这一步之前的 loss 与 grad_norm"
        )
    if math.isinf(x):
        raise ValueError(f"{where} 是 {x}：数值溢出，训练在这里已经发散；诊断规则只读有限的数")
    return x


def load_records(path: str | Path) -> list[dict]:
    """读 `trainer_state.json`（含 `log_history` 的对象），或一个 JSON 列表文件（每步一个对象）。

    Args:
        path: 文件路径。

    Returns:
        记录列表（尚未检查）。

    Raises:
        ValueError: 文件不存在、不是 JSON、或 JSON 里既没有 `log_history` 也不是列表。
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path：{str(path)!r} 不是一个存在的文件；要的是 TRL 写出的 trainer_state.json")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"path：{str(path)!r} 不是 JSON 文件（{e}）；要的是 TRL 写出的 trainer_state.json") from None
    if isinstance(data, Mapping):
        if "log_history" not in data:
            keys = "、".join(list(data)[:8])
            raise ValueError(
                f"path：{str(path)!r} 里没有 log_history（顶层键：{keys}），不是训练日志；"
                "要的是 TRL 写出的 trainer_state.json"
            )
        data = data["log_history"]
    if not isinstance(data, list):
        raise ValueError(f"path：{str(path)!r} 的日志不是列表，而是 {type(data).__name__}")
    return data


def read_history(log: str | Path | Sequence[Mapping[str, object]], source: str | None = None) -> History:
    r"""把训练日志读成 `History`。

    Args:
        log: `trainer.state.log_history`（字典列表）、本书训练循环返回的 `history`（同样是字典列表），
            或 `trainer_state.json` 的路径（`str` 或 `Path`）。
        source: 报告里写的来源；`None` 时用路径或 `"log_history"`。

    Returns:
        `History`：每个指标一列 `(step, value)`。

    Raises:
        ValueError: 文件不是日志（见 `load_records`）；日志为空；某条记录不是字典；`step` 不是正整数；
            某个值不是实数、是 NaN 或无穷大（信息里写出第几条记录、哪个键）。

    Examples:
        >>> h = read_history([{"step": 1, "reward": 0.2}, {"step": 2, "reward": 0.5, "kl": 0.01}])
        >>> h.values("reward"), h.points("kl")
        ([0.2, 0.5], [(2, 0.01)])
    """
    if isinstance(log, str | Path):
        source = source or str(log)
        records = load_records(log)
    else:
        if isinstance(log, Mapping) or not isinstance(log, Sequence):
            raise ValueError(
                f"log：要的是字典列表（trainer.state.log_history）或 trainer_state.json 的路径，实际是 {type(log).__name__}"
            )
        records = list(log)
    if not records:
        raise ValueError("log：日志是空的（没有一条记录）；训练至少要记录一步（TRL 的 logging_steps）才能诊断")
    series: dict[str, dict[int, float]] = {}
    steps = set()
    for i, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise ValueError(f"log[{i}] 不是字典，而是 {type(record).__name__}：{record!r}")
        step = record.get("step", i + 1)
        if isinstance(step, bool) or not isinstance(step, int | float) or step != int(step) or step < 0:
            raise ValueError(f"log[{i}]['step'] 不是非负整数：{step!r}")
        step = int(step)
        steps.add(step)
        for key, value in record.items():
            if key in BOOKKEEPING:
                continue
            if not isinstance(key, str):
                raise ValueError(f"log[{i}] 的键 {key!r} 不是字符串")
            x = _number(value, f"log[{i}][{key!r}]（第 {step} 步）")
            if x is not None:
                series.setdefault(key, {})[step] = x  # 同一步的同名指标：后一条为准（TRL 每步只记一次）
    return History(
        series={k: sorted(v.items()) for k, v in series.items()},
        source=source or "log_history",
        n_records=len(records),
        steps=sorted(steps),
    )
