r"""诊断训练日志：读 TRL 的 `log_history` / `trainer_state.json` 或本书训练循环的历史，按明确的规则报告症状。

```py
from rlhf_toy.diagnose import diagnose

print(diagnose("outputs/trainer_state.json"))   # 或 diagnose(trainer.state.log_history)
```

命令行：`python -m rlhf_toy diagnose path/to/trainer_state.json`。

- `history`：读日志，检查坏输入（空日志、NaN、不是数的值、不是日志的文件）。
- `rules`：每个症状一条规则，阈值与理由在各规则的 docstring 里。
- `report`：判断日志种类、运行规则、列出缺少与未识别的指标，`Diagnosis` 打印中文报告。
"""

from rlhf_toy.diagnose.history import History, read_history
from rlhf_toy.diagnose.report import Diagnosis, diagnose, log_kind
from rlhf_toy.diagnose.rules import RULES, Finding, Rule

__all__ = ["RULES", "Diagnosis", "Finding", "History", "Rule", "diagnose", "log_kind", "read_history"]
