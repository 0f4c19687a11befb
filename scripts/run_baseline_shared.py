"""第 2 章的基线问题在共享参数的模型上：第 9 章的极小 Transformer，0/1 奖励，去掉基线与几种基线比，写 docs/data/baseline_shared.json。

    nice -n 10 .venv/bin/python scripts/run_baseline_shared.py     # 写缓存（单线程，约四分钟 CPU 时间）

每个种子做一次第 9 章的热启动（`warm_start(seed)`），之后从同一个热启动、同样的随机数出发，只换优势的算法（见 `RUNS`）：

* `none`、`mean`、`rloo` 与 `none+1`（奖励加 1、不减基线）用第 2 章的 `train_reinforce`（它的 `baseline` 与
  `reward_offset` 选项），组大小、学习率与第 9 章快速版的 GRPO 相同（$G = 8$，Adam，学习率 5e-4，`beta=0`）；
* `grpo` 是第 9 章快速版的 GRPO 本身（`train_grpo` 与 `grpo_config`：组内均值与标准差、`dapo` 汇总）。

两个训练循环都只调用，不改。评估只做留出集上的贪心解码（`task.evaluate(policy)`，不用全局随机数，
所以评估不改变之后的训练样本）。缓存记着它来自哪份代码（`code_hash`：HASHED 里的源文件与本脚本，去掉文档字符串
与注释之后的 SHA-256）；`tests/test_baseline_shared.py` 检查哈希，并对着缓存检查第 2 章关于这次对照的句子。
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from run_tiny_lm import HASHED as TINY_LM_HASHED  # noqa: E402 - rlhf_toy.demos.tiny_lm 导入的全部模块

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy._code_hash import script_hash  # noqa: E402
from rlhf_toy._threads import single_thread  # noqa: E402
from rlhf_toy.demos.tiny_lm import grpo_config, warm_start  # noqa: E402
from rlhf_toy.train.grpo import train_grpo  # noqa: E402
from rlhf_toy.train.reinforce import ReinforceConfig, train_reinforce  # noqa: E402

CACHE = ROOT / "docs" / "data" / "baseline_shared.json"
HASHED = [*TINY_LM_HASHED, "train/reinforce.py", "losses/pg.py"]  # tests/test_cache_keys.py checks the list
SEEDS = (0, 1, 2, 3, 4)
STEPS = 200  # 第 9 章快速版的两倍（快速版 100 步）
EVAL_AT = (10, 25, 50, 100, 200)  # 在这些步之后评估（第 0 步是热启动之后）
RUNS = {  # 名字 → train_reinforce 的 (baseline, reward_offset)；None 表示第 9 章的 GRPO
    "none": ("none", 0.0),
    "rloo": ("rloo", 0.0),
    "mean": ("mean", 0.0),
    "grpo": None,
    "none+1": ("none", 1.0),
}


def code_hash() -> str:
    """HASHED 里的源文件与本脚本去掉文档字符串与注释之后的 SHA-256。"""
    return script_hash(HASHED, __file__)


def train_one(name: str, seed: int, task, start) -> list[dict]:
    """从热启动 `start` 的副本出发训练 `STEPS` 步，返回第 0 步与 `EVAL_AT` 各步的评估。

    Args:
        name: `RUNS` 里的名字。
        seed: 全局随机种子（采样用；任务的抽题用它自带的生成器，这里复制一份，各次运行抽到同样的题）。
        task: 热启动返回的加法任务（不改它）。
        start: 热启动之后的策略（不改它）。

    Returns:
        每次评估一项：`step`、`accuracy`（留出集贪心正确率）、`reward`（从上次评估到这一步，训练批的平均 0/1 奖励，
        不含偏移；第 0 步没有）。
    """
    policy, task = copy.deepcopy(start), copy.deepcopy(task)
    rows = [{"step": 0, "accuracy": task.evaluate(policy)["accuracy"]}]
    calls = []

    def evaluate(p):  # 两个循环每步都调用；只在 EVAL_AT 的步真正评估
        calls.append(1)
        return {"accuracy": task.evaluate(p)["accuracy"]} if len(calls) in EVAL_AT else {}

    torch.manual_seed(seed)
    if RUNS[name] is None:
        config = grpo_config(quick=True, steps=STEPS, max_completion_length=task.max_completion_length)
        history = train_grpo(policy, task, config, evaluate=evaluate)
        offset = 0.0
    else:
        baseline, offset = RUNS[name]
        config = ReinforceConfig(
            num_generations=8, baseline=baseline, beta=0.0, learning_rate=5e-4, steps=STEPS, reward_offset=offset
        )
        history = train_reinforce(policy, task, config, evaluate=evaluate)
    previous = 0
    for step in EVAL_AT:
        window = [h["reward"] - offset for h in history[previous:step]]
        rows.append({"step": step, "accuracy": history[step - 1]["accuracy"], "reward": sum(window) / len(window)})
        previous = step
    return rows


def main() -> int:
    start_time = time.process_time()
    runs: dict[str, dict[str, list[dict]]] = {name: {} for name in RUNS}
    with single_thread():
        for seed in SEEDS:
            task, start = warm_start(seed)
            for name in RUNS:
                rows = train_one(name, seed, task, start)
                runs[name][str(seed)] = [{k: round(v, 4) for k, v in r.items()} | {"step": r["step"]} for r in rows]
                print(f"seed {seed} {name:>7}: " + "  ".join(f"{r['accuracy']:.3f}" for r in rows), flush=True)
    seconds = round(time.process_time() - start_time, 1)
    out = {
        "code_hash": code_hash(),
        "seeds": list(SEEDS),
        "steps": STEPS,
        "eval_at": [0, *EVAL_AT],
        "cpu_seconds": seconds,
        "runs": runs,
    }
    CACHE.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)} in {seconds} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
