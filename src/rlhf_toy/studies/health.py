r"""健康与异常的训练：每种常见故障一个可复现的坏配置，和同台对比用同一个起点、同一份预算。

| 故障 | 坏配置 | 该看的指标 |
|---|---|---|
| 学习率太大 | GRPO，学习率 10 | 熵第 1 步就大跌，真实奖励先猛涨再跌到 0，之后每组奖励全相同 |
| 符号写反 | REINFORCE，损失 = +目标（等价于奖励取反） | 真实奖励单调下降，KL 只缓慢上升 |
| 偏好对标反 | DPO，被选与被拒对调 | `rewards/margins` 照样变大，真实奖励却降到 0 |
| 组内奖励全相同 | GRPO，奖励函数恒为 0（例如答案格式对不上、解析总失败） | `frac_reward_zero_std` 恒为 1，什么也学不到 |
| 不加 KL 优化有偏的奖励模型 | PPO，`kl_coef=0` | 代理奖励一路上升，真实奖励先升后降 |
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from rlhf_toy._checks import check_choice
from rlhf_toy.studies.comparison import (
    Budget,
    _setup,
    make_evaluator,
    reference_preference_pairs,
    single_thread,
)
from rlhf_toy.studies.overoptimisation import run_overoptimisation
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


class ZeroRewardTask:
    """奖励函数恒为 0 的任务（例如奖励函数解析答案的格式与模型的输出对不上，每次都判错）。

    Args:
        task: 原任务（提示词与评估照旧）。
    """

    def __init__(self, task: BanditTask):
        self.task = task

    def prompts(self) -> Tensor:
        """同原任务。"""
        return self.task.prompts()

    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """恒为 0，形状 `(B,)`。"""
        return 0.0 * self.task.reward(prompts, completions)


def run_zero_variance(seed: int, budget: Budget) -> list[dict]:
    """GRPO，奖励函数恒为 0：每组奖励全相同，组内相对优势恒为 0；策略等于参考模型时 k3 项的梯度也为 0。

    （TRL 的 `GRPOConfig` 拒绝 `num_generations < 2`，所以不用“每组一个回答”来造这个故障。）
    `success_prob` 等仍按真实任务精确计算；`frac_reward_zero_std` 按训练实际用的奖励算：
    式 (cmp-zero-std) 里答对（得 1 分）的概率 $p_x = 0$，所以恒为 1，这也是训练日志里会看到的值。
    """
    task, policy, ref = _setup(seed)
    G = budget.num_generations
    config = GRPOConfig(num_generations=G, learning_rate=budget.learning_rate, steps=budget.steps)
    evaluate = make_evaluator(task, ref, G)

    def evaluate_broken(p):  # noqa: ANN001, ANN202 - TablePolicy
        return {**evaluate(p), "frac_reward_zero_std": 1.0}  # p_x = 0：每组都全为 0

    return train_grpo(policy, ZeroRewardTask(task), config, ref, evaluate_broken)


def run_no_kl(seed: int, budget: Budget) -> list[dict]:
    """PPO，`kl_coef=0`，优化有偏的奖励模型（见 `overoptimisation`）；步数同在线算法。"""
    return run_overoptimisation("ppo", beta=0.0, seed=seed, steps=budget.steps)


BROKEN: dict[str, tuple[str, str, Callable[[int, Budget], list[dict]]]] = {
    "lr_too_high": ("grpo", "学习率 10", run_lr_too_high),
    "wrong_sign": ("reinforce", "损失 = +目标", run_wrong_sign),
    "swapped_pairs": ("dpo", "被选/被拒对调", run_swapped_pairs),
    "zero_variance": ("grpo", "奖励函数恒为 0", run_zero_variance),
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
