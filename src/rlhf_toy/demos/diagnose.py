"""第 14 章的命令：`python -m rlhf_toy diagnose PATH`，诊断读者自己的训练日志（`trainer_state.json`）。"""

from __future__ import annotations

from pathlib import Path

from rlhf_toy.diagnose import Diagnosis, diagnose


def run_diagnose(path: str | Path, accuracy_metric: str | None = None) -> Diagnosis:
    """读 `path` 处的训练日志，打印中文诊断报告并返回它。

    Args:
        path: TRL 写出的 `trainer_state.json`（`trainer.save_state()` 或检查点目录里的那个），
            或每步一个指标对象的 JSON 列表。
        accuracy_metric: 留出集正确率的指标名，见 `rlhf_toy.diagnose.diagnose`。

    Returns:
        `Diagnosis`。

    Raises:
        ValueError: 文件不存在、不是训练日志，或日志里有 NaN、不是数的值（见 `rlhf_toy.diagnose.read_history`）。
    """
    result = diagnose(path, accuracy_metric=accuracy_metric)
    print(result)
    return result
