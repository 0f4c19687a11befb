r"""第 8 章的同台对比：同一个老虎机任务、同一组随机种子、同一份采样预算，训练每一种算法。

这里不重写任何损失或训练循环，只把第 2–6 章的 `train_*` 函数按统一的约定调用：

* **同一个起点**：种子 `s` 决定任务（正确答案）与初始策略（`TablePolicy.random`），所有算法都从它出发，
  参考模型都是初始策略的冻结副本；
* **同一个优化器设置**：Adam，学习率 `Budget.learning_rate`，在线算法每个提示词采样 `Budget.num_generations` 个回答；
  其余超参数（KL 系数、截断、PPO 的轮数与小批数……）取各章的默认值；
* **同一份预算**：在线算法最多采样 `Budget.samples` 条回答（每步 $n_{\text{prompts}}\times G$ 条）；
  离线算法（DPO、IPO）的偏好对也由参考模型采样、用同一个可验证奖励标注，**每个偏好对计两条回答**，
  平局（两条回答奖励相同、没有偏好可言）的那一对也计入，因为它们同样花掉了采样和打分。

每一步都在更新之后精确评估（查表策略可以精确计算）：真实奖励 `success_prob`（正确回答的平均概率）、
到参考模型的精确 KL `kl_to_ref`、策略的平均熵 `entropy`，以及组大小为 $G$ 时“组内奖励全相同”的期望比例
`frac_reward_zero_std`（这些组的组内相对优势恰为 0，见第 6 章）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice
from rlhf_toy._threads import single_thread
from rlhf_toy.models import TableValueModel
from rlhf_toy.policies import TablePolicy
from rlhf_toy.policies.table import exact_kl
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train import (
    DPOConfig,
    GRPOConfig,
    PPOConfig,
    ReinforceConfig,
    RLOOConfig,
    train_dpo,
    train_grpo,
    train_ppo,
    train_reinforce,
    train_rloo,
)

# --8<-- [end:imports]

N_PROMPTS, N_ANSWERS = 20, 8


# --8<-- [start:budget]
@dataclass(frozen=True)
class Budget:
    """一次对比里所有算法共用的预算与设置。

    Attributes:
        samples: 在线算法最多采样的回答数；步数 = `samples // (n_prompts * num_generations)`。
        num_generations: 在线算法每个提示词每步采样的回答数 $G$。
        learning_rate: 所有算法共用的 Adam 学习率。
        offline_samples: 离线算法（DPO、IPO）的数据集大小，按回答计（偏好对数的 2 倍）。
        offline_steps: 离线算法在数据集上的全批梯度步数，不随 `offline_samples` 变（第 8 章：DPO 的样本效率主要来自这些步数）。
    """

    samples: int = 1280
    num_generations: int = 4
    learning_rate: float = 0.1
    offline_samples: int = 640
    offline_steps: int = 60

    @property
    def steps(self) -> int:
        """在线算法的步数（采样—更新的轮数）。"""
        return self.samples // (N_PROMPTS * self.num_generations)


# --8<-- [end:budget]


# --8<-- [start:evaluator]
def make_evaluator(task: BanditTask, ref_policy: TablePolicy, num_generations: int) -> Callable[[TablePolicy], dict]:
    r"""每步更新后调用的精确评估（不采样，所以没有评估噪声）。

    Args:
        task: 老虎机任务。
        ref_policy: 参考模型。
        num_generations: 组大小 $G$，用来算组内奖励全相同的期望比例 $\frac1N\sum_x\big[p_x^G + (1-p_x)^G\big]$，
            $p_x$ 是提示词 $x$ 上答对的概率。

    Returns:
        `evaluate(policy) -> dict`，键为 `success_prob`、`kl_to_ref`、`entropy`、`frac_reward_zero_std`。
    """

    def evaluate(policy: TablePolicy) -> dict[str, float]:
        with torch.no_grad():
            logp = torch.log_softmax(policy.logits, -1)
            p_correct = logp.exp()[task.prompts(), task.correct]
            entropy = -(logp.exp() * logp).sum(-1).mean().item()
            zero_std = (p_correct**num_generations + (1 - p_correct) ** num_generations).mean().item()
        return {
            "success_prob": p_correct.mean().item(),
            "kl_to_ref": exact_kl(policy, ref_policy),
            "entropy": entropy,
            "frac_reward_zero_std": zero_std,
        }

    return evaluate


# --8<-- [end:evaluator]


# --8<-- [start:reference_pairs]
def reference_preference_pairs(
    task: BanditTask, policy: TablePolicy, n_samples: int
) -> tuple[tuple[Tensor, Tensor, Tensor], int]:
    """离线算法的偏好数据：从 `policy`（参考模型）给每个提示词采样若干对回答，用可验证奖励标注。

    奖励高的一条是被选回答；两条奖励相同（同对或同错）的一对没有偏好，丢掉。（消耗全局随机数生成器。）

    Args:
        task: 老虎机任务。
        policy: 采样用的策略（参考模型）。
        n_samples: 采样的回答总数，至少 `2 * n_prompts` 且为其整数倍（每个提示词同样多的偏好对）。

    Returns:
        `((prompts, chosen, rejected), n_samples)`：形状 `(M,)`、`(M, 1)`、`(M, 1)`，`M` 是留下的偏好对数；
        第二项是采样花掉的回答数（含被丢掉的平局）。

    Raises:
        ValueError: `n_samples` 不是 `2 * n_prompts` 的正整数倍。
    """
    per_prompt, rest = divmod(n_samples, 2 * task.n_prompts)
    if per_prompt < 1 or rest:
        raise ValueError(f"n_samples 应是 2 * n_prompts = {2 * task.n_prompts} 的正整数倍，实际是 {n_samples}")
    completions, _ = policy.sample(task.prompts(), 2 * per_prompt)  # (P * 2k, 1)，每个提示词的 2k 条相邻
    prompts = task.prompts().repeat_interleave(per_prompt)
    a, b = completions[0::2], completions[1::2]  # 相邻两条配成一对
    ra, rb = task.reward(prompts, a), task.reward(prompts, b)
    keep = ra != rb
    a_wins = (ra > rb)[:, None]
    chosen, rejected = torch.where(a_wins, a, b), torch.where(a_wins, b, a)
    return (prompts[keep], chosen[keep], rejected[keep]), n_samples


# --8<-- [end:reference_pairs]


# --8<-- [start:runners]
def _setup(seed: int) -> tuple[BanditTask, TablePolicy, TablePolicy]:
    """种子 `seed` 决定任务与初始策略；之后用 `seed + 10_000` 重新设种子，作为训练时的采样随机数。"""
    torch.manual_seed(seed)
    task = BanditTask.make(N_PROMPTS, N_ANSWERS)
    policy = TablePolicy.random(N_PROMPTS, N_ANSWERS)
    torch.manual_seed(seed + 10_000)
    return task, policy, policy.frozen_copy()


def _online(history: list[dict], samples_per_step: int) -> list[dict]:
    return [{**h, "samples": h["step"] * samples_per_step} for h in history]


def run_reinforce(seed: int, budget: Budget) -> list[dict]:
    """REINFORCE（第 2 章，无基线、无 KL）。"""
    task, policy, ref = _setup(seed)
    G, lr = budget.num_generations, budget.learning_rate
    config = ReinforceConfig(num_generations=G, learning_rate=lr, steps=budget.steps)
    evaluate = make_evaluator(task, ref, budget.num_generations)
    history = train_reinforce(policy, task, config, ref, evaluate)
    return _online(history, N_PROMPTS * budget.num_generations)


def run_rloo(seed: int, budget: Budget) -> list[dict]:
    """RLOO（第 2 章，留一法基线，KL 惩罚在奖励里，$\\beta = 0.05$）。"""
    task, policy, ref = _setup(seed)
    config = RLOOConfig(num_generations=budget.num_generations, learning_rate=budget.learning_rate, steps=budget.steps)
    history = train_rloo(policy, task, config, ref, make_evaluator(task, ref, budget.num_generations))
    return _online(history, N_PROMPTS * budget.num_generations)


def run_ppo(seed: int, budget: Budget) -> list[dict]:
    """PPO（第 4 章，价值表 + GAE，每批 4 轮 × 2 个小批，逐 token KL 在奖励里，用真实奖励打分）。"""
    task, policy, ref = _setup(seed)
    config = PPOConfig(num_generations=budget.num_generations, learning_rate=budget.learning_rate, steps=budget.steps)
    evaluate = make_evaluator(task, ref, budget.num_generations)
    history = train_ppo(policy, TableValueModel(N_PROMPTS), task, config, None, ref, evaluate)
    history = [{**h, "reward": h["objective/scores"], "clip_ratio": h["policy/clipfrac_avg"]} for h in history]
    return _online(history, N_PROMPTS * budget.num_generations)


def _grpo(seed: int, budget: Budget, **options: object) -> list[dict]:
    task, policy, ref = _setup(seed)
    G = budget.num_generations
    config = GRPOConfig(num_generations=G, learning_rate=budget.learning_rate, steps=budget.steps, **options)
    history = train_grpo(policy, task, config, ref, make_evaluator(task, ref, G))
    return _online(history, N_PROMPTS * G)


def run_grpo(seed: int, budget: Budget) -> list[dict]:
    """GRPO（第 6 章默认：组内标准化、k3 KL 在损失里 $\\beta = 0.04$、`num_iterations=2`）。"""
    return _grpo(seed, budget)


def run_dr_grpo(seed: int, budget: Budget) -> list[dict]:
    """Dr. GRPO：不除组内标准差（`scale_rewards="none"`），`loss_type="dr_grpo"`。

    KL 系数沿用 GRPO 的 $\beta = 0.04$。优势没有除以标准差、尺度更小，同一个 $\beta$ 相对于策略项约强一倍，
    本章的 Dr. GRPO 因此略慢（第 8 章的对照：两者都取 $\beta = 0$ 时几乎重合）。
    """
    return _grpo(seed, budget, scale_rewards="none", loss_type="dr_grpo")


def run_dapo(seed: int, budget: Budget) -> list[dict]:
    """DAPO 的损失设置：clip-higher（`epsilon_high=0.28`）、`loss_type="dapo"`、不加 KL（$\\beta = 0$）。"""
    return _grpo(seed, budget, epsilon_high=0.28, loss_type="dapo", beta=0.0)


def _offline(seed: int, budget: Budget, **options: object) -> list[dict]:
    task, policy, ref = _setup(seed)
    pairs, n_samples = reference_preference_pairs(task, ref, budget.offline_samples)
    config = DPOConfig(learning_rate=budget.learning_rate, steps=budget.offline_steps, **options)
    history = train_dpo(policy, pairs, config, ref, make_evaluator(task, ref, budget.num_generations))
    return [{**h, "samples": n_samples, "pairs": len(pairs[0])} for h in history]


def run_dpo(seed: int, budget: Budget) -> list[dict]:
    """DPO（第 5 章，$\\beta = 0.1$）：在参考模型采样、可验证奖励标注的偏好对上全批训练。"""
    return _offline(seed, budget)


def run_ipo(seed: int, budget: Budget) -> list[dict]:
    """IPO（第 5 章，`loss_type="ipo"`，$\\beta = 0.1$，目标间隔 $1/(2\\beta) = 5$）。"""
    return _offline(seed, budget, loss_type="ipo")


ALGORITHMS: dict[str, Callable[[int, Budget], list[dict]]] = {
    "reinforce": run_reinforce,
    "rloo": run_rloo,
    "ppo": run_ppo,
    "grpo": run_grpo,
    "dr_grpo": run_dr_grpo,
    "dapo": run_dapo,
    "dpo": run_dpo,
    "ipo": run_ipo,
}
"""算法名 → `run(seed, budget) -> history`。history 每步一项，含 `step`、`samples`、训练循环记录的指标与精确评估的指标。"""

OFFLINE = ("dpo", "ipo")
"""离线算法：数据一次采够，`samples` 在整个训练中不变。"""

# --8<-- [end:runners]


# --8<-- [start:run_comparison]
def run_comparison(
    algorithms: tuple[str, ...] | list[str] | None = None,
    seeds: tuple[int, ...] | list[int] = (0, 1),
    budget: Budget | None = None,
) -> list[dict]:
    """对每个算法、每个种子跑一次，返回整齐的长表：每行一个（算法，种子，步）。

    Args:
        algorithms: `ALGORITHMS` 的键；`None` 表示全部。
        seeds: 随机种子；同一个种子下所有算法的任务与初始策略相同。
        budget: 预算；`None` 表示 `Budget()`（快速模式）。

    Returns:
        行的列表，每行含 `algorithm`、`seed`、`step`、`samples`、`success_prob`、`kl_to_ref`、`entropy`、
        `frac_reward_zero_std`，以及该算法训练循环记录的其他指标。

    Raises:
        ValueError: 未知的算法名，或 `seeds` 为空。
    """
    algorithms = list(ALGORITHMS) if algorithms is None else list(algorithms)
    for name in algorithms:
        check_choice("algorithm", name, tuple(ALGORITHMS))
    if len(seeds) == 0:
        raise ValueError("seeds 不能为空：至少需要一个随机种子")
    budget = Budget() if budget is None else budget
    rows = []
    with single_thread():
        for name in algorithms:
            for seed in seeds:
                rows += [{"algorithm": name, "seed": seed, **h} for h in ALGORITHMS[name](seed, budget)]
    return rows


# --8<-- [end:run_comparison]


# --8<-- [start:offline_sweep]
def run_offline_sweep(
    algorithms: tuple[str, ...] | list[str] = OFFLINE,
    seeds: tuple[int, ...] | list[int] = (0, 1),
    sizes: tuple[int, ...] | list[int] = (160, 640),
    budget: Budget | None = None,
) -> list[dict]:
    """离线算法的“样本效率曲线”：数据集从小到大，每个大小训练一次，只取最后一步。

    在线算法的曲线是一次训练里边采样边记录；离线算法的数据是一次采够的，所以横轴上的每个点都是一次完整的训练。

    Args:
        algorithms: `OFFLINE` 里的算法名。
        seeds: 随机种子。
        sizes: 数据集大小（按回答计，见 `reference_preference_pairs`）。
        budget: 其余设置；`None` 表示 `Budget()`。

    Returns:
        长表，每行一个（算法，种子，数据集大小），内容是那次训练最后一步的指标。

    Raises:
        ValueError: 算法不是离线算法，或 `seeds`、`sizes` 为空。
    """
    for name in algorithms:
        check_choice("algorithm", name, OFFLINE)
    if len(seeds) == 0 or len(sizes) == 0:
        raise ValueError("seeds 与 sizes 都不能为空")
    budget = Budget() if budget is None else budget
    rows = []
    with single_thread():
        for name in algorithms:
            for seed in seeds:
                for size in sizes:
                    final = ALGORITHMS[name](seed, replace(budget, offline_samples=size))[-1]
                    rows.append({"algorithm": name, "seed": seed, **final})
    return rows


# --8<-- [end:offline_sweep]


# --8<-- [start:summarize]
def samples_to_target(history: list[dict], target: float) -> int | None:
    """第一次 `success_prob >= target` 时已用掉的回答数；始终达不到时返回 `None`。

    Args:
        history: 一次运行的历史（含 `samples` 与 `success_prob`）。
        target: 真实奖励的目标值。

    Returns:
        回答数或 `None`。
    """
    return next((h["samples"] for h in history if h["success_prob"] >= target), None)


def summarize(rows: list[dict], target: float = 0.9) -> list[dict]:
    """把长表汇总成每个算法一行：最终真实奖励与 KL 的均值和标准差、达到目标所用的回答数。

    Args:
        rows: `run_comparison` 的返回值。
        target: 真实奖励的目标值。

    Returns:
        每个算法一行：`algorithm`、`seeds`、`success_mean`、`success_std`、`kl_mean`、`kl_std`、
        `samples`（用掉的回答数）、`reached`（达到目标的种子数）、`to_target_median`、`to_target_min`、
        `to_target_max`（只在达到目标的种子上统计；没有则为 `None`）。标准差是样本标准差，只有一个种子时为 0。
    """
    table = []
    for name in dict.fromkeys(r["algorithm"] for r in rows):
        runs: dict[int, list[dict]] = {}
        for r in rows:
            if r["algorithm"] == name:
                runs.setdefault(r["seed"], []).append(r)
        finals = [h[-1] for h in runs.values()]
        hits = [s for s in (samples_to_target(h, target) for h in runs.values()) if s is not None]

        def std(xs: list[float]) -> float:
            return statistics.stdev(xs) if len(xs) > 1 else 0.0

        success = [f["success_prob"] for f in finals]
        kl = [f["kl_to_ref"] for f in finals]
        table.append(
            {
                "algorithm": name,
                "seeds": len(runs),
                "success_mean": statistics.fmean(success),
                "success_std": std(success),
                "kl_mean": statistics.fmean(kl),
                "kl_std": std(kl),
                "samples": max(f["samples"] for f in finals),
                "reached": len(hits),
                "to_target_median": statistics.median(hits) if hits else None,
                "to_target_min": min(hits) if hits else None,
                "to_target_max": max(hits) if hits else None,
            }
        )
    return table


# --8<-- [end:summarize]


def budget_dict(budget: Budget) -> dict:
    """预算写成普通字典（存进缓存，用来核对缓存来自哪个配置）。"""
    return asdict(budget)


def format_samples(value: float | None) -> str:
    """把回答数写成表格里的字符串：`None` 写成 “—”。"""
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.0f}"
