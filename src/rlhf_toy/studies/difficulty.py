r"""第 13 章（续）的难度筛选实验：按起始模型的通过率挑训练题，与不筛选的对照比较，步数与样本数相同。

起点同第 11 章（带草稿的加法，SFT 热启动；奖励是答案奖励加 0.2 倍格式奖励），强化学习同第 11 章的 GRPO
（每步 32 个提示词 × $G=8$，lr 5e-4，`beta=0`，`loss_type="dapo"`）。两臂只差训练题从哪里抽：

* `filtered`：从一个候选题池里只留通过率在窗口（默认 $[0.2, 0.8]$）里的题；
* `unfiltered`：整个候选题池（对照）；
* `random_subset`：从候选题池里随机抽与 `filtered` 同样多道题（第二个对照：题数相同、不看通过率）；
* `no_easy`：只去掉容易的题、保留难题（窗口 `control_window`，默认 $[0, 0.8]$；第三个对照）。

各臂的训练题都不按题型均衡抽样（`balanced=False`，与第 11 章不同，各臂相同）。
各臂的优化器步数、每步提示词数与回答数都相同；筛选另外花了 `pool_size × n` 个样本估计通过率，结果里单独记下。
完整版由 `scripts/run_settings.py` 跑，缓存在 `docs/data/your_run_settings.json`。
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from rlhf_toy._threads import single_thread
from rlhf_toy.estimators.difficulty import pass_rate_window
from rlhf_toy.estimators.pass_at_k import mean_pass_at_k
from rlhf_toy.policies.transformer import TinyTransformerPolicy
from rlhf_toy.tasks.scratchpad import ScratchpadAdditionTask, accuracy_reward
from rlhf_toy.train.grpo import GRPOConfig, train_grpo
from rlhf_toy.train.sft import SFTConfig, train_sft

# --8<-- [end:imports]

# 缓存键：这次运行导入的全部源文件（tests/test_cache_keys.py 检查不缺）
SOURCES = [
    "studies/difficulty.py",
    "estimators/difficulty.py",
    "estimators/pass_at_k.py",
    "estimators/advantages.py",
    "estimators/dynamic_sampling.py",
    "estimators/entropy.py",
    "estimators/kl.py",
    "estimators/overlong.py",
    "estimators/importance.py",
    "losses",
    "policies",
    "tasks/scratchpad.py",
    "tasks/addition.py",
    "tasks/bandit.py",
    "train/grpo.py",
    "train/sft.py",
]
ARMS = ("filtered", "unfiltered", "random_subset", "no_easy")


# --8<-- [start:pass_counts]
@torch.no_grad()
def pass_counts(policy: TinyTransformerPolicy, task: ScratchpadAdditionTask, problems: Tensor, n: int) -> Tensor:
    """每道题按温度采 `n` 个回答，数出答案正确的个数。

    Args:
        policy: 起始模型。
        task: 任务（编码提示词、给出正确答案）。
        problems: 题目，形状 `(P, 2)`。
        n: 每道题的样本数。

    Returns:
        形状 `(P,)` 的 int64 张量，取值 `0..n`。
    """
    prompts = task.encode_prompts(problems)
    completions, _ = policy.sample(prompts, n)
    correct = accuracy_reward(task.answers(prompts.repeat_interleave(n, dim=0)), completions)
    return correct.view(-1, n).sum(1).long()


# --8<-- [end:pass_counts]


def _warm_start(seed: int, sft_steps: int) -> tuple[ScratchpadAdditionTask, TinyTransformerPolicy]:
    """第 11 章的 `"scratchpad"` 热启动（lr 5e-3，每步 128 题），SFT 步数可调。"""
    torch.manual_seed(seed)
    task = ScratchpadAdditionTask(seed=seed, p_scratchpad=0.5, format_weight=0.2)
    policy = task.make_policy()
    train_sft(policy, task, SFTConfig(learning_rate=5e-3, steps=sft_steps, batch_size=128))
    return task, policy


# --8<-- [start:difficulty_run]
def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def difficulty_run(
    seed: int = 0,
    steps: int = 40,
    pool_size: int = 256,
    n: int = 16,
    window: tuple[float, float] = (0.2, 0.8),
    sft_steps: int = 300,
    control_window: tuple[float, float] = (0.0, 0.8),
) -> dict[str, Any]:
    """一个种子：热启动 → 估计候选题池的通过率 → 两臂各跑 `steps` 步 GRPO → 在留出集上评估。

    Args:
        seed: 随机种子（模型、题目划分、候选题池与采样）。
        steps: 每臂的 GRPO 步数（每步 32 个提示词 × 8 个回答）。
        pool_size: 候选题池的大小（从训练集里不放回地抽）。
        n: 估计通过率时每道题的样本数。
        window: 通过率窗口 `(low, high)`。
        sft_steps: 热启动的 SFT 步数。
        control_window: `no_easy` 臂的通过率窗口（只去掉容易的题）。

    Returns:
        `pool_rates`（候选题池通过率的直方图，按 $c$ 计数，长 `n + 1`）、`kept`（留下的题数）、
        `rate_samples`（估计通过率花的样本数）、`start`（起点在留出集上的贪心正确率与 pass@1）与每臂的结果：
        `accuracy`、`pass@1`（留出集，训练后）、`zero_std`（训练中奖励全相同的组的比例，对全部步平均）、
        `reward`（训练批平均奖励，对全部步平均）、`samples`（训练中奖励函数实际收到的回答数，逐批数出），
        以及只看答案对错（不含格式奖励）的 `all_correct` / `all_wrong`（整组全对、全错的组的比例），
        分前 5 步（`early`）与其余各步（`late`）平均。
    """
    with single_thread():
        task, policy = _warm_start(seed, sft_steps)
        order = torch.randperm(len(task.train), generator=torch.Generator().manual_seed(seed))
        pool = task.train[order[:pool_size]]
        torch.manual_seed(seed)
        counts = pass_counts(policy, task, pool, n)
        keep = pass_rate_window(counts, n, *window)
        heldout = task.heldout_prompts()

        def evaluate(p: TinyTransformerPolicy) -> dict[str, float]:
            greedy, _, _ = p.generate(heldout, greedy=True)
            acc = accuracy_reward(task.answers(heldout), greedy).mean().item()
            correct = pass_counts(p, task, task.heldout, 8)
            return {"accuracy": acc, "pass@1": mean_pass_at_k(correct, 8, [1])[1]}

        torch.manual_seed(seed + 1)
        out: dict[str, Any] = {
            "pool_rates": torch.bincount(counts, minlength=n + 1).tolist(),
            "kept": int(keep.sum()),
            "rate_samples": pool_size * n,
            "start": evaluate(policy),
        }
        config = GRPOConfig(
            num_generations=8, beta=0.0, learning_rate=5e-4, steps=steps, num_iterations=1, loss_type="dapo"
        )
        config.epsilon_high, config.max_completion_length = 0.28, 12
        subset = torch.randperm(pool_size, generator=torch.Generator().manual_seed(seed + 4))[: int(keep.sum())]
        no_easy = pass_rate_window(counts, n, *control_window)
        out["kept_no_easy"] = int(no_easy.sum())
        for arm, problems in zip(ARMS, (pool[keep], pool, pool[subset], pool[no_easy]), strict=True):
            arm_task, arm_policy = copy.copy(task), copy.deepcopy(policy)
            arm_task.train, arm_task.balanced = problems, False
            arm_task.generator = torch.Generator().manual_seed(seed + 2)
            zero_std: list[float] = []
            all_correct: list[float] = []
            all_wrong: list[float] = []
            seen = [0]
            reward_fn, answers = arm_task.reward, arm_task.answers

            def recording_reward(
                prompts: Tensor, completions: Tensor, reward_fn=reward_fn, zero_std=zero_std, seen=seen,
                all_correct=all_correct, all_wrong=all_wrong, answers=answers,
            ):  # fmt: skip
                rewards = reward_fn(prompts, completions)
                grouped = rewards.view(-1, config.num_generations)
                zero_std.append((grouped.amax(1) == grouped.amin(1)).float().mean().item())
                correct = accuracy_reward(answers(prompts), completions).view(-1, config.num_generations)
                all_correct.append((correct.amin(1) == 1).float().mean().item())
                all_wrong.append((correct.amax(1) == 0).float().mean().item())
                seen[0] += completions.shape[0]
                return rewards

            arm_task.reward = recording_reward
            torch.manual_seed(seed + 3)
            history = train_grpo(arm_policy, arm_task, config, ref_policy=arm_policy.frozen_copy())
            out[arm] = {
                **evaluate(arm_policy),
                "zero_std": sum(zero_std) / len(zero_std),
                "reward": sum(h["reward"] for h in history) / len(history),
                "samples": seen[0],
                "all_correct": {"early": _mean(all_correct[:5]), "late": _mean(all_correct[5:])},
                "all_wrong": {"early": _mean(all_wrong[:5]), "late": _mean(all_wrong[5:])},
            }
    return out


# --8<-- [end:difficulty_run]
