r"""健康与异常的训练：每种常见故障一个可复现的坏配置，和同台对比用同一个起点、同一份预算。

| 故障 | 坏配置 | 该看的指标 |
|---|---|---|
| 学习率太大 | GRPO，学习率 10 | 熵第 1 步就大跌，真实奖励先猛涨再跌到 0，之后每组奖励全相同 |
| 符号写反 | REINFORCE，损失 = +目标（等价于奖励取反） | 真实奖励单调降到 0，KL 照样上升 |
| 偏好对标反 | DPO，被选与被拒对调 | `rewards/margins` 照样变大，真实奖励却降到 0 |
| 组内奖励全相同 | GRPO，`num_generations=1` | `frac_reward_zero_std` 恒为 1，什么也学不到 |
| 不加 KL 优化有偏的奖励模型 | PPO，`kl_coef=0` | 代理奖励一路上升，真实奖励先升后降 |
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from rlhf_toy._checks import check_choice
from rlhf_toy.experiments.compare import (
    Budget,
    _setup,
    make_evaluator,
    reference_preference_pairs,
    single_thread,
)
from rlhf_toy.experiments.overoptimisation import run_overoptimisation
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train import DPOConfig, GRPOConfig, ReinforceConfig, train_dpo, train_grpo, train_reinforce

# --8<-- [end:imports]


class NegatedRewardTask:
    """奖励取反的任务：对 REINFORCE（无基线）而言，这与把损失写成 +目标完全等价。

    Args:
        task: 原任务。
    """

    def __init__(self, task: BanditTask):
        self.task = task

    def prompts(self) -> Tensor:
        """同原任务。"""
        return self.task.prompts()

    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """原奖励的相反数，形状 `(B,)`。"""
        return -self.task.reward(prompts, completions)

    def evaluate(self, policy) -> dict[str, float]:  # noqa: ANN001 - any Policy
        """原任务的评估。"""
        return self.task.evaluate(policy)


# --8<-- [start:broken]
def run_lr_too_high(seed: int, budget: Budget) -> list[dict]:
    """GRPO，学习率 10（正常是 `budget.learning_rate`）。"""
    task, policy, ref = _setup(seed)
    G = budget.num_generations
    config = GRPOConfig(num_generations=G, learning_rate=10.0, steps=budget.steps)
    return train_grpo(policy, task, config, ref, make_evaluator(task, ref, G))


def run_wrong_sign(seed: int, budget: Budget) -> list[dict]:
    """REINFORCE，损失写成 +目标（用奖励取反的任务实现，二者对无基线的 REINFORCE 完全等价）。"""
    task, policy, ref = _setup(seed)
    G = budget.num_generations
    config = ReinforceConfig(num_generations=G, learning_rate=budget.learning_rate, steps=budget.steps)
    history = train_reinforce(policy, NegatedRewardTask(task), config, ref, make_evaluator(task, ref, G))
    return [{**h, "reward": -h["reward"]} for h in history]  # 日志里记真实奖励


def run_swapped_pairs(seed: int, budget: Budget) -> list[dict]:
    """DPO，被选回答与被拒回答对调（数据管道里常见的列名错位）。"""
    task, policy, ref = _setup(seed)
    (prompts, chosen, rejected), _ = reference_preference_pairs(task, ref, budget.offline_samples)
    config = DPOConfig(learning_rate=budget.learning_rate, steps=budget.offline_steps)
    return train_dpo(
        policy, (prompts, rejected, chosen), config, ref, make_evaluator(task, ref, budget.num_generations)
    )


def run_zero_variance(seed: int, budget: Budget) -> list[dict]:
    """GRPO，`num_generations=1`：每组只有一个回答，组内相对优势恒为 0，只剩 KL 项。"""
    task, policy, ref = _setup(seed)
    config = GRPOConfig(num_generations=1, learning_rate=budget.learning_rate, steps=budget.steps)
    return train_grpo(policy, task, config, ref, make_evaluator(task, ref, 1))


def run_no_kl(seed: int, budget: Budget) -> list[dict]:
    """PPO，`kl_coef=0`，优化有偏的奖励模型（见 `overoptimisation`）；步数同在线算法。"""
    return run_overoptimisation("ppo", beta=0.0, seed=seed, steps=budget.steps)


BROKEN: dict[str, tuple[str, str, Callable[[int, Budget], list[dict]]]] = {
    "lr_too_high": ("grpo", "学习率 10", run_lr_too_high),
    "wrong_sign": ("reinforce", "损失 = +目标", run_wrong_sign),
    "swapped_pairs": ("dpo", "被选/被拒对调", run_swapped_pairs),
    "zero_variance": ("grpo", "num_generations=1", run_zero_variance),
    "no_kl": ("ppo", "kl_coef=0，有偏奖励模型", run_no_kl),
}
"""故障名 → `(算法, 坏配置, run(seed, budget) -> history)`。"""

# --8<-- [end:broken]


# --8<-- [start:run_broken]
def run_broken(name: str, seed: int = 0, budget: Budget | None = None) -> list[dict]:
    """运行一个坏配置，返回指标历史（键同 `compare.make_evaluator`，`no_kl` 另有 `proxy_reward`）。

    Args:
        name: `BROKEN` 的键。
        seed: 随机种子（与同台对比相同的起点）。
        budget: 预算；`None` 表示 `Budget()`。

    Returns:
        每步一项的指标字典列表。

    Raises:
        ValueError: 未知的故障名。
    """
    check_choice("name", name, tuple(BROKEN))
    budget = Budget() if budget is None else budget
    with single_thread():
        return BROKEN[name][2](seed, budget)


def initial_success(seed: int) -> float:
    """种子 `seed` 的初始策略的真实奖励（同台对比与坏配置共同的起点）。

    Args:
        seed: 随机种子。

    Returns:
        正确回答的平均概率。
    """
    task, policy, _ = _setup(seed)
    return task.success_prob(policy)


# --8<-- [end:run_broken]
