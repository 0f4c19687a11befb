r"""奖励过优化（reward over-optimisation）：优化一个有系统偏差的奖励模型，代理奖励一路上升，真实奖励先升后降。

设定（第 8 章）：

* **参考模型是一个“SFT 之后”的策略**：正确回答的 logit 高出 `bonus`，`bonus=1.5` 时正确概率约 0.40
  （$e^{1.5}/(e^{1.5}+7) \approx 0.39$；RLHF 通常从 SFT 模型出发）；
* **奖励模型是第 3 章的查表 Bradley–Terry 模型**，但训练数据来自一个有**系统偏差**的标注员：
  每个提示词有一个“诱饵”回答（看起来很像样的错误回答），标注员心里的分数是
  $u(y) = \mathbb 1[y = y^*] + b\,\mathbb 1[y = y^{\text{decoy}}]$，$b > 1$ 时他略偏爱诱饵；
  每对回答 $(y_a, y_b)$ 以概率 $\sigma\big(s\,(u(y_a) - u(y_b))\big)$ 选 $y_a$（$s$ 是标注的“确定程度”）。
  第 3 章那种随机标反的噪声也会让一部分提示词上排第一的回答是错的，优化器同样会利用它，但方向在各提示词上不一
  （见第 8 章练习 1）；这种**系统偏差**让每个提示词都有一个被高估的诱饵，而优化偏偏往分数最高处走。

真实奖励 $r^*$ 仍是“答对得 1”，代理奖励 $\hat r$ 是奖励模型的分数。查表策略可以精确计算两者的期望与 KL。
"""

# --8<-- [start:imports]
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf_toy._checks import check_choice, check_nonnegative
from rlhf_toy.models import TableRewardModel, TableValueModel
from rlhf_toy.policies import TablePolicy
from rlhf_toy.studies.comparison import N_ANSWERS, N_PROMPTS, exact_kl, single_thread
from rlhf_toy.tasks import BanditTask
from rlhf_toy.train import GRPOConfig, PPOConfig, RewardConfig, train_grpo, train_ppo, train_reward_model

# --8<-- [end:imports]


# --8<-- [start:biased_pairs]
def biased_preference_pairs(
    task: BanditTask,
    decoy: Tensor,
    pairs_per_prompt: int = 28,
    decoy_bias: float = 1.2,
    sharpness: float = 8.0,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""有系统偏差的标注员给出的偏好对。（消耗全局随机数生成器。）

    每个提示词随机抽 `pairs_per_prompt` 对不同的回答 $(y_a, y_b)$，以概率 $\sigma\big(s\,(u(y_a) - u(y_b))\big)$ 选 $y_a$，
    其中 $u(y) = \mathbb 1[y = y^*] + b\,\mathbb 1[y = y^{\text{decoy}}]$。

    Args:
        task: 老虎机任务（`task.correct` 是 $y^*$）。
        decoy: 每个提示词的诱饵回答，形状 `(n_prompts,)`，整数，不等于正确答案。
        pairs_per_prompt: 每个提示词的偏好对数（8 个回答共有 28 个无序对）。
        decoy_bias: 标注员给诱饵的分数 $b$；$b > 1$ 表示比正确回答还受欢迎。
        sharpness: $s \ge 0$，越大标签越确定；0 表示抛硬币。

    Returns:
        `(prompts, chosen, rejected)`，形状 `(N,)`、`(N, 1)`、`(N, 1)`，`N = n_prompts * pairs_per_prompt`。

    Raises:
        ValueError: `pairs_per_prompt` 不是正整数、`sharpness < 0`，或 `decoy` 的形状不对。
    """
    if not isinstance(pairs_per_prompt, int) or pairs_per_prompt < 1:
        raise ValueError(f"pairs_per_prompt 应是正整数，实际是 {pairs_per_prompt!r}")
    check_nonnegative("sharpness", sharpness)
    if decoy.shape != task.correct.shape:
        raise ValueError(f"decoy 的形状是 {tuple(decoy.shape)}，期望 {tuple(task.correct.shape)}（每个提示词一个）")
    n = task.n_answers
    prompts = task.prompts().repeat_interleave(pairs_per_prompt)
    a = torch.randint(0, n, prompts.shape)
    b = (a + torch.randint(1, n, prompts.shape)) % n  # 与 a 不同

    def utility(y: Tensor) -> Tensor:
        return (y == task.correct[prompts]).float() + decoy_bias * (y == decoy[prompts]).float()

    a_wins = torch.rand(prompts.shape) < torch.sigmoid(sharpness * (utility(a) - utility(b)))
    chosen, rejected = torch.where(a_wins, a, b), torch.where(a_wins, b, a)
    return prompts, chosen.unsqueeze(1), rejected.unsqueeze(1)


# --8<-- [end:biased_pairs]


# --8<-- [start:setup]
@dataclass
class OveroptSetup:
    """过优化实验的全部材料。

    Attributes:
        task: 老虎机任务（真实奖励）。
        reference: 参考模型（“SFT 之后”的策略），也是训练的起点。
        reward_model: 学到的代理奖励模型。
        decoy: 每个提示词的诱饵回答，形状 `(n_prompts,)`。
    """

    task: BanditTask
    reference: TablePolicy
    reward_model: TableRewardModel
    decoy: Tensor


def make_setup(seed: int = 0, bonus: float = 1.5, decoy_bias: float = 1.2, rm_steps: int = 100) -> OveroptSetup:
    """按种子造出任务、诱饵、有偏的偏好数据、奖励模型（第 3 章的训练设置）与 SFT 式参考模型。

    Args:
        seed: 随机种子。
        bonus: 参考模型里正确回答 logit 的加成；0 表示与第 1 章一样近似均匀。
        decoy_bias: 标注员给诱饵的分数 $b$（见 `biased_preference_pairs`）。
        rm_steps: 奖励模型的训练步数（学习率 0.1、居中系数 0.01，同第 3 章）。

    Returns:
        `OveroptSetup`。
    """
    torch.manual_seed(seed)
    task = BanditTask.make(N_PROMPTS, N_ANSWERS)
    decoy = (task.correct + torch.randint(1, N_ANSWERS, task.correct.shape)) % N_ANSWERS
    pairs = biased_preference_pairs(task, decoy, decoy_bias=decoy_bias)
    reward_model = TableRewardModel(N_PROMPTS, N_ANSWERS)
    config = RewardConfig(learning_rate=0.1, steps=rm_steps, center_rewards_coefficient=0.01)
    train_reward_model(reward_model, pairs, config)
    logits = 0.1 * torch.randn(N_PROMPTS, N_ANSWERS) + bonus * F.one_hot(task.correct, N_ANSWERS)
    return OveroptSetup(task, TablePolicy(logits).frozen_copy(), reward_model, decoy)


# --8<-- [end:setup]


class ProxyRewardTask:
    """把奖励模型包装成任务：提示词来自真实任务，奖励是代理奖励 $\\hat r$（给 GRPO 这类只认 `task.reward` 的循环用）。

    Args:
        task: 真实任务。
        reward_model: 代理奖励模型。
    """

    def __init__(self, task: BanditTask, reward_model: TableRewardModel):
        self.task, self.reward_model = task, reward_model

    def prompts(self) -> Tensor:
        """同真实任务。"""
        return self.task.prompts()

    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """代理奖励，形状 `(B,)`。"""
        return self.reward_model.reward(prompts, completions)

    def evaluate(self, policy: TablePolicy) -> dict[str, float]:
        """真实任务的评估。"""
        return self.task.evaluate(policy)


# --8<-- [start:evaluate_proxy]
def proxy_and_true(setup: OveroptSetup, policy: TablePolicy) -> dict[str, float]:
    r"""精确的代理奖励 $\mathbb E_{\pi}[\hat r]$、真实奖励 $\mathbb E_{\pi}[r^*]$、诱饵概率与到参考模型的 KL。

    Args:
        setup: 实验材料。
        policy: 查表策略。

    Returns:
        `{"proxy_reward", "success_prob", "decoy_prob", "kl_to_ref", "entropy"}`（熵是各提示词的平均，nat）。
    """
    with torch.no_grad():
        probs = policy.probs()
        prompts = setup.task.prompts()
        return {
            "proxy_reward": (probs * setup.reward_model.table).sum(-1).mean().item(),
            "success_prob": probs[prompts, setup.task.correct].mean().item(),
            "decoy_prob": probs[prompts, setup.decoy].mean().item(),
            "kl_to_ref": exact_kl(policy, setup.reference),
            "entropy": -(probs * probs.clamp_min(1e-30).log()).sum(-1).mean().item(),
        }


def optimum_curve(setup: OveroptSetup, betas: list[float] | tuple[float, ...]) -> list[dict]:
    r"""KL 正则化目标的精确最优解 $\pi^*_\beta \propto \pi_{ref}\exp(\hat r/\beta)$ 沿 $\beta$ 的轨迹（第 1 章式）。

    Args:
        setup: 实验材料。
        betas: 一串 $\beta > 0$。

    Returns:
        每个 $\beta$ 一项：`beta` 与 `proxy_and_true` 的各键。

    Raises:
        ValueError: 某个 $\beta \le 0$。
    """
    curve = []
    for beta in betas:
        if not beta > 0:
            raise ValueError(f"beta 应 > 0，实际是 {beta}")
        ref_logp = torch.log_softmax(setup.reference.logits.detach(), -1)
        optimum = TablePolicy(ref_logp + setup.reward_model.table.detach() / beta)
        curve.append({"beta": beta, **proxy_and_true(setup, optimum)})
    return curve


# --8<-- [end:evaluate_proxy]


# --8<-- [start:run_overoptimisation]
def run_overoptimisation(
    algorithm: str = "ppo",
    beta: float = 0.0,
    seed: int = 0,
    steps: int = 40,
    learning_rate: float = 0.05,
) -> list[dict]:
    r"""从参考模型出发，用 PPO（KL 在奖励里）或 GRPO（k3 KL 在损失里）优化代理奖励，每步精确评估。

    Args:
        algorithm: `"ppo"` 或 `"grpo"`。
        beta: KL 系数（PPO 的 `kl_coef`、GRPO 的 `beta`）；0 表示不加 KL。
        seed: 随机种子：决定任务、奖励模型与参考模型（`make_setup(seed)`），训练采样用 `seed + 10_000`。
        steps: 采样—更新的轮数。
        learning_rate: Adam 学习率。

    Returns:
        每步一项：`step`、`samples`（累计采样的回答数）、训练循环的指标，以及 `proxy_and_true` 的各键。

    Raises:
        ValueError: 未知的 `algorithm`，或 `beta < 0`。
    """
    check_choice("algorithm", algorithm, ("ppo", "grpo"))
    check_nonnegative("beta", beta)
    setup = make_setup(seed)
    policy = TablePolicy(setup.reference.logits)
    torch.manual_seed(seed + 10_000)

    def evaluate(p: TablePolicy) -> dict[str, float]:
        return proxy_and_true(setup, p)

    with single_thread():
        if algorithm == "ppo":
            config = PPOConfig(kl_coef=beta, learning_rate=learning_rate, steps=steps)
            value_model = TableValueModel(N_PROMPTS)
            history = train_ppo(policy, value_model, setup.task, config, setup.reward_model, setup.reference, evaluate)
        else:
            config = GRPOConfig(num_generations=4, beta=beta, learning_rate=learning_rate, steps=steps)
            proxy = ProxyRewardTask(setup.task, setup.reward_model)
            history = train_grpo(policy, proxy, config, setup.reference, evaluate)
    per_step = N_PROMPTS * config.num_generations
    return [{**h, "samples": h["step"] * per_step} for h in history]


def early_stop(history: list[dict], kl_budget: float) -> dict:
    """早停：KL 第一次超过预算 `kl_budget` 时停下（超不过就是最后一步），返回那一步的记录。

    Args:
        history: `run_overoptimisation` 的返回值。
        kl_budget: KL 预算（nat），$\\ge 0$。

    Returns:
        停下那一步的指标字典。

    Raises:
        ValueError: `kl_budget < 0` 或 `history` 为空。
    """
    check_nonnegative("kl_budget", kl_budget)
    if not history:
        raise ValueError("history 为空：没有可以停下的步")
    return next((h for h in history if h["kl_to_ref"] > kl_budget), history[-1])


# --8<-- [end:run_overoptimisation]


def peak(history: list[dict], key: str = "success_prob") -> dict:
    """历史中 `key` 最大的那一步（真实奖励的峰值）。

    Args:
        history: 指标历史。
        key: 指标名。

    Returns:
        那一步的指标字典。
    """
    return max(history, key=lambda h: h[key])
