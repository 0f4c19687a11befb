r"""第 8 章同台对比里的 GRPO 家族：同一个老虎机任务、同样的种子与预算，只换策略损失（CISPO、SAPO、LUSPO、VESPO、GMPO）。

设置全部取自 `rlhf_toy.studies.comparison` 的 GRPO 一行（组内标准化、$\beta = 0.04$、Adam 学习率 0.1、$G = 4$），
只改 `loss_type` 和各损失自己的参数（默认值见 `FAMILY`），所以 `loss_type="grpo"`、`num_iterations=2` 时
`run_family` 与第 8 章的 `run_grpo` 逐位相同。`num_iterations` 是唯一另加的旋钮：比率只在同一批上的第二次及以后的
更新里离开 1。
"""

# --8<-- [start:imports]
from __future__ import annotations

import statistics

from rlhf_toy._checks import check_choice
from rlhf_toy._threads import single_thread
from rlhf_toy.studies.comparison import N_PROMPTS, Budget, _setup, make_evaluator
from rlhf_toy.train.grpo_family import GRPOFamilyConfig, train_grpo_family

# --8<-- [end:imports]

# --8<-- [start:family]
FAMILY: dict[str, dict] = {
    "grpo": {"loss_type": "grpo"},
    "cispo": {"loss_type": "cispo", "epsilon_high": 5.0},
    "sapo": {"loss_type": "sapo"},
    "luspo": {"loss_type": "luspo"},
    "vespo": {"loss_type": "vespo"},
    "gmpo": {"loss_type": "gmpo", "epsilon": 0.4},
}
"""名字 → `GRPOFamilyConfig` 的字段：CISPO 取 TRL docstring 推荐的上界 5，GMPO 取论文与 TRL 的 $\\epsilon = 0.4$，
其余是 TRL 1.16 的默认值；KL 系数、学习率、$G$、截断幅度（除 GMPO 外）都同第 8 章的 GRPO。"""
# --8<-- [end:family]

CONTROLS = ("ratio/std", "ratio/outside", "grad/scale_mean", "grad/zeroed", "grad/capped")
"""每步记录、在步与种子上平均后进汇总的对照指标（见 `rlhf_toy.train.grpo_family`）。"""


# --8<-- [start:run_family]
def run_family(name: str, seed: int, budget: Budget, num_iterations: int = 2) -> list[dict]:
    """第 8 章的 GRPO 设置，换成 `FAMILY[name]` 的损失，在同一批样本上更新 `num_iterations` 次。

    Args:
        name: `FAMILY` 的键。
        seed: 随机种子（任务、初始策略与采样，同 `run_grpo`）。
        budget: 预算；步数 = `budget.steps`，与 `num_iterations` 无关（样本数相同，更新次数是它的倍数）。
        num_iterations: 每批样本上的更新次数 $\\mu$（第 8 章的 GRPO 是 2）。

    Returns:
        每步一项：`train_grpo_family` 的指标、精确评估的指标与 `samples`（已用掉的回答数）。

    Raises:
        ValueError: 未知的名字，或 `num_iterations < 1`。
    """
    check_choice("name", name, tuple(FAMILY))
    if num_iterations < 1:
        raise ValueError(f"num_iterations 应至少为 1，实际是 {num_iterations}")
    task, policy, ref = _setup(seed)
    G = budget.num_generations
    config = GRPOFamilyConfig(
        num_generations=G,
        learning_rate=budget.learning_rate,
        steps=budget.steps,
        num_iterations=num_iterations,
        **FAMILY[name],
    )
    history = train_grpo_family(policy, task, config, ref, make_evaluator(task, ref, G))
    return [{**h, "samples": h["step"] * N_PROMPTS * G} for h in history]


# --8<-- [end:run_family]


# --8<-- [start:summarize_family]
def summarize_family(runs: dict[int, list[dict]]) -> dict:
    """一个（损失，`num_iterations`）在各种子上的汇总：最终真实奖励与 KL 的均值、样本标准差，对照指标的平均。

    Args:
        runs: 种子 → `run_family` 的返回值。

    Returns:
        `success_mean`、`success_std`、`kl_mean`、`kl_std`、`finals`（种子 → 最终真实奖励）、`ratio/max`（全部步与
        种子上的最大比率），以及 `CONTROLS` 里每个指标在记录了它的步与种子上的平均（损失没有记录的指标不出现）。

    Raises:
        ValueError: `runs` 为空。
    """
    if not runs:
        raise ValueError("runs 不能为空：至少需要一个种子的运行")
    finals = {seed: h[-1] for seed, h in runs.items()}
    success = [f["success_prob"] for f in finals.values()]
    kl = [f["kl_to_ref"] for f in finals.values()]
    rows = [r for h in runs.values() for r in h]
    out = {
        "success_mean": statistics.fmean(success),
        "success_std": statistics.stdev(success) if len(success) > 1 else 0.0,
        "kl_mean": statistics.fmean(kl),
        "kl_std": statistics.stdev(kl) if len(kl) > 1 else 0.0,
        "finals": {str(seed): f["success_prob"] for seed, f in finals.items()},
        "ratio/max": max(r["ratio/max"] for r in rows),
    }
    for key in CONTROLS:
        values = [r[key] for r in rows if key in r]  # grad/* 不出现在没有 A ≠ 0 的 token 的步里
        if values:
            out[key] = statistics.fmean(values)
    return out


# --8<-- [end:summarize_family]


def run_family_table(
    names: tuple[str, ...] | list[str], seeds: tuple[int, ...] | list[int], budget: Budget, num_iterations: int
) -> dict[str, dict]:
    """对每个损失、每个种子跑一次 `run_family`，返回 名字 → `summarize_family` 的结果（单线程）。

    Args:
        names: `FAMILY` 的键。
        seeds: 随机种子，非空。
        budget: 预算。
        num_iterations: 每批样本上的更新次数。

    Returns:
        名字 → 汇总。

    Raises:
        ValueError: `seeds` 为空或名字未知。
    """
    if len(seeds) == 0:
        raise ValueError("seeds 不能为空：至少需要一个随机种子")
    with single_thread():
        return {
            name: summarize_family({s: run_family(name, s, budget, num_iterations) for s in seeds}) for name in names
        }
