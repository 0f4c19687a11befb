"""第 9 章的额外运行（DPO、PPO、均匀抽题的对照），写缓存 docs/data/tiny_lm_runs.json。

    nice -n 10 .venv/bin/python scripts/run_tiny_lm.py          # 完整模式：写 docs/data/tiny_lm_runs.json（几分钟）
    .venv/bin/python scripts/run_tiny_lm.py --quick             # 快速模式：只打印耗时与结果，不写文件

DPO 与 PPO 与 notebook 里的同名两节逐步相同（同一个热启动、同样的随机数、同样的步数）；均匀抽题的 GRPO
跑固定步数，不按墙钟时间跑，所以每次重跑都得到同样的数。长度一课的数在图的缓存 docs/data/tiny_lm_figures.json 里，
不在这里。这里只调用 `rlhf_toy.demos.tiny_lm` 里的函数，不改它们；三项互不依赖，各在一个子进程里跑。
页面只读缓存。缓存记着它来自哪份代码（`code_hash`：下面 HASHED 里的源文件与本脚本，去掉文档字符串与注释之后的
SHA-256）；`tests/test_tiny_lm_runs.py` 检查哈希，并重算最便宜的一项（均匀抽题热启动之后的按题型统计）。
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy._code_hash import script_hash  # noqa: E402
from rlhf_toy._threads import single_thread  # noqa: E402
from rlhf_toy.demos.tiny_lm import (  # noqa: E402
    TinyValueModel,
    errors_by_shape,
    grpo_config,
    preference_pairs_from_samples,
    warm_start,
)
from rlhf_toy.train.dpo import DPOConfig, train_dpo  # noqa: E402
from rlhf_toy.train.grpo import train_grpo  # noqa: E402
from rlhf_toy.train.ppo import PPOConfig, train_ppo  # noqa: E402

CACHE = ROOT / "docs" / "data" / "tiny_lm_runs.json"
HASHED = [  # every module rlhf_toy.demos.tiny_lm imports (tests/test_cache_keys.py checks the list is complete)
    "demos/tiny_lm.py",
    "tasks/addition.py",
    "tasks/bandit.py",
    "policies/table.py",
    "policies/transformer.py",
    "train/grpo.py",
    "train/sft.py",
    "train/dpo.py",
    "train/ppo.py",
    "losses/aggregate.py",
    "losses/dpo.py",
    "losses/grpo.py",
    "losses/ppo.py",
    "estimators/advantages.py",
    "estimators/dynamic_sampling.py",
    "estimators/entropy.py",
    "estimators/kl.py",
    "estimators/rewards.py",
]
DPO_SETTINGS = ((5e-4, 0.1), (1e-4, 0.5))  # (学习率, beta)，同 notebook
PAIR_PROMPTS = 256  # 造偏好对用的提示词数，同 notebook
DPO_STEPS = PPO_STEPS = 40  # 同 notebook
UNIFORM_GRPO_STEPS = 100  # 均匀抽题的对照：固定步数，不按墙钟时间


def code_hash() -> str:
    """HASHED 里的源文件与本脚本去掉文档字符串与注释之后的 SHA-256（只改文档字符串、注释或排版不改变它）。"""
    return script_hash(HASHED, __file__)


def r4(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 4)


def rounded(d: dict) -> dict:
    return {k: r4(v) if isinstance(v, float) else v for k, v in d.items()}


def uniform_warm_start_errors(seed: int = 0) -> dict:
    """均匀抽题的热启动之后，留出集上的正确率与按题型的错误（`errors_by_shape`）。最便宜的一项，测试会重算它。"""
    with single_thread():
        task, policy = warm_start(seed, balanced=False)
        return {"accuracy": r4(task.evaluate(policy)["accuracy"]), "errors": errors_by_shape(policy, task)}


def uniform_grpo(seed: int = 0, steps: int = UNIFORM_GRPO_STEPS) -> dict:
    """均匀抽题：热启动之后按题型统计，再跑固定步数的 GRPO（也均匀抽题），再统计一次。"""
    with single_thread():
        task, policy = warm_start(seed, balanced=False)
        before = {"accuracy": r4(task.evaluate(policy)["accuracy"]), "errors": errors_by_shape(policy, task)}
        train_grpo(policy, task, grpo_config(max_completion_length=task.max_completion_length, steps=steps))
        after = {"accuracy": r4(task.evaluate(policy)["accuracy"]), "errors": errors_by_shape(policy, task)}
    return {"steps": steps, "sft": before, "grpo": after}


def dpo_run(seed: int = 0, steps: int = DPO_STEPS, pairs_from: int = PAIR_PROMPTS) -> dict:
    """notebook 的 DPO 一节：热启动之后用模型自己的样本造偏好对（答对 ≻ 答错），两组超参数各跑 `steps` 步。"""
    import torch

    with single_thread():
        start_task, start = warm_start(seed)
        torch.manual_seed(seed)
        pairs, _ = preference_pairs_from_samples(copy.deepcopy(start), copy.deepcopy(start_task), n_prompts=pairs_from)
        pair_prompts, chosen = pairs[0], pairs[1]

        @torch.no_grad()
        def pair_accuracy(p):  # 偏好对的提示词上贪心解码的正确率
            completions, _, _ = p.generate(pair_prompts, greedy=True)
            return start_task.reward(pair_prompts, completions).mean().item()

        out = {
            "pairs": len(pair_prompts),
            "prompts": pairs_from,
            "steps": steps,
            "accuracy_before": r4(start_task.evaluate(start)["accuracy"]),
            "pair_accuracy_before": r4(pair_accuracy(start)),
            "runs": [],
        }
        for lr, beta in DPO_SETTINGS:
            policy = copy.deepcopy(start)
            ref = policy.frozen_copy()
            history = train_dpo(policy, pairs, DPOConfig(beta=beta, learning_rate=lr, steps=steps), ref_policy=ref)
            last = history[-1]
            with torch.no_grad():
                fell = (policy.logps(pair_prompts, chosen).sum(-1) < ref.logps(pair_prompts, chosen).sum(-1)).float()
            keys = ("rewards/accuracies", "rewards/chosen", "rewards/rejected", "rewards/margins")
            out["runs"].append(
                {
                    "learning_rate": lr,
                    "beta": beta,
                    **{k: r4(last[k]) for k in keys},
                    "accuracy": r4(start_task.evaluate(policy)["accuracy"]),
                    "chosen_fell": r4(fell.mean().item()),
                    "pair_accuracy": r4(pair_accuracy(policy)),
                }
            )
    return out


def ppo_run(seed: int = 0, steps: int = PPO_STEPS) -> dict:
    """notebook 的 PPO 一节：热启动之后跑 `steps` 步 PPO（价值模型与策略同样大小，用热启动的策略初始化）。"""
    import torch

    with single_thread():
        start_task, start = warm_start(seed)
        torch.manual_seed(seed)
        policy, task = copy.deepcopy(start), copy.deepcopy(start_task)
        ref = policy.frozen_copy()
        value_model = TinyValueModel(policy)
        config = PPOConfig(
            num_generations=8, kl_coef=0.01, learning_rate=3e-4, num_ppo_epochs=1, num_mini_batches=1, steps=steps
        )
        history = train_ppo(policy, value_model, task, config, ref_policy=ref)
        return {
            "steps": steps,
            "accuracy_before": r4(task.evaluate(start)["accuracy"]),
            "after": rounded(task.evaluate(policy, ref)),
            "explained_variance": r4(history[-1]["val/explained_variance"]),
        }


def _part(name: str, quick: bool):
    """在子进程里跑一项，返回 `(结果, CPU 秒)`。"""
    t0 = time.process_time()
    if name == "uniform":
        result = uniform_grpo(steps=5 if quick else UNIFORM_GRPO_STEPS)
    elif name == "dpo":
        result = dpo_run(steps=3 if quick else DPO_STEPS)
    else:
        result = ppo_run(steps=3 if quick else PPO_STEPS)
    return result, round(time.process_time() - t0, 1)


PARTS = ("uniform", "dpo", "ppo")


def run(quick: bool, jobs: int) -> dict:
    """全部运行，各项互不依赖，分给 `jobs` 个子进程（spawn：子进程重新导入本脚本，数值设置照样生效）。"""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {name: pool.submit(_part, name, quick) for name in PARTS}
        done = {name: f.result() for name, f in futures.items()}
    out = {name: result for name, (result, _) in done.items()}
    out["cpu_seconds"] = {name: seconds for name, (_, seconds) in done.items()}
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
    data = {"generated_by": "scripts/run_tiny_lm.py", "code_hash": code_hash(), **results}
    CACHE.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
