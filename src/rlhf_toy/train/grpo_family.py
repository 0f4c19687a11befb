r"""GRPO 家族的训练循环：同 `train_grpo`，但策略损失按 TRL 1.16 的 `loss_type` 选，并记录比率与梯度整形的对照指标。

`loss_type` 取 `grpo`、`bnpo`、`dr_grpo`、`dapo`（截断代理损失，`grpo_loss`）时，本函数与 `train_grpo` 逐步相同
（同样的随机数、同样的运算，`tests/test_ratio_shaping_runs.py` 逐位比较）；另外可取 TRL 的 `cispo`、`sapo`、
`luspo`、`vespo` 与实验模块里的 GMPO（这里叫 `gmpo`），各自调用 `rlhf_toy.losses` 里对应的纯函数。
`train_grpo` 那个文件一行没改：它被几个章节的缓存键覆盖。

比率只在 `num_iterations > 1` 时离开 1：每批的第一次更新里 $w \equiv 1$，这些损失的梯度相同（见
`gradient_scale`）；之后几次更新里 $w$ 随参数移动，各损失才按自己的方式处理它。对照指标记录这件事：

* `ratio/std`、`ratio/min`、`ratio/max`：掩码内逐 token 比率 $w$ 的标准差与极值；
* `ratio/outside`：$\lvert w - 1\rvert > 0.2$ 的 token 比例（GRPO 默认截断区之外）；
* `grad/scale_mean`：整形后的梯度权重与重要性加权策略梯度的权重 $w\hat A$ 之比，在 $\hat A \ne 0$ 的 token 上平均
  （截断：0 或 1；CISPO：$\min(w,\epsilon_{max})/w$；SAPO：$4\sigma(1-\sigma)$），只对逐 token 的损失记录；
* `grad/zeroed`：这个比值恰为 0（梯度被截断清零）的 token 比例；`grad/capped`：比值小于 1 且不为 0 的比例
  （CISPO 的封顶、SAPO 的软门衰减，阈值见 `SHRUNK`）。

每步的对照指标是 `num_iterations` 次更新的平均（TRL 的日志也对每次更新取平均）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice
from rlhf_toy.estimators.advantages import group_advantages
from rlhf_toy.losses.aggregate import LOSS_TYPES, masked_mean
from rlhf_toy.losses.clipped_is_weight import clipped_is_weight_loss
from rlhf_toy.losses.gamma_weight import gamma_weight_loss
from rlhf_toy.losses.geometric_mean_ratio import geometric_mean_ratio_loss
from rlhf_toy.losses.grpo import clipped_surrogate, grpo_loss
from rlhf_toy.losses.length_weighted_sequence import length_weighted_sequence_loss
from rlhf_toy.losses.soft_gate import soft_gate_loss
from rlhf_toy.policies import Policy
from rlhf_toy.tasks import Task
from rlhf_toy.train.grpo import GRPOConfig

# --8<-- [end:imports]

FAMILY_LOSS_TYPES = (*LOSS_TYPES, "cispo", "sapo", "luspo", "vespo", "gmpo")
"""可选的 `loss_type`：TRL 1.16 `GRPOConfig.loss_type` 的八个值，加上 TRL 实验模块的 GMPO。"""
TOKEN_LEVEL = (*LOSS_TYPES, "cispo", "sapo")  # 梯度整形逐 token 可算的损失（记录 grad/* 指标）
RATIO_BAND = 0.2  # ratio/outside 的带宽：GRPO 默认截断区 [0.8, 1.2]
SHRUNK = 0.99  # grad/capped：整形后的权重小于 w·A 的 99%（且不为 0）


@dataclass
class GRPOFamilyConfig(GRPOConfig):
    r"""`GRPOConfig` 加上 TRL 1.16 `GRPOConfig` 里 SAPO 的两个温度；`loss_type` 可取 `FAMILY_LOSS_TYPES`。

    `cispo` 沿用 TRL 的约定：`epsilon_high` 是权重的**绝对**上界 $\epsilon_{max}$（不是 $1+\epsilon_{high}$），不设时
    退回 `epsilon`。`gmpo` 的 `epsilon`、`epsilon_high` 是对数空间的幅度（GMPO 论文与 TRL 的默认是 0.4）。
    `vespo` 用 TRL 的默认形状参数。`sapo`、`vespo` 不读 `epsilon`。

    Attributes:
        sapo_temperature_pos: SAPO 在 $\hat A > 0$ 时的温度 $\tau_{pos}$（TRL 默认 1.0）。
        sapo_temperature_neg: SAPO 在 $\hat A \le 0$ 时的温度 $\tau_{neg}$（TRL 默认 1.05）。
    """

    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05


# --8<-- [start:policy_loss]
def policy_loss(
    config: GRPOFamilyConfig,
    logps: Tensor,
    old_logps: Tensor | None,
    ref_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
) -> tuple[Tensor, dict[str, float]]:
    """按 `config.loss_type` 调用对应的损失函数（同 TRL `_compute_loss` 里按 `loss_type` 分支）。

    Args:
        config: 超参数；只读损失用到的字段。
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，带梯度。
        old_logps: 旧策略的对数概率，形状 `(B, T)`；`None` 表示 `logps.detach()`。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`；`beta == 0` 时可为 `None`。
        advantages: 优势，形状 `(B,)`。
        mask: 0/1 掩码，形状 `(B, T)`。

    Returns:
        `(loss, metrics)`，同各损失函数。

    Raises:
        ValueError: `loss_type` 不在 `FAMILY_LOSS_TYPES` 里，或损失函数自己的检查失败。
    """
    check_choice("loss_type", config.loss_type, FAMILY_LOSS_TYPES)
    c, args = config, (logps, old_logps, ref_logps, advantages, mask)
    level = c.importance_sampling_level
    if c.loss_type == "cispo":
        cap = c.epsilon if c.epsilon_high is None else c.epsilon_high
        return clipped_is_weight_loss(*args, epsilon_high=cap, beta=c.beta, importance_sampling_level=level)
    if c.loss_type == "sapo":
        temperatures = {"sapo_temperature_pos": c.sapo_temperature_pos, "sapo_temperature_neg": c.sapo_temperature_neg}
        return soft_gate_loss(*args, **temperatures, beta=c.beta, importance_sampling_level=level)
    if c.loss_type == "luspo":
        eps = {"epsilon": c.epsilon, "epsilon_high": c.epsilon_high}
        return length_weighted_sequence_loss(*args, **eps, beta=c.beta, importance_sampling_level=level)
    if c.loss_type == "vespo":
        return gamma_weight_loss(*args, beta=c.beta)
    if c.loss_type == "gmpo":
        return geometric_mean_ratio_loss(*args, epsilon=c.epsilon, epsilon_high=c.epsilon_high, beta=c.beta)
    return grpo_loss(
        *args,
        epsilon=c.epsilon,
        epsilon_high=c.epsilon_high,
        beta=c.beta,
        loss_type=c.loss_type,
        max_completion_length=c.max_completion_length,
        importance_sampling_level=level,
        log_clip_sides=c.log_clip_sides,
    )


# --8<-- [end:policy_loss]


# --8<-- [start:gradient_scale]
def gradient_scale(config: GRPOFamilyConfig, ratio: Tensor, advantages: Tensor) -> Tensor:
    r"""逐 token 损失整形后的梯度权重与重要性加权的策略梯度权重 $w\hat A$ 之比（对 $\log\pi_\theta$ 求导，不计 KL 项）。

    截断代理损失：截断起作用处为 0，其余为 1；CISPO：$\min(w, \epsilon_{max})/w$；SAPO：$4\sigma(1-\sigma)$，
    $\sigma = \sigma(\tau(w-1))$。三者在 $w = 1$ 时都恰为 1：同策略时它们的梯度相同（SAPO 的 $4\sigma(1-\sigma)$ 在
    $w = 1$ 时是 $4 \cdot 0.5 \cdot 0.5$）。

    Args:
        config: 超参数（`loss_type` 须在 `TOKEN_LEVEL` 里，`importance_sampling_level="token"`）。
        ratio: 逐 token 比率 $w$，形状 `(B, T)`，正数。
        advantages: 优势，形状 `(B, 1)` 或 `(B, T)`。

    Returns:
        形状 `(B, T)` 的比值，取值在 $[0, 1]$。

    Raises:
        ValueError: `loss_type` 不是逐 token 的损失。
    """
    check_choice("loss_type", config.loss_type, TOKEN_LEVEL)
    adv = advantages.expand_as(ratio)
    if config.loss_type == "cispo":
        cap = config.epsilon if config.epsilon_high is None else config.epsilon_high
        return ratio.clamp(max=cap) / ratio
    if config.loss_type == "sapo":
        tau = torch.where(adv > 0, config.sapo_temperature_pos, config.sapo_temperature_neg).to(ratio.dtype)
        gate = torch.sigmoid(tau * (ratio - 1))
        return 4 * gate * (1 - gate)
    _, is_clipped = clipped_surrogate(ratio.log(), torch.zeros_like(ratio), adv, config.epsilon, config.epsilon_high)
    return (~is_clipped).to(ratio.dtype)


# --8<-- [end:gradient_scale]


@torch.no_grad()
def ratio_metrics(config: GRPOFamilyConfig, logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor) -> dict:
    r"""一次更新的对照指标（见模块说明）：比率的离散程度，以及逐 token 损失的梯度被清零、被压低的比例。

    Args:
        config: 超参数。
        logps: 当前策略的对数概率，形状 `(B, T)`。
        old_logps: 旧策略的对数概率，形状 `(B, T)`。
        advantages: 优势，形状 `(B,)`。
        mask: 0/1 掩码，形状 `(B, T)`。

    Returns:
        `ratio/std`、`ratio/min`、`ratio/max`、`ratio/outside`；逐 token 的损失另有 `grad/scale_mean`、
        `grad/zeroed`、`grad/capped`（没有 $\hat A \ne 0$ 的 token 时不记，例如每组奖励都相同的一步）。
    """
    log_ratio = logps.detach() - old_logps
    ratio = log_ratio.exp()
    inside = mask.bool()
    var = masked_mean((ratio - masked_mean(ratio, mask)) ** 2, mask).item()
    out = {
        "ratio/std": math.sqrt(max(var, 0.0)),
        "ratio/min": ratio[inside].min().item(),
        "ratio/max": ratio[inside].max().item(),
        "ratio/outside": masked_mean(((ratio - 1).abs() > RATIO_BAND).to(ratio.dtype), mask).item(),
    }
    adv = advantages[:, None].expand_as(ratio)
    active = mask * (adv != 0).to(mask.dtype)  # A = 0 的 token 没有策略梯度，不计
    token_level = config.loss_type in TOKEN_LEVEL and config.importance_sampling_level == "token"
    if token_level and active.sum().item() > 0:
        scale = gradient_scale(config, ratio, adv)
        out["grad/scale_mean"] = masked_mean(scale, active).item()
        out["grad/zeroed"] = masked_mean((scale == 0).to(ratio.dtype), active).item()
        out["grad/capped"] = masked_mean(((scale > 0) & (scale < SHRUNK)).to(ratio.dtype), active).item()
    return out


# --8<-- [start:train_grpo_family]
def train_grpo_family(
    policy: Policy,
    task: Task,
    config: GRPOFamilyConfig,
    ref_policy: Policy | None = None,
    evaluate: Callable | None = None,
    *,
    eval_every: int = 1,
) -> list[dict[str, float]]:
    """用 GRPO 家族的某个损失训练 `policy`：采样一组 → 组内相对优势 → 同一批上 `num_iterations` 次更新。

    与 `train_grpo` 的区别只有两处：损失由 `policy_loss` 按 `loss_type` 选；每次更新另算 `ratio_metrics`（不带梯度，
    不用随机数，所以 `loss_type="grpo"` 时与 `train_grpo` 的轨迹逐位相同）。不支持 `dynamic_sampling`。

    Args:
        policy: 实现 `sample` / `logps` 的策略（原地更新）。
        task: 提供 `prompts()` 与 `reward(prompts, completions)` 的任务。
        config: 超参数。
        ref_policy: 参考模型；`None` 时取训练开始时 `policy` 的冻结副本。
        evaluate: 可选，`evaluate(policy) -> dict`，每 `eval_every` 步（及最后一步）更新后调用。
        eval_every: 评估间隔。

    Returns:
        长 `config.steps` 的列表；每项含 `step`、`loss`、`reward`、损失函数记录的指标、`num_iterations` 次更新平均的
        `ratio/*` 与 `grad/*`（在记录了它们的那几次更新上平均），以及评估结果。

    Raises:
        ValueError: `config.dynamic_sampling` 为真，或 `loss_type` 未知。
    """
    if config.dynamic_sampling:
        raise ValueError("train_grpo_family 不支持 dynamic_sampling=True（请用 train_grpo）")
    check_choice("loss_type", config.loss_type, FAMILY_LOSS_TYPES)
    ref_policy = policy.frozen_copy() if ref_policy is None else ref_policy
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
    G = config.num_generations
    history = []
    for step in range(1, config.steps + 1):
        prompts = task.prompts()
        completions, mask = policy.sample(prompts, G)
        group_prompts = prompts.repeat_interleave(G, dim=0)
        rewards = task.reward(group_prompts, completions)
        advantages = group_advantages(rewards, G, config.scale_rewards)
        with torch.no_grad():
            old_logps = policy.logps(group_prompts, completions) if config.num_iterations > 1 else None
            ref_logps = ref_policy.logps(group_prompts, completions) if config.beta > 0 else None
        controls: list[dict] = []
        for _ in range(config.num_iterations):
            logps = policy.logps(group_prompts, completions)
            loss, metrics = policy_loss(config, logps, old_logps, ref_logps, advantages, mask)
            old = logps.detach() if old_logps is None else old_logps
            controls.append(ratio_metrics(config, logps, old, advantages, mask))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        keys = dict.fromkeys(k for c in controls for k in c)  # grad/* 只在有 A ≠ 0 的 token 时记录
        averaged = {k: sum(c[k] for c in controls if k in c) / sum(k in c for c in controls) for k in keys}
        averaged["ratio/min"] = min(c["ratio/min"] for c in controls)
        averaged["ratio/max"] = max(c["ratio/max"] for c in controls)
        record = {"step": step, "loss": loss.item(), "reward": rewards.mean().item(), **metrics, **averaged}
        due = evaluate is not None and (step % eval_every == 0 or step == config.steps)
        history.append({**record, **(evaluate(policy) if due else {})})
    return history


# --8<-- [end:train_grpo_family]
