"""查表任务上的演示：种子演示（逐行复现 shared/seeds 的输出）、GRPO 与 DPO。

`quick=True`（或环境变量 `DQN_QUICK=1`）只跑很短的版本，用于快速检查。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch

from rlhf_toy.policies import TablePolicy
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train import DPOConfig, GRPOConfig, train_dpo, train_grpo

# --8<-- [end:imports]

N_PROMPTS, N_ANSWERS = 20, 8


def bandit_setup(seed: int) -> tuple[BanditTask, TablePolicy]:
    """固定随机种子，按种子演示的顺序造出任务与初始策略：先抽正确答案，再初始化 logits。

    Args:
        seed: 全局随机种子。

    Returns:
        `(task, policy)`：20 个提示词 × 8 个回答的任务，与 `0.1 * randn` 初始化的查表策略。
    """
    torch.manual_seed(seed)
    task = BanditTask.make(N_PROMPTS, N_ANSWERS)
    return task, TablePolicy.random(N_PROMPTS, N_ANSWERS)


def grpo_config(quick: bool = False) -> GRPOConfig:
    """种子演示的 GRPO 配置；快速模式只跑 20 步。

    Args:
        quick: 是否只跑短版本。

    Returns:
        配置。
    """
    return GRPOConfig(steps=20 if quick else 60)


def dpo_config(quick: bool = False) -> DPOConfig:
    """种子演示的 DPO 配置；快速模式只跑 50 步。

    Args:
        quick: 是否只跑短版本。

    Returns:
        配置。
    """
    return DPOConfig(steps=50 if quick else 200)


# --8<-- [start:seed_demo]
def run_seed(seed: int = 0, quick: bool = False) -> tuple[list[dict], list[dict]]:
    """种子演示：同一个随机种子、同样的随机数抽取顺序，先 GRPO 再 DPO，打印与种子 notebook 相同的行。

    Args:
        seed: 全局随机种子。
        quick: 是否只跑短版本。

    Returns:
        `(grpo_history, dpo_history)`。
    """
    torch.manual_seed(seed)
    task = BanditTask.make(N_PROMPTS, N_ANSWERS)

    policy = TablePolicy.random(N_PROMPTS, N_ANSWERS)
    print(f"[GRPO] 初始：正确回答的平均概率 {task.success_prob(policy):.3f}")
    grpo_history = train_grpo(policy, task, grpo_config(quick), evaluate=task.evaluate)
    for h in grpo_history[19::20]:
        print(f"[GRPO] step {h['step']:3d}：正确回答的平均概率 {h['success_prob']:.3f}，本批平均奖励 {h['reward']:.3f}")

    policy = TablePolicy.random(N_PROMPTS, N_ANSWERS)
    prompts, chosen, rejected = pairs = task.preference_pairs()

    def evaluate(p):
        probs = p.probs().detach()
        return {**task.evaluate(p), "rejected_prob": probs[prompts, rejected[:, 0]].mean().item()}

    print(f"[DPO ] 初始：正确回答的平均概率 {task.success_prob(policy):.3f}")
    dpo_history = train_dpo(policy, pairs, dpo_config(quick), evaluate=evaluate)
    for h in dpo_history[49::50]:
        print(
            f"[DPO ] step {h['step']:3d}：loss {h['loss']:.4f}，正确回答平均概率 {h['success_prob']:.3f}，"
            f"被拒绝回答平均概率 {h['rejected_prob']:.3f}"
        )
    return grpo_history, dpo_history


# --8<-- [end:seed_demo]


def run_grpo(seed: int = 0, quick: bool = False) -> list[dict]:
    """GRPO 演示：打印奖励、正确率、KL 与截断比例随训练的变化。

    Args:
        seed: 全局随机种子。
        quick: 是否只跑短版本。

    Returns:
        指标历史。
    """
    task, policy = bandit_setup(seed)
    config = grpo_config(quick)
    print(f"GRPO：{N_PROMPTS} 个提示词 × G={config.num_generations}，beta={config.beta}，epsilon={config.epsilon}")
    print(f"初始正确概率 {task.success_prob(policy):.3f}")
    history = train_grpo(policy, task, config, evaluate=task.evaluate)
    print(" step  reward  success_prob      kl  clip_ratio")
    for h in history[4::5]:
        print(f"{h['step']:5d}  {h['reward']:6.3f}  {h['success_prob']:12.3f}  {h['kl']:6.3f}  {h['clip_ratio']:10.3f}")
    return history


def run_dpo(seed: int = 0, quick: bool = False) -> list[dict]:
    """DPO 演示：打印损失与 TRL 同名的隐式奖励指标。

    Args:
        seed: 全局随机种子。
        quick: 是否只跑短版本。

    Returns:
        指标历史。
    """
    task, policy = bandit_setup(seed)
    pairs = task.preference_pairs()
    config = dpo_config(quick)
    print(f"DPO：{N_PROMPTS} 个偏好对，beta={config.beta}")
    print(f"初始正确概率 {task.success_prob(policy):.3f}")
    history = train_dpo(policy, pairs, config, evaluate=task.evaluate)
    print(" step    loss  rewards/chosen  rewards/rejected  rewards/margins  success_prob")
    for h in history[9::10] if quick else history[24::25]:
        print(
            f"{h['step']:5d}  {h['loss']:6.4f}  {h['rewards/chosen']:14.3f}  {h['rewards/rejected']:16.3f}"
            f"  {h['rewards/margins']:15.3f}  {h['success_prob']:12.3f}"
        )
    return history
