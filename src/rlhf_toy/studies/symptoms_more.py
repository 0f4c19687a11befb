r"""第 14 章（续）的症状运行：DPO、奖励与数值。每个症状一个函数，同一个函数换一个参数就是对照或健康运行。

全部在第 8 章的老虎机上（20 个提示词、8 个回答、每个提示词一个正确回答；种子 0 的任务与初始策略），
每步更新后精确评估（`make_evaluator`：`success_prob` 是真实的答对概率，没有评估噪声）。

| 症状 | 函数 | 症状运行 | 对照 / 治疗（健康运行） |
|---|---|---|---|
| DPO 被选回答的对数概率下降 | `run_dpo_ties` | 两个错误回答的平局对按抛硬币标注 | 丢掉平局对 |
| 奖励上升、正确率不升 | `run_reward_hacking` | GRPO 优化有偏的奖励模型，$\beta = 0$ | 真实奖励；$\beta > 0$ |
| 梯度范数尖峰 | `run_grad_spike` | 奖励函数偶尔返回离群值，优势不缩放 | 没有离群值；或优势按组标准化 |
| 采样器与训练器不一致 | `run_sampler_mismatch` | 采样器只在 top-4 里采样 | 不过滤 |
| 截断比例高 | `run_clip_high` | 每批样本上 8 步（学习率 0.1） | 每批 1、2、4 步 |
"""

# --8<-- [start:imports]
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_nonnegative
from rlhf_toy.estimators.advantages import group_advantages
from rlhf_toy.estimators.importance import importance_metrics, importance_weights
from rlhf_toy.losses.aggregate import aggregate_loss
from rlhf_toy.losses.grpo import clipped_surrogate
from rlhf_toy.policies.table import TablePolicy
from rlhf_toy.rollout.samplers import temperature_logps, top_k_logps
from rlhf_toy.studies.comparison import _setup, make_evaluator, single_thread
from rlhf_toy.studies.overoptimisation import ProxyRewardTask, biased_preference_pairs, make_setup, proxy_and_true
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train import DPOConfig, GRPOConfig, train_dpo, train_grpo
from rlhf_toy.train.dpo import sequence_logps

G = 4
"""组大小（第 8 章的同台对比也用 4）。"""

# --8<-- [end:imports]


# --8<-- [start:grad_norm]
def grad_norm(policy: TablePolicy) -> float:
    r"""这一步更新所用梯度的全局 L2 范数（transformers `Trainer` 记录的 `grad_norm`：限幅之前的范数）。

    本书的训练循环在 `optimizer.step()` 之后调用 `evaluate(policy)`，这时参数的 `.grad` 还是这一步的梯度。

    Args:
        policy: 刚更新过的策略。

    Returns:
        $\sqrt{\sum_i g_i^2}$，Python 浮点数；没有梯度时为 0。
    """
    squares = sum((p.grad.double() ** 2).sum().item() for p in policy.parameters() if p.grad is not None)
    return math.sqrt(squares)


def with_grad_norm(evaluate: Callable[[TablePolicy], dict]) -> Callable[[TablePolicy], dict]:
    """给评估函数加上 `grad_norm`（见 `grad_norm`）。"""
    return lambda policy: {"grad_norm": grad_norm(policy), **evaluate(policy)}


# --8<-- [end:grad_norm]


# --8<-- [start:dpo_ties]
def run_dpo_ties(ties: str = "coin_flip", seed: int = 0, steps: int = 60, learning_rate: float = 0.1) -> list[dict]:
    r"""DPO，偏好对来自一个只认正确回答的标注员：每个提示词 28 对随机回答，含正确回答的一对按正确与否标注。

    两条都错的一对没有真正的偏好。`ties="coin_flip"` 时标注员抛硬币决定哪条是被选回答（保留这些对）；
    `ties="dropped"` 时丢掉它们（同 `reference_preference_pairs` 丢掉平局的做法），其余完全相同。

    Args:
        ties: `"coin_flip"` 或 `"dropped"`。
        seed: 任务与初始策略的种子（`_setup`）。
        steps: 全批梯度步数。
        learning_rate: Adam 学习率。

    Returns:
        每步一项：`train_dpo` 的指标、TRL 的 `logps/chosen` 与 `logps/rejected`（这一步更新之前、整条回答对数概率的
        批平均）与精确评估（`success_prob` 等）。
    """
    check_choice("ties", ties, ("coin_flip", "dropped"))
    task, policy, ref = _setup(seed)
    wrong = (task.correct + 1) % task.n_answers  # 不给诱饵加分（decoy_bias=0），它只是一个普通的错误回答
    prompts, chosen, rejected = biased_preference_pairs(task, wrong, decoy_bias=0.0)
    if ties == "dropped":
        keep = (chosen[:, 0] == task.correct[prompts]) | (rejected[:, 0] == task.correct[prompts])
        prompts, chosen, rejected = prompts[keep], chosen[keep], rejected[keep]
    config = DPOConfig(learning_rate=learning_rate, steps=steps)
    evaluate = make_evaluator(task, ref, G)

    def batch_logps(p: TablePolicy) -> dict[str, float]:  # 整条回答对数概率的批平均（TRL 的 logps/*）
        with torch.no_grad():
            return {
                "logps/chosen": sequence_logps(p, prompts, chosen).mean().item(),
                "logps/rejected": sequence_logps(p, prompts, rejected).mean().item(),
            }

    before = batch_logps(policy)
    with single_thread():
        history = train_dpo(policy, (prompts, chosen, rejected), config, ref, lambda p: batch_logps(p) | evaluate(p))
    # TRL 记的是这一步更新**之前**的值；全批训练时它就是上一步更新之后的值
    shifted = [before] + [{k: h[k] for k in before} for h in history[:-1]]
    return [{**h, **pre} for h, pre in zip(history, shifted, strict=True)]


# --8<-- [end:dpo_ties]


# --8<-- [start:reward_hacking]
def run_reward_hacking(reward: str = "proxy", beta: float = 0.0, seed: int = 0, steps: int = 80) -> list[dict]:
    r"""GRPO 优化第 8 章有偏的奖励模型（`reward="proxy"`）或真实奖励（`"true"`），每步精确评估真实正确率。

    同 `run_overoptimisation("grpo", ...)`：参考模型是“SFT 之后”的策略，学习率 0.05，$G = 4$。

    Args:
        reward: `"proxy"`（奖励模型的分）或 `"true"`（可验证奖励）。
        beta: KL 系数。
        seed: 种子（`make_setup(seed)`，训练采样用 `seed + 10_000`）。
        steps: 采样—更新的轮数。

    Returns:
        每步一项：`reward`（本批训练奖励）、`kl` 等与 `proxy_and_true` 的键（`success_prob` 是真实正确率）。
    """
    check_choice("reward", reward, ("proxy", "true"))
    check_nonnegative("beta", beta)
    setup = make_setup(seed)
    policy = TablePolicy(setup.reference.logits)
    torch.manual_seed(seed + 10_000)
    task = ProxyRewardTask(setup.task, setup.reward_model) if reward == "proxy" else setup.task
    config = GRPOConfig(num_generations=G, beta=beta, learning_rate=0.05, steps=steps)
    with single_thread():
        return train_grpo(policy, task, config, setup.reference, lambda p: proxy_and_true(setup, p))


# --8<-- [end:reward_hacking]


# --8<-- [start:grad_spike]
class OutlierRewardTask:
    """奖励函数的一个 bug：提示词 0 的一个错误回答得 `outlier` 分（例如解析失败时返回了一个哨兵值），其余同原任务。

    Args:
        task: 原任务。
        outlier: 那个回答得到的奖励。
    """

    def __init__(self, task: BanditTask, outlier: float):
        self.task, self.outlier = task, outlier
        self.answer = int((task.correct[0] + 1) % task.n_answers)

    def prompts(self) -> Tensor:
        """同原任务。"""
        return self.task.prompts()

    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """原任务的奖励，提示词 0 的那个回答改成 `outlier`，形状 `(B,)`。"""
        hit = (prompts == 0) & (completions[:, 0] == self.answer)
        return torch.where(hit, torch.tensor(self.outlier), self.task.reward(prompts, completions))


def run_grad_spike(
    outlier: float | None = 50.0, scale_rewards: str = "none", seed: int = 0, steps: int = 20
) -> list[dict]:
    r"""GRPO（`num_iterations=1`、学习率 0.1、$\beta = 0.04$），奖励函数偶尔返回离群值，记录每步的 `grad_norm`。

    Args:
        outlier: 离群的奖励值；`None` 表示没有 bug（原任务）。
        scale_rewards: 优势的缩放（`"none"` 即 Dr. GRPO 的做法；`"group"` 按组标准差缩放）。
        seed: 种子（`_setup`）。
        steps: 采样—更新的轮数。

    Returns:
        每步一项：`train_grpo` 的指标、`grad_norm`、精确评估，以及 `bug_prob`（提示词 0 上那个回答的概率；没有 bug
        的运行里它是个普通的错误回答）。
    """
    task, policy, ref = _setup(seed)
    bug = OutlierRewardTask(task, 50.0 if outlier is None else outlier)
    evaluate = with_grad_norm(make_evaluator(task, ref, G))

    def evaluate_with_bug(p: TablePolicy) -> dict[str, float]:  # 那个回答在提示词 0 上的概率
        return {**evaluate(p), "bug_prob": p.probs()[0, bug.answer].item()}

    config = GRPOConfig(
        num_generations=G, learning_rate=0.1, steps=steps, num_iterations=1, scale_rewards=scale_rewards
    )
    with single_thread():
        return train_grpo(policy, task if outlier is None else bug, config, ref, evaluate_with_bug)


# --8<-- [end:grad_spike]


# --8<-- [start:sampler_mismatch]
def train_mismatched_grpo(
    policy: TablePolicy,
    task: BanditTask,
    top_k: int | None,
    correction: str | None,
    steps: int,
    learning_rate: float = 0.1,
    evaluate: Callable[[TablePolicy], dict] | None = None,
) -> list[dict]:
    r"""GRPO，样本来自另一个采样器：$\mu$ 只在 $\pi_\theta$ 概率最大的 `top_k` 个回答里按比例采样，训练器算全部回答上的 $\pi_\theta$。

    每步：按 $\mu$ 采样、组内相对优势、训练器算 $\log\pi_{old}$；记录 TRL 的 `sampling/*` 指标
    （`importance_metrics`，权重按 `correction` 的模式算，不修正时按 `"token_truncate"` 算；TRL 只在修正开启时记录）；`correction` 不为 `None` 时把重要性权重 $\pi_{old}/\mu$（`importance_weights`，上界 3）
    乘在逐 token 损失上，同 TRL 的 `vllm_importance_sampling_correction`。`num_iterations = 1`，$\beta = 0$。

    Args:
        policy: 查表策略（原地更新）。
        task: 老虎机任务。
        top_k: 采样器的 top-k；`None` 表示不过滤（与训练器一致）。
        correction: `None`（不修正）或 `importance_weights` 的 `mode`（如 `"token_truncate"`，即 TIS）。
        steps: 采样—更新的轮数。
        learning_rate: Adam 学习率。
        evaluate: 可选，每步更新后调用。

    Returns:
        每步一项：`step`、`loss`、`reward`、`sampling/*` 的五个指标与 `evaluate` 的键。
    """
    optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate, fused=True)
    history = []
    for step in range(1, steps + 1):
        prompts = task.prompts().repeat_interleave(G)
        with torch.no_grad():
            logits = policy.logits[prompts]  # (B, V)
            sampler_logps_all = temperature_logps(logits) if top_k is None else top_k_logps(logits, top_k)
            completions = torch.multinomial(sampler_logps_all.exp(), 1)  # (B, 1)
            sampler_logps = sampler_logps_all.gather(1, completions)
            old_logps = policy.logps(prompts, completions)
        mask = torch.ones_like(old_logps)
        rewards = task.reward(prompts, completions)
        advantages = group_advantages(rewards, G)
        weights = importance_weights(old_logps, sampler_logps, mask, correction or "token_truncate", 3.0)
        logged = {"reward": rewards.mean().item(), **importance_metrics(old_logps, sampler_logps, mask, weights)}
        per_token_loss, _ = clipped_surrogate(policy.logps(prompts, completions), old_logps, advantages[:, None])
        if correction is not None:
            per_token_loss = per_token_loss * weights
        loss = aggregate_loss(per_token_loss, mask, "grpo")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append({"step": step, "loss": loss.item(), **logged, **(evaluate(policy) if evaluate else {})})
    return history


def run_sampler_mismatch(
    top_k: int | None = 4, correction: str | None = None, seed: int = 0, steps: int = 30
) -> list[dict]:
    """`train_mismatched_grpo` 在第 8 章老虎机上（种子 `seed`），每步精确评估。"""
    task, policy, ref = _setup(seed)
    with single_thread():
        return train_mismatched_grpo(policy, task, top_k, correction, steps, evaluate=make_evaluator(task, ref, G))


# --8<-- [end:sampler_mismatch]


# --8<-- [start:clip_high]
def run_clip_high(learning_rate: float = 0.1, num_iterations: int = 8, seed: int = 0, steps: int = 20) -> list[dict]:
    r"""GRPO，每批样本上做 `num_iterations` 步截断更新（$\epsilon = 0.2$，$\beta = 0.04$），另记截断的两侧。

    Args:
        learning_rate: Adam 学习率。
        num_iterations: 每批样本上的优化步数 $\mu$。
        seed: 种子（`_setup`）。
        steps: 采样—更新的轮数。

    Returns:
        每步一项：`train_grpo` 的指标（`clip_ratio` 是这批最后一次更新时被截断的 token 比例）与精确评估。
    """
    task, policy, ref = _setup(seed)
    config = GRPOConfig(
        num_generations=G, learning_rate=learning_rate, steps=steps, num_iterations=num_iterations, log_clip_sides=True
    )
    with single_thread():
        return train_grpo(policy, task, config, ref, make_evaluator(task, ref, G))


# --8<-- [end:clip_high]
