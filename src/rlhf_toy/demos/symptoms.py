r"""第 14 章“读懂训练日志：GRPO 的曲线”的运行（缓存脚本 `scripts/run_symptoms.py`）：第 9 章的加法任务上，每个症状一次坏运行、一次对照和一次健康运行。

本书的 GRPO 循环（`rlhf_toy.train.grpo.train_grpo`）只记 `loss`、`reward`、`kl`、`clip_ratio` 等几个量。
这里不改它，而是在它外面套两个“探针”，按 TRL 1.16 `GRPOTrainer` 的指标名，在**训练用的那一批**上补记其余的量：

- `TRLLoggedTask` 包住任务：循环每步调用一次 `reward`，它顺手记下这一批的 `reward_std`、`frac_reward_zero_std`、
  `completions/mean_length`、`completions/clipped_ratio`，以及当前策略（更新前）在这批回答上的逐 token 熵 `entropy`；
- `GradNormAdam` 是记录梯度范数的 Adam：每次 `step` 前记下全部参数梯度的二范数 `grad_norm`（不限幅）。

| 症状 | 坏运行 | 对照 / 疗法 |
|---|---|---|
| loss 恰为 0 | `loss_type="grpo"`、`beta=0`、`num_iterations=1` | 学习率为 0：loss 同样是 0，奖励却不动 |
| KL 爆炸 | 学习率 0.05（健康的 100 倍） | 学习率 5e-4 |
| 熵塌缩 | 草稿区热启动，学习率 1e-2（健康的 20 倍） | 学习率 5e-4 |
| 组内奖励全相同 | 奖励函数要求答案后面多一个 `.`（格式对不上，恒为 0） | 正确的奖励函数（同为 `beta=0`） |
| 回答长度塌缩 | 每个 token 扣 0.1 分的长度惩罚 | 不扣分 |
| 写到长度上限 | `max_completion_length=6`，比 SFT 学到的回答短 | `max_completion_length=12` |
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import Tensor

from rlhf_toy._threads import single_thread
from rlhf_toy.demos.tiny_lm import grpo_config, warm_start
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.policies.transformer import TinyTransformerPolicy, completion_mask
from rlhf_toy.tasks.addition import EOS, SCRATCH, AdditionTask
from rlhf_toy.train.grpo import train_grpo

# --8<-- [end:imports]

STEPS = 40
"""每次运行的 GRPO 步数（每步 32 个提示词 × G = 8）。"""

EVAL_EVERY = 10
"""每隔几步在留出集上评估一次贪心正确率（`accuracy`）。"""

HASHED = (
    "demos/symptoms.py",
    "demos/tiny_lm.py",
    "tasks/addition.py",
    "train/grpo.py",
    "train/dpo.py",
    "train/sft.py",
    "policies",
    "losses/aggregate.py",
    "losses/grpo.py",
    "losses/dpo.py",
    "estimators/advantages.py",
    "estimators/dynamic_sampling.py",
    "estimators/entropy.py",
    "estimators/kl.py",
    "estimators/rewards.py",
    "losses/ppo.py",
    "tasks/bandit.py",
    "train/ppo.py",
)
"""缓存键 `code_hash` 覆盖的源文件（相对 `src/rlhf_toy/`）。"""


# --8<-- [start:probes]
class TRLLoggedTask:
    """包住一个任务，在循环每次打分时按 TRL 的指标名记下这一批的统计量。

    Args:
        task: 原任务（`AdditionTask` 或它的包装）。
        policy: 正在训练的策略（算熵用；打分发生在更新之前，所以是更新前的熵，同 TRL）。
        num_generations: 每组回答数 $G$。
        reward_fn: 可选，代替 `task.reward` 的奖励函数 `reward_fn(prompts, completions) -> (B,)`。

    Attributes:
        logs: 每次打分一个字典：`reward_std`（整批奖励的无偏标准差，同 TRL 的 `nanstd(rewards)`）、
            `frac_reward_zero_std`（组内奖励标准差为 0 的组的比例）、`completions/mean_length`（含 EOS 的 token 数）、`completions/clipped_ratio`
            （写满 `max_completion_length` 仍没有 EOS 的回答比例）、`entropy`（掩码内逐 token 熵的平均，nat）。
    """

    def __init__(self, task: Any, policy: TinyTransformerPolicy, num_generations: int, reward_fn: Any = None):
        self.task, self.policy, self.G = task, policy, num_generations
        self.reward_fn = task.reward if reward_fn is None else reward_fn
        self.logs: list[dict[str, float]] = []

    def prompts(self) -> Tensor:
        """同原任务。"""
        return self.task.prompts()

    @torch.no_grad()
    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """打分，并记下这一批的 TRL 指标；返回形状 `(B,)` 的奖励。"""
        rewards = self.reward_fn(prompts, completions)
        mask = completion_mask(completions, EOS)
        std = rewards.view(-1, self.G).std(dim=1)  # 各组的标准差，同 TRL 判断 is_std_zero 用的 std_rewards
        finished = (completions == EOS).any(dim=1)
        entropy = masked_mean(self.policy.entropy(prompts, completions), mask)
        self.logs.append(
            {
                "reward_std": rewards.std().item(),
                "frac_reward_zero_std": (std == 0).float().mean().item(),
                "completions/mean_length": mask.sum(1).mean().item(),
                "completions/clipped_ratio": (~finished).float().mean().item(),
                "entropy": entropy.item(),
            }
        )
        return rewards


class GradNormAdam(torch.optim.Adam):
    """每次 `step` 之前记下全部参数梯度的二范数（`grad_norm`，不限幅）的 Adam。"""

    def __init__(self, params: Any, lr: float):
        super().__init__(params, lr=lr, fused=True)
        self.grad_norms: list[float] = []

    def step(self, closure: Any = None) -> Any:
        """记下梯度范数，再做一步 Adam。"""
        squares = sum(p.grad.pow(2).sum().item() for g in self.param_groups for p in g["params"] if p.grad is not None)
        self.grad_norms.append(math.sqrt(squares))
        return super().step(closure)


# --8<-- [end:probes]


def _run(task: AdditionTask, policy: TinyTransformerPolicy, reward_fn: Any = None, **overrides: Any) -> list[dict]:
    """从 `policy` 的副本出发跑 `STEPS` 步 GRPO，返回合并了探针指标的历史。

    第一条是训练前的评估（`{"step": 0, "accuracy": ...}`），之后每步一条（另有 `grad_norm`，评估步有 `accuracy`）。
    """
    task, policy = copy.deepcopy(task), policy.frozen_copy()  # 每次运行从同样的任务状态出发，互不影响
    for p in policy.parameters():
        p.requires_grad_(True)
    ref = policy.frozen_copy()
    max_len = overrides.pop("max_completion_length", task.max_completion_length)
    policy.max_completion_length = max_len
    config = grpo_config(True, steps=STEPS, max_completion_length=max_len, **overrides)
    logged = TRLLoggedTask(task, policy, config.num_generations, reward_fn)
    optimizer = GradNormAdam(policy.parameters(), config.learning_rate)

    def evaluate(p: TinyTransformerPolicy) -> dict[str, float]:
        return {"accuracy": task.evaluate(p)["accuracy"]}

    start = {"step": 0, **evaluate(policy)}  # 训练前评估一次（同 TRL 的 eval_on_start），贪心解码不动随机数
    torch.manual_seed(1)
    history = train_grpo(
        policy, logged, config, ref_policy=ref, evaluate=evaluate, optimizer=optimizer, eval_every=EVAL_EVERY
    )
    steps_with_update = iter(optimizer.grad_norms)
    for record, extra in zip(history, logged.logs, strict=True):
        record.update(extra)
        record["grad_norm"] = next(steps_with_update)
    return [start, *history]


def _suffix_reward(task: AdditionTask):
    """有错的奖励函数：要求回答在答案与 EOS 之间多写一个 `.`（格式对不上），所以几乎总给 0 分。"""

    def reward(prompts: Tensor, completions: Tensor) -> Tensor:
        out = torch.zeros(len(completions))
        for i, row in enumerate(completions.tolist()):
            if EOS in row and row.index(EOS) >= 1 and row[row.index(EOS) - 1] == SCRATCH:
                trimmed = row[: row.index(EOS) - 1] + [EOS]
                out[i] = task.reward(prompts[i : i + 1], torch.tensor([trimmed]))[0]
        return out

    return reward


def _length_penalty(task: AdditionTask, per_token: float):
    """正确性奖励减去每个 token `per_token` 分的长度惩罚。"""

    def reward(prompts: Tensor, completions: Tensor) -> Tensor:
        return task.reward(prompts, completions) - per_token * completion_mask(completions, EOS).sum(1)

    return reward


# --8<-- [start:runs]
def symptom_runs(seed: int = 0) -> dict[str, list[dict]]:
    """第 14 章的全部运行：两个 SFT 热启动（无草稿区；草稿区最多 8 个 `.`），之后十次 40 步的 GRPO。

    Args:
        seed: 热启动与任务的随机种子。

    Returns:
        运行名 → 指标历史（第 0 步是训练前的评估；之后每步一个字典，键名同 TRL 1.16 的 GRPO 日志，另有评估步的 `accuracy`）。
    """
    runs = {}
    with single_thread():
        task, policy = warm_start(seed)
        runs["healthy"] = _run(task, policy, beta=0.04)
        runs["loss_zero"] = _run(task, policy, loss_type="grpo")
        runs["loss_zero_lr0"] = _run(task, policy, loss_type="grpo", learning_rate=0.0)
        runs["kl_explodes"] = _run(task, policy, beta=0.04, learning_rate=5e-2)
        runs["zero_std"] = _run(task, policy, reward_fn=_suffix_reward(task))
        runs["zero_std_control"] = _run(task, policy)  # 与 zero_std 只差奖励函数（同为 beta=0）
        task, policy = warm_start(seed, scratch=8)
        runs["scratch_healthy"] = _run(task, policy)
        runs["entropy_collapse"] = _run(task, policy, learning_rate=1e-2)
        runs["length_collapse"] = _run(task, policy, reward_fn=_length_penalty(task, 0.1))
        runs["truncation"] = _run(task, policy, max_completion_length=6)
    return runs


# --8<-- [end:runs]
