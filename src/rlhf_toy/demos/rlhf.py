"""第 2–4 章的演示：REINFORCE 与基线、RLOO、Bradley–Terry 奖励模型、对学到的奖励模型做 PPO。

每个函数固定随机种子、打印一张小表并返回指标历史；`quick=True` 只跑短版本。
这些张量都很小，多线程只会增加开销（机器繁忙时尤其明显），所以演示期间临时只用一个线程，结束后恢复。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._threads import single_thread
from rlhf_toy.demos.bandit import N_ANSWERS, N_PROMPTS, bandit_setup
from rlhf_toy.models import TableRewardModel, TableValueModel
from rlhf_toy.policies import TablePolicy
from rlhf_toy.policies.table import exact_kl
from rlhf_toy.studies.gradient_variance import policy_gradient_stats
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train.ppo import PPOConfig, train_ppo
from rlhf_toy.train.reinforce import ReinforceConfig, RLOOConfig, train_reinforce, train_rloo
from rlhf_toy.train.reward_model import RewardConfig, preference_accuracy, train_reward_model

# --8<-- [end:imports]


@single_thread()
def run_reinforce(seed: int = 0, quick: bool = False) -> list[dict]:
    """REINFORCE 与三种基线：先量梯度估计的偏差与方差，再看奖励整体加一个常数时训练会怎样。

    Args:
        seed: 全局随机种子。
        quick: 是否只跑短版本。

    Returns:
        训练历史的列表（每个配置一项，含 `offset`、`baseline` 与该配置的最终指标）。
    """
    task, policy = bandit_setup(seed)
    n_batches = 100 if quick else 400
    print(f"梯度估计（初始策略，k=4，{n_batches} 批）：")
    print("offset  baseline  scale  variance/|g|^2")
    for offset in (0.0, 1.0):
        for baseline in ("none", "mean", "rloo"):
            s = policy_gradient_stats(policy, task, baseline, 4, n_batches, reward_offset=offset)
            print(f"{offset:6.1f}  {baseline:>8s}  {s['scale']:5.3f}  {s['variance'] / s['grad_norm'] ** 2:14.3f}")
    steps = 30 if quick else 100
    print(f"训练 {steps} 步后真实正确概率（初始 {task.success_prob(policy):.3f}）：")
    print("offset  baseline  success_prob")
    results = []
    for offset in (0.0, 1.0, 5.0):
        for baseline in ("none", "rloo"):
            torch.manual_seed(seed + 1)
            trained = TablePolicy(policy.logits)
            config = ReinforceConfig(baseline=baseline, steps=steps, reward_offset=offset)
            history = train_reinforce(trained, task, config, evaluate=task.evaluate)
            print(f"{offset:6.1f}  {baseline:>8s}  {history[-1]['success_prob']:12.3f}")
            results.append({"offset": offset, "baseline": baseline, **history[-1]})
    return results


@single_thread()
def run_rloo(seed: int = 0, quick: bool = False) -> list[dict]:
    """RLOO（k=4，β=0.05，KL 惩罚在奖励里）：打印奖励、KL 与真实正确概率。

    Args:
        seed: 全局随机种子。
        quick: 是否只跑短版本。

    Returns:
        指标历史。
    """
    task, policy = bandit_setup(seed)
    config = RLOOConfig(steps=30 if quick else 100)
    print(f"RLOO：{N_PROMPTS} 个提示词 × k={config.num_generations}，beta={config.beta}")
    print(f"初始正确概率 {task.success_prob(policy):.3f}")
    history = train_rloo(policy, task, config, evaluate=task.evaluate)
    print(" step  reward      kl  success_prob")
    for h in history[9::10]:
        print(f"{h['step']:5d}  {h['reward']:6.3f}  {h['kl']:6.3f}  {h['success_prob']:12.3f}")
    return history


# --8<-- [start:build_reward_model]
def build_reward_model(
    task: BanditTask, label_noise: float = 0.2, pairs_per_prompt: int = 2, steps: int = 100
) -> tuple[TableRewardModel, list[dict], tuple[Tensor, Tensor, Tensor]]:
    """第 3 章的奖励模型：带噪声的偏好对 → Bradley–Terry（居中系数 0.01）→ 留出偏好对上的准确率。

    Args:
        task: 查表任务（它的正确答案决定“真实”偏好）。
        label_noise: 训练偏好对的标签噪声率。
        pairs_per_prompt: 每个提示词的训练偏好对数。
        steps: 训练步数。

    Returns:
        `(reward_model, history, eval_pairs)`：训练好的奖励模型、训练历史、留出偏好对
        （每个提示词 4 对，标签全对）。
    """
    pairs = task.noisy_preference_pairs(pairs_per_prompt, label_noise)
    eval_pairs = task.noisy_preference_pairs(4, 0.0)
    reward_model = TableRewardModel(task.n_prompts, task.n_answers)
    config = RewardConfig(learning_rate=0.1, steps=steps, center_rewards_coefficient=0.01)
    history = train_reward_model(reward_model, pairs, config, eval_pairs=eval_pairs)
    return reward_model, history, eval_pairs


# --8<-- [end:build_reward_model]


@single_thread()
def run_reward_model(seed: int = 0, quick: bool = False) -> list[dict]:
    """训练 Bradley–Terry 奖励模型（标签噪声 20%），打印训练集与留出偏好对上的准确率。

    Args:
        seed: 全局随机种子。
        quick: 是否只跑短版本。

    Returns:
        指标历史。
    """
    torch.manual_seed(seed)
    task = BanditTask.make(N_PROMPTS, N_ANSWERS)
    steps = 30 if quick else 100
    reward_model, history, eval_pairs = build_reward_model(task, steps=steps)
    print(f"奖励模型：{N_PROMPTS} 个提示词 × 2 个偏好对，标签噪声 0.2，{steps} 步")
    print(" step    loss  accuracy  margin  eval_accuracy")
    for h in history[9::10] if quick else history[19::20]:
        print(f"{h['step']:5d}  {h['loss']:6.3f}  {h['accuracy']:8.3f}  {h['margin']:6.3f}  {h['eval_accuracy']:13.3f}")
    best = reward_model.table.argmax(dim=1)
    print(f"奖励模型把正确回答排第一的提示词比例 {(best == task.correct).float().mean().item():.3f}")
    print(f"留出偏好对准确率 {preference_accuracy(reward_model, eval_pairs):.3f}")
    return history


@single_thread()
def run_ppo(seed: int = 0, quick: bool = False) -> list[dict]:
    """对第 3 章学到的奖励模型做 PPO：代理奖励、真实正确概率与到参考模型的精确 KL。

    Args:
        seed: 全局随机种子。
        quick: 是否只跑短版本。

    Returns:
        指标历史（每步另含 `success_prob` 与精确的 `kl_to_ref`）。
    """
    torch.manual_seed(seed)
    task = BanditTask.make(N_PROMPTS, N_ANSWERS)
    reward_model, _, eval_pairs = build_reward_model(task)
    policy = TablePolicy.random(N_PROMPTS, N_ANSWERS)
    ref_policy = policy.frozen_copy()
    config = PPOConfig(steps=20 if quick else 60)

    def evaluate(p: TablePolicy) -> dict[str, float]:
        return {"success_prob": task.success_prob(p), "kl_to_ref": exact_kl(p, ref_policy)}

    start = task.success_prob(policy)
    print(f"PPO：奖励模型留出准确率 {preference_accuracy(reward_model, eval_pairs):.3f}，kl_coef={config.kl_coef}")
    print(" step  scores  objective/kl  clipfrac  approxkl_k3  expl_var  entropy  success_prob  kl_to_ref")
    history = train_ppo(policy, TableValueModel(N_PROMPTS), task, config, reward_model, ref_policy, evaluate)
    for h in history[4::5] if quick else history[9::10]:
        print(
            f"{h['step']:5d}  {h['objective/scores']:6.3f}  {h['objective/kl']:12.3f}"
            f"  {h['policy/clipfrac_avg']:8.3f}  {h['policy/approxkl_k3']:11.4f}  {h['val/explained_variance']:8.3f}"
            f"  {h['policy/entropy_avg']:7.3f}  {h['success_prob']:12.3f}  {h['kl_to_ref']:9.3f}"
        )
    end = history[-1]
    print(
        f"真实正确概率 {start:.3f} → {end['success_prob']:.3f}（+{end['success_prob'] - start:.3f}），"
        f"代价 KL(π‖π_ref) = {end['kl_to_ref']:.3f} nat"
    )
    return history
