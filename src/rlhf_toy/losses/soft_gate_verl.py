r"""SAPO 的 verl 写法：用平滑的 sigmoid 门代替硬截断。

SAPO（Soft Adaptive Policy Optimization, Gao et al., 2025, arXiv 2511.20347）把 PPO 的 $\mathrm{clip}(w)\hat A$
换成 $f_\tau(w)\hat A$，$f_\tau(w) = \sigma\big(\tau(w-1)\big)\cdot 4/\tau$：$w = 1$ 处 $f = 2/\tau$、斜率 $f' = 1$（与 $w$ 本身相同），
离 1 越远梯度越平滑地衰减，而不是突然变成 0；正负优势用不同的温度（$\tau_{neg} > \tau_{pos}$，负优势的梯度衰减得更快）。
本模块只写 verl 0.9.1 的约定（`compute_policy_loss_sapo`，`policy_loss.loss_mode="sapo"`）；TRL 的 `loss_type="sapo"`
另有模块。约定：**损失 = −目标**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy.losses._token_inputs import VERL_LOG_RATIO_CLAMP, check_policy_inputs, check_positive
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean

# --8<-- [end:imports]


# --8<-- [start:sapo_loss_verl]
def sapo_loss_verl(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[Tensor, dict[str, float]]:
    r"""verl 的 SAPO 损失：逐 token $\ell_{i,t} = -\frac{4}{\tau_{i,t}}\sigma\big(\tau_{i,t}(w_{i,t} - 1)\big)\hat A_{i,t}$，
    $\tau_{i,t} = \tau_{pos}$（$\hat A_{i,t} > 0$）否则 $\tau_{neg}$，$w = \exp\big(\mathrm{clamp}(\log\pi_\theta - \log\pi_{old}, -20, 20)\big)$；
    先在每条回答内按 token 平均，再在回答间平均（`loss_type="grpo"` 的汇总）。

    与 verl 0.9.1 `compute_policy_loss_sapo` 逐式相同，只有一处差别：单独调用 verl 的函数（不传
    `global_batch_info`）时，回答间平均不计整行掩码为 0 的回答，本书（与 TRL）计入。在 verl 的训练器里，
    分母是训练器传入的 `global_batch_size`（`ppo_mini_batch_size` × `rollout.n`），与本书一样计入
    （见 `tests/conformance/test_loss_aggregation_verl.py`）。verl 的约定：

    - **汇总是写死的**：verl 忽略 `loss_agg_mode`，总按 `seq-mean-token-mean`（SAPO 论文的按序列平均）汇总，
      所以这里没有 `loss_type` 参数；TRL 的 `sapo` 同样按 `grpo` 汇总。
    - **温度**：读 `actor.tau_pos`、`actor.tau_neg`（默认 1.0、1.05，与 TRL 相同）；$\hat A = 0$ 的 token 用 $\tau_{neg}$
      （损失为 0，无影响）。
    - 没有截断参数：`clip_ratio*` 对 SAPO 不起作用；verl 的 `actor/pg_clipfrac` 恒为 0。
    - verl 先把 $\log w$ 限幅到 $[-20, 20]$。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`，不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`。
        tau_pos: 正优势的温度 $\tau_{pos} > 0$（verl `actor.tau_pos`）。
        tau_neg: 非正优势的温度 $\tau_{neg} > 0$（verl `actor.tau_neg`）。

    Returns:
        `(loss, metrics)`：标量损失与 `actor/ppo_kl`（限幅后的 $\overline{-\log w}$）。同策略（$w \equiv 1$）时
        逐 token 损失是 $-2\hat A/\tau$，不是 $-\hat A$：值不同于 PPO，梯度相同。

    Raises:
        ValueError: 形状不符、`B = 0`、含非有限值、`old_logps` 带梯度、`mask` 不是 0/1，或温度不是有限的正数。

    Examples:
        >>> import torch
        >>> logps = torch.zeros(1, 1)
        >>> loss, _ = sapo_loss_verl(logps, logps, torch.tensor([1.0]), torch.ones(1, 1))
        >>> loss.item()  # -(4/1)·σ(0)·1
        -2.0
    """
    adv = check_policy_inputs(logps, old_logps, advantages, mask)
    check_positive("tau_pos", tau_pos)
    check_positive("tau_neg", tau_neg)
    log_ratio = (logps - old_logps).clamp(-VERL_LOG_RATIO_CLAMP, VERL_LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    tau = torch.where(adv > 0, logps.new_tensor(tau_pos), logps.new_tensor(tau_neg))  # 温度取 logps 的 dtype（同 verl）
    per_token_loss = -soft_gate(ratio, tau) * adv
    loss = aggregate_loss(per_token_loss, mask, "grpo")
    return loss, {"actor/ppo_kl": masked_mean(-log_ratio.detach(), mask).item()}


# --8<-- [end:sapo_loss_verl]


# --8<-- [start:soft_gate]
def soft_gate(ratio: Tensor, tau: Tensor | float) -> Tensor:
    r"""SAPO 的门函数 $f_\tau(w) = \sigma\big(\tau(w - 1)\big)\cdot 4/\tau$（verl `gate_function`）。

    Args:
        ratio: 比率 $w$，任意形状。
        tau: 温度 $\tau > 0$，标量或可与 `ratio` 广播的张量。

    Returns:
        与 `ratio` 广播后同形状。

    Examples:
        >>> import torch
        >>> soft_gate(torch.tensor([1.0]), 2.0)
        tensor([1.])
    """
    return torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)


# --8<-- [end:soft_gate]


# --8<-- [start:sapo_gradient_weight_verl]
def sapo_gradient_weight_verl(ratio: Tensor, advantages: Tensor, tau_pos: float = 1.0, tau_neg: float = 1.05) -> Tensor:
    r"""逐 token 损失对 $\log\pi_\theta$ 的导数：$-4\,w\,\sigma(x)\big(1-\sigma(x)\big)\hat A$，$x = \tau(w-1)$。

    $w = 1$ 处等于 $-\hat A$（与 PPO、GRPO 相同）；$w$ 远离 1 时平滑地趋于 0，没有 PPO 那样的跳变。

    Args:
        ratio: 重要性采样比率 $w_t > 0$，任意形状。
        advantages: 优势 $\hat A_t$，可与 `ratio` 广播。
        tau_pos: 正优势的温度。
        tau_neg: 非正优势的温度。

    Returns:
        广播后的形状。

    Examples:
        >>> import torch
        >>> sapo_gradient_weight_verl(torch.tensor([1.0]), torch.tensor(-1.0))
        tensor([1.])
    """
    tau = torch.where(advantages > 0, ratio.new_tensor(tau_pos), ratio.new_tensor(tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0))
    return -4.0 * ratio * gate * (1 - gate) * advantages


# --8<-- [end:sapo_gradient_weight_verl]
