r"""最小实现：一屏读完一步 GRPO、PPO 或 DPO 的损失，不带任何选项。

章节的“代码”一节先展示这里的函数，再展示完整的函数。
完整的函数（`group_advantages` + `grpo_loss`，`kl_penalized_rewards` + `gae_advantages` + `whiten` +
`ppo_policy_loss` + `ppo_value_loss`，`dpo_loss`）另外检查输入、记录 TRL 同名的指标、提供变体的开关
（GSPO、其他 `loss_type`、标签平滑……）。在它们共同的默认设置下，两者的值与梯度相同（`tests/test_minimal.py`）。
唯一的例外：组内奖励全相同、又不能在浮点里精确表示（如 8 个 0.35）时，`group_advantages` 把这组的优势置 0，
`minimal_grpo_loss` 照公式计算，均值的舍入误差被 $1/(\sigma + 10^{-4})$ 放大。

这里的函数假定输入合法：不检查形状，不处理整行为 0 的掩码，填充处的对数概率须是有限值，
PPO 的掩码是右侧填充（真实 token 在左，填充在右），掩码内至少两个 token、优势不全相同（`whiten` 对这些特例另有定义）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# --8<-- [end:imports]


# --8<-- [start:minimal_grpo_loss]
def minimal_grpo_loss(
    rewards: Tensor,
    logps: Tensor,
    old_logps: Tensor,
    ref_logps: Tensor,
    mask: Tensor,
    num_generations: int,
    epsilon: float = 0.2,
    beta: float = 0.04,
) -> Tensor:
    """一步 GRPO 的损失（DeepSeekMath 式 (3)），不带任何选项。"""
    # 形状：B = 提示词数 × G（同一提示词的 G 条回答相邻），T = token 数
    # rewards (B,)；logps、old_logps、ref_logps、mask (B, T)
    # 1. 组内相对优势：减去组内均值，除以组内标准差（Bessel 校正）
    grouped = rewards.view(-1, num_generations)  # (B/G, G)
    std = grouped.std(dim=1, keepdim=True)  # (B/G, 1)
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)) / (std + 1e-4)
    advantages = advantages.view(-1, 1)  # (B, 1)：广播到回答的每个 token
    # 2. 重要性采样比率 w = π_θ / π_old
    ratio = (logps - old_logps).exp()  # (B, T)
    # 3. 截断代理损失 −min(w·A, clip(w, 1−ε, 1+ε)·A)
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon) * advantages
    per_token_loss = -torch.min(ratio * advantages, clipped)  # (B, T)
    # 4. 加上 β·k3，k3 = e^d − d − 1，d = log π_ref − log π_θ
    d = ref_logps - logps  # (B, T)
    per_token_loss = per_token_loss + beta * (d.exp() - d - 1)
    # 5. 先在每条回答内平均，再在回答间平均（loss_type="grpo"）
    per_sequence = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    return per_sequence.mean()


# --8<-- [end:minimal_grpo_loss]


# --8<-- [start:minimal_ppo_loss]
def minimal_ppo_loss(
    scores: Tensor,
    logps: Tensor,
    old_logps: Tensor,
    ref_logps: Tensor,
    values: Tensor,
    old_values: Tensor,
    mask: Tensor,
    beta: float = 0.05,
    gamma: float = 1.0,
    lam: float = 0.95,
    epsilon: float = 0.2,
    epsilon_value: float = 0.2,
    vf_coef: float = 0.1,
) -> Tensor:
    """一步 PPO 的损失：逐 token 奖励 → GAE → 白化 → 截断策略损失 + 截断价值损失。"""
    # 形状：scores (B,)；其余 (B, T)；mask 右侧填充
    B, T = logps.shape
    n = mask.sum()  # 真实 token 数
    # 1. 逐 token 奖励：每个 token 扣 β·k1，分数加在最后一个真实 token 上
    rewards = -beta * ((old_logps - ref_logps) * mask)  # (B, T)
    last = mask.sum(-1).long() - 1  # (B,)
    rewards[torch.arange(B), last] += scores
    # 2. GAE，从后往前；填充处的 V 与 Â 取 0
    advantages = torch.zeros_like(rewards)  # (B, T)
    next_value = next_advantage = torch.zeros_like(rewards[:, 0])  # (B,)
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - old_values[:, t]
        next_advantage = (delta + gamma * lam * next_advantage) * mask[:, t]
        next_value = old_values[:, t] * mask[:, t]
        advantages[:, t] = next_advantage
    returns = (advantages + old_values) * mask  # (B, T)
    # 3. 白化：整批真实 token 上均值 0、方差 1（Bessel 校正）
    centered = (advantages - (advantages * mask).sum() / n) * mask
    advantages = centered * torch.rsqrt((centered**2).sum() / (n - 1) + 1e-8)
    # 4. 截断策略损失，真实 token 上平均
    ratio = (logps - old_logps).exp()  # (B, T)
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon) * advantages
    policy_loss = (-torch.min(ratio * advantages, clipped) * mask).sum() / n
    # 5. 截断价值损失：新价值离旧价值超过 ε_V 时取较差的一项
    values_clipped = old_values + (values - old_values).clamp(-epsilon_value, epsilon_value)
    value_error = torch.max((values - returns) ** 2, (values_clipped - returns) ** 2)  # (B, T)
    value_loss = 0.5 * ((value_error * mask).sum() / n)
    return policy_loss + vf_coef * value_loss


# --8<-- [end:minimal_ppo_loss]


# --8<-- [start:minimal_dpo_loss]
def minimal_dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
) -> Tensor:
    """DPO 的损失 −log σ(β·Δ) 的批平均（DPO 论文式 (7)）。"""
    # 形状：四个输入都是 (B,)，整条回答的对数概率
    chosen_ratio = chosen_logps - ref_chosen_logps  # (B,) log π_θ(y_w)/π_ref(y_w)
    rejected_ratio = rejected_logps - ref_rejected_logps  # (B,) log π_θ(y_l)/π_ref(y_l)
    margins = chosen_ratio - rejected_ratio  # (B,) Δ
    return -F.logsigmoid(beta * margins).mean()


# --8<-- [end:minimal_dpo_loss]
