"""GRPO 家族（CISPO、SAPO……）的运行：第 8 章老虎机上的同台对比，与第 9 章极小 Transformer 上比率远离 1 时的对比。

    nice -n 10 .venv/bin/python scripts/run_ratio_shaping.py          # 完整模式：写 docs/data/ratio_shaping_runs.json
    .venv/bin/python scripts/run_ratio_shaping.py --quick             # 快速模式：只打印耗时与结果，不写文件

各项互不依赖，各在一个子进程里跑（第 9 章每个种子一项；CPU 秒记在缓存的 `cpu_seconds` 里）：

* `bandit`：第 8 章的 GRPO 设置（同样的 5 个种子、4800 条回答的预算），只换损失（`rlhf_toy.studies.ratio_shaping`），
  `num_iterations` 取第 8 章的 2 与更大的 8；
* `tiny_lm`：第 9 章的热启动之后，`num_iterations=4` 的 GRPO（截断）、CISPO、SAPO 与两个对照（见 `TINY_RUNS`）。

页面只读缓存。缓存记着它来自哪份代码（`code_hash`：下面 HASHED 里的源文件与本脚本，去掉文档字符串与注释之后的
SHA-256）；`tests/test_ratio_shaping_runs.py` 检查哈希，并重算老虎机上的两项。
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy._code_hash import script_hash  # noqa: E402
from rlhf_toy._threads import single_thread  # noqa: E402

CACHE = ROOT / "docs" / "data" / "ratio_shaping_runs.json"
HASHED = [  # every module the two parts import (tests/test_cache_keys.py checks the list is complete)
    "studies/ratio_shaping.py",
    "studies/comparison.py",
    "demos/tiny_lm.py",
    "train",
    "losses/aggregate.py",
    "losses/clipped_is_weight.py",
    "losses/dpo.py",
    "losses/gamma_weight.py",
    "losses/geometric_mean_ratio.py",
    "losses/grpo.py",
    "losses/length_weighted_sequence.py",
    "losses/pg.py",
    "losses/ppo.py",
    "losses/reward_model.py",
    "losses/soft_gate.py",
    "models/__init__.py",  # 文件逐个列出（不列整个目录）：models/ 里别的模块与这些运行无关
    "models/reward_table.py",
    "models/value_table.py",
    "policies/table.py",
    "policies/transformer.py",
    "tasks/addition.py",
    "tasks/bandit.py",
    "estimators/advantages.py",
    "estimators/dynamic_sampling.py",
    "estimators/entropy.py",
    "estimators/kl.py",
    "estimators/rewards.py",
]
BANDIT_NAMES = ("grpo", "cispo", "sapo", "luspo", "vespo", "gmpo")
BANDIT_ITERATIONS = (2, 8)  # 第 8 章的 num_iterations，与一个让比率明显离开 1 的值
TINY_SEEDS = (0, 1, 2)
TINY_STEPS = 60
TINY_ITERATIONS = 4
TINY_EVAL_EVERY = TINY_STEPS  # 只在最后一步评估
TINY_RUNS = {  # 名字 → 在第 9 章 grpo_config（dapo 汇总、epsilon_high=0.28、beta=0）上改的字段
    "clip": {},
    "cispo": {"loss_type": "cispo", "epsilon_high": 5.0},
    "sapo": {"loss_type": "sapo"},
    "clip_grpo_agg": {"loss_type": "grpo"},  # 对照：SAPO 按 grpo 汇总，截断换成同样的汇总
    "cispo_cap_1.28": {"loss_type": "cispo", "epsilon_high": 1.28},  # 对照：上界与截断的上界相同
}
TINY_CONTROLS = ("ratio/std", "ratio/outside", "grad/scale_mean", "grad/zeroed", "grad/capped")
WINDOW = 10  # 对照指标的时间序列：每 10 步平均一次


def code_hash() -> str:
    """HASHED 里的源文件与本脚本去掉文档字符串与注释之后的 SHA-256（只改文档字符串、注释或排版不改变它）。"""
    return script_hash(HASHED, __file__)


def r4(x: float) -> float:
    return round(float(x), 4)


def bandit_part(quick: bool) -> dict:
    """第 8 章：每个损失 × 每个 `num_iterations`，第 8 章的种子与预算（快速模式：2 个种子、默认预算）。"""
    from run_experiments import FULL, QUICK

    from rlhf_toy.studies.ratio_shaping import run_family_table

    spec = QUICK if quick else FULL
    out = {}
    for mu in BANDIT_ITERATIONS:
        table = run_family_table(BANDIT_NAMES, spec["seeds"], spec["budget"], mu)
        out[str(mu)] = {
            name: {k: (v if k == "finals" else r4(v)) for k, v in row.items()} for name, row in table.items()
        }
    return {"seeds": list(spec["seeds"]), "samples": spec["budget"].samples, "num_iterations": out}


def tiny_run(start, task, seed: int, name: str, steps: int) -> dict:
    """从热启动 `start` 出发，用 `TINY_RUNS[name]` 的损失跑 `steps` 步，返回最终评估与对照指标。"""
    import torch

    from rlhf_toy.demos.tiny_lm import grpo_config
    from rlhf_toy.train.grpo_family import GRPOFamilyConfig, train_grpo_family

    policy, task = copy.deepcopy(start), copy.deepcopy(task)
    ref = policy.frozen_copy()
    base = grpo_config(max_completion_length=task.max_completion_length, steps=steps, num_iterations=TINY_ITERATIONS)
    config = GRPOFamilyConfig(**{**base.__dict__, **TINY_RUNS[name]})
    torch.manual_seed(seed)
    history = train_grpo_family(
        policy, task, config, ref, evaluate=lambda p: task.evaluate(p, ref), eval_every=TINY_EVAL_EVERY
    )
    keys = [k for k in TINY_CONTROLS if any(k in h for h in history)]
    windows = [history[i : i + WINDOW] for i in range(0, len(history), WINDOW)]

    def mean(rows, key):  # grad/* 不出现在没有 A ≠ 0 的 token 的步里
        values = [h[key] for h in rows if key in h]
        return r4(sum(values) / len(values)) if values else None

    return {
        "evals": [
            {"step": h["step"], **{k: r4(h[k]) for k in ("accuracy", "kl", "entropy")}}
            for h in history
            if "accuracy" in h
        ],
        "reward_last10": r4(sum(h["reward"] for h in history[-10:]) / len(history[-10:])),
        "controls": {k: mean(history, k) for k in keys},
        "ratio/max": r4(max(h["ratio/max"] for h in history)),
        "ratio/min": r4(min(h["ratio/min"] for h in history)),
        "series": {k: [mean(w, k) for w in windows] for k in keys},
    }


def tiny_part(seed: int, quick: bool) -> dict:
    """第 9 章的一个种子：一次热启动，之后每个损失从同一个起点、同样的随机数出发。"""
    from rlhf_toy.demos.tiny_lm import warm_start

    steps = 4 if quick else TINY_STEPS
    with single_thread():
        task, start = warm_start(seed)
        sft = r4(task.evaluate(start)["accuracy"])
        runs = {name: tiny_run(start, task, seed, name, steps) for name in TINY_RUNS}
    return {"steps": steps, "sft_accuracy": sft, "runs": runs}


def _part(name: str, quick: bool):
    """在子进程里跑一项（`bandit` 或 `tiny_lm/<种子>`），返回 `(结果, CPU 秒)`。"""
    t0 = time.process_time()
    result = bandit_part(quick) if name == "bandit" else tiny_part(int(name.split("/")[1]), quick)
    return result, round(time.process_time() - t0, 1)


PARTS = ("bandit", *(f"tiny_lm/{seed}" for seed in TINY_SEEDS))


def run(quick: bool, jobs: int) -> dict:
    """各项分给 `jobs` 个子进程（spawn：子进程重新导入本脚本，数值设置照样生效）；第 9 章的各种子合成一项。"""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    parts = PARTS[:2] if quick else PARTS
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {name: pool.submit(_part, name, quick) for name in parts}
        done = {name: f.result() for name, f in futures.items()}
    seeds = [int(name.split("/")[1]) for name in parts if name != "bandit"]
    tiny = {str(seed): done[f"tiny_lm/{seed}"][0] for seed in seeds}
    out = {
        "bandit": done["bandit"][0],
        "tiny_lm": {
            "seeds": seeds,
            "steps": tiny[str(seeds[0])]["steps"],
            "num_iterations": TINY_ITERATIONS,
            "sft_accuracy": {s: t["sft_accuracy"] for s, t in tiny.items()},
            "runs": {name: {s: t["runs"][name] for s, t in tiny.items()} for name in TINY_RUNS},
        },
        "cpu_seconds": {name: seconds for name, (_, seconds) in done.items()},
    }
    print(json.dumps(out["cpu_seconds"]), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="快速模式：只打印，不写缓存")
    ap.add_argument("--jobs", type=int, default=len(PARTS), help="并行的子进程数（默认每项一个）")
    args = ap.parse_args()
    results = run(args.quick, args.jobs)
    if args.quick:
        print(json.dumps(results, ensure_ascii=False)[:3000])
        return 0
    data = {"generated_by": "scripts/run_ratio_shaping.py", "code_hash": code_hash(), **results}
    CACHE.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
