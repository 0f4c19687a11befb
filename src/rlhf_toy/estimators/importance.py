r"""采样器与训练器不一致时的重要性权重（第 12 章）：限幅（TIS，截断重要性采样）、掩码（MIS）、序列级掩码。

记号：$\pi_{old}$ 是训练器在采样之后**重新算出**的对数概率（TRL 的 `old_per_token_logps`），
$\mu$ 是采样器（推理引擎、旧快照、top-k / top-p 过滤）在采样时给出的对数概率（TRL 的 `sampling_per_token_logps`）。
权重 $\rho = \pi_{old}/\mu$ 是一个**额外的乘子**，乘在逐 token 损失上；PPO / GRPO 的比率 $\pi_\theta/\pi_{old}$ 不变
（解耦的目标，Hilton et al. 2022；Yao et al. 2025 的 TIS）。

全部函数是逐 token 张量上的纯函数，形状约定同 `rlhf_toy.losses`：`logps (B, T)`、`sampler_logps (B, T)`、`mask (B, T)`。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math

import torch
from torch import Tensor

from rlhf_toy._checks import check_choice, check_mask, check_ndim, check_shape

# --8<-- [end:imports]

IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _check_bounds(mode: str, clip_max: float | None, clip_min: float | None) -> None:
    """TRL `GRPOConfig.__post_init__` 的两条检查，外加 NaN 与非正的上界。"""
    for name, value in (("clip_max", clip_max), ("clip_min", clip_min)):
        if value is not None and not value >= 0:
            raise ValueError(f"{name} 应 ≥ 0 或 None，实际是 {value}")
    if clip_min is not None and clip_max is not None and clip_min >= clip_max:
        raise ValueError(f"clip_min ({clip_min}) 应小于 clip_max ({clip_max})")
    if mode.endswith("_truncate") and clip_min is None and clip_max is None:
        raise ValueError(f"mode={mode!r} 需要 clip_min 与 clip_max 至少一个不是 None")


# --8<-- [start:importance_weights]
@torch.no_grad()
def importance_weights(
    logps: Tensor,
    sampler_logps: Tensor,
    mask: Tensor,
    mode: str = "sequence_mask",
    clip_max: float | None = 3.0,
    clip_min: float | None = None,
) -> Tensor:
    r"""采样器与训练器之间的重要性权重 $\rho = \pi_{old}/\mu$，按 `mode` 限幅或掩掉（不带梯度）。

    * 逐 token：$\rho_t = \exp(\log\pi_{old,t} - \log\mu_t)$；
    * 序列级：$\rho = \exp\big(\sum_t m_t(\log\pi_{old,t} - \log\mu_t)\big)$，即逐 token 比率之**积**（掩码内求和，同 TRL）；
    * `*_truncate`（TIS）：$\min(\max(\rho, C_{min}), C_{max})$；
    * `*_mask`（MIS / IcePop）：$\rho\cdot\mathbf 1[C_{min}\le\rho\le C_{max}]$，界外的权重为 0（整条序列或单个 token 不参与更新）。

    与 TRL 1.16 `GRPOTrainer._generate_and_score_completions` 的逐行对应：先 `(logps - sampler_logps) * mask`，
    再把 NaN 换成 0（采样器给不出对数概率的 token 比率为 1）。因此：

    * 填充位置与掩码全为 0 的行：逐 token 权重为 1，序列权重为 1（乘到损失上之后仍被掩码去掉）；
    * 掩码内的 NaN：差值记 0，权重为 1；
    * 掩码内的 $+\infty$ 差值（$\mu_t = 0$）：`torch.nan_to_num` 把它换成 dtype 的最大有限值，权重 $+\infty$，
      `*_truncate` 模式给 $C_{max}$，`*_mask` 模式给 0；$-\infty$（$\pi_{old,t} = 0$）换成最小有限值，权重 0；
    * 同一序列里既有 $+\infty$ 又有 $-\infty$：两个有限的极值相互抵消，其余 token 的差值可能被“吃掉”（浮点舍入），
      序列权重有限但没有意义（TRL 同样如此）；求和若得到 NaN 就报错（TRL 会把 NaN 带进损失）。

    Args:
        logps: 训练器的对数概率 $\log\pi_{old}$，形状 `(B, T)`，浮点（带梯度也无妨，结果不带梯度）。
        sampler_logps: 采样器的对数概率 $\log\mu$，形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`（TRL 里是 `completion_mask * tool_mask`）。
        mode: `IS_MODES` 之一（TRL `vllm_importance_sampling_mode`，默认 `"sequence_mask"`）。
        clip_max: 上界 $C_{max}$（TRL `vllm_importance_sampling_clip_max`，默认 3.0）；`None` 表示没有上界。
        clip_min: 下界 $C_{min}$（TRL `vllm_importance_sampling_clip_min`，默认 `None`）。

    Returns:
        逐 token 模式形状 `(B, T)`，序列模式形状 `(B, 1)`，dtype 同 `logps`，不带梯度。

    Raises:
        ValueError: 形状不符、`mask` 不是 0/1、`mode` 未知、界不合法（`clip_min ≥ clip_max`，`*_truncate` 模式两个界都是
            `None`，负数或 NaN），或某条序列的对数比率之和是 NaN。

    Examples:
        >>> lp = torch.log(torch.tensor([[0.5, 0.5]]))
        >>> mu = torch.log(torch.tensor([[0.25, 0.5]]))
        >>> importance_weights(lp, mu, torch.ones(1, 2), "sequence_truncate")
        tensor([[2.]])
    """
    check_ndim("logps", logps, 2, "(B, T)")
    check_shape("sampler_logps", sampler_logps, logps.shape, like="logps")
    check_mask("mask", mask, logps.shape, like="logps")
    check_choice("mode", mode, IS_MODES)
    _check_bounds(mode, clip_max, clip_min)
    diff = torch.nan_to_num((logps.detach() - sampler_logps) * mask, nan=0.0)  # 同 TRL：inf·0 与 NaN 都记 0
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)  # (B, 1)：逐 token 比率之积
        if diff.isnan().any():
            raise ValueError("sampler_logps：某条序列的对数比率里同时有 +inf 与 -inf，序列权重无定义")
    ratio = diff.exp()
    if mode.endswith("_truncate"):  # TIS：min(max(ρ, C_min), C_max)
        return ratio.clamp(min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min  # MIS：界外置 0
    high = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


# --8<-- [end:importance_weights]


# --8<-- [start:importance_metrics]
@torch.no_grad()
def importance_metrics(logps: Tensor, sampler_logps: Tensor, mask: Tensor, weights: Tensor) -> dict[str, float]:
    r"""TRL 1.16 记录的采样偏差指标，键名相同。

    * `sampling/sampling_logp_difference/{mean,max}`：掩码内 $|\log\pi_{old} - \log\mu|$ 的均值与最大值（跳过 NaN）；
    * `sampling/importance_sampling_ratio/{min,mean,max}`：权重（限幅或掩码**之后**）的最小、平均、最大值；
      逐 token 权重只看掩码内，序列权重看每一行（含空行，同 TRL）。

    没有可统计的元素时记 0（同 TRL）。

    Args:
        logps: $\log\pi_{old}$，形状 `(B, T)`。
        sampler_logps: $\log\mu$，形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`。
        weights: `importance_weights` 的结果，形状 `(B, T)` 或 `(B, 1)`。

    Returns:
        五个键的字典，Python 浮点数。

    Raises:
        ValueError: 形状不符。
    """
    check_ndim("logps", logps, 2, "(B, T)")
    check_shape("sampler_logps", sampler_logps, logps.shape, like="logps")
    check_mask("mask", mask, logps.shape, like="logps")
    if tuple(weights.shape) not in (tuple(logps.shape), (logps.shape[0], 1)):
        check_shape("weights", weights, logps.shape, like="logps 或 (B, 1)")
    delta = (logps - sampler_logps).abs()
    delta = delta[mask.bool() & ~delta.isnan()]
    flat = weights.flatten() if weights.shape[1] == 1 and logps.shape[1] != 1 else weights[mask.bool()]

    def stat(x: Tensor, fn) -> float:
        return fn(x).item() if x.numel() > 0 else 0.0

    return {
        "sampling/sampling_logp_difference/mean": stat(delta, torch.mean),
        "sampling/sampling_logp_difference/max": stat(delta, torch.max),
        "sampling/importance_sampling_ratio/min": stat(flat, torch.min),
        "sampling/importance_sampling_ratio/mean": stat(flat, torch.mean),
        "sampling/importance_sampling_ratio/max": stat(flat, torch.max),
    }


# --8<-- [end:importance_metrics]


# --8<-- [start:effective_sample_size]
@torch.no_grad()
def effective_sample_size(weights: Tensor, mask: Tensor, clip_max: float | None = None) -> float:
    r"""归一化的有效样本量（effective sample size），同 verl 0.9.1 的 `rollout_is_eff_sample_size`：

    $$\mathrm{ESS} = \frac{1}{\overline{(\tilde w/\bar w)^2}},\qquad \tilde w = \mathrm{clamp}(w, 0, C_{max}),$$

    平均都在掩码内（逐 token）取；序列权重 `(B, 1)` 先广播到 `(B, T)`（每条序列按它的 token 数计权，同 verl）。
    至少一个权重不为 0 时结果在 $(0, 1]$ 里：1 表示权重全相等，$1/N$ 表示只有一个样本有权重。
    掩码内的权重全为 0 时返回 `inf`（verl 在这里除以 0，抛出 `ZeroDivisionError`）。verl 在均值上加 `1e-8`，这里也加。

    Args:
        weights: 权重，形状 `(B, T)` 或 `(B, 1)`。
        mask: 0/1 掩码，形状 `(B, T)`。
        clip_max: 先把权重截到 $C_{max}$（verl 的 `rollout_is_threshold`）；`None` 表示不截。

    Returns:
        ESS（占样本数的比例）。

    Raises:
        ValueError: 形状不符，或掩码全为 0（verl 同样报错）。
    """
    check_ndim("mask", mask, 2, "(B, T)")
    if tuple(weights.shape) not in (tuple(mask.shape), (mask.shape[0], 1)):
        check_shape("weights", weights, mask.shape, like="mask 或 (B, 1)")
    if not mask.any():
        raise ValueError(f"mask 的形状是 {tuple(mask.shape)}，全为 0：没有样本可算有效样本量")
    w = weights.expand_as(mask).clamp(min=0.0, max=clip_max)
    n = mask.sum()
    mean = (w * mask).sum() / n
    normalised = w / (mean + 1e-8)
    return (n / (normalised.square() * mask).sum()).item()


# --8<-- [end:effective_sample_size]


# --8<-- [start:off_policy_sequence_mask]
@torch.no_grad()
def off_policy_sequence_mask(
    advantages: Tensor, logps: Tensor, sampler_logps: Tensor, mask: Tensor, threshold: float
) -> Tensor:
    r"""DeepSeek-V3.2 的异策略序列掩码（TRL 1.16 `off_policy_mask_threshold`，`GRPOTrainer.get_off_policy_mask`）。

    丢掉“优势为负、且与采样器偏离太远”的序列：保留 $\hat A \ge 0$ 或
    $\frac{1}{|y|}\sum_t m_t(\log\mu_t - \log\pi_{\theta,t}) \le \delta$ 的序列。NaN 的差值记 0（同 TRL）。

    Args:
        advantages: 优势，形状 `(B, 1)`（TRL 传入的形状）或 `(B,)`。
        logps: 当前策略的 $\log\pi_\theta$，形状 `(B, T)`。
        sampler_logps: 采样器的 $\log\mu$，形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`。
        threshold: $\delta$（nat / token）。

    Returns:
        形状 `(B, 1)` 的 0/1 浮点张量（1 保留，0 丢弃），dtype 同 `mask`。

    Raises:
        ValueError: 形状不符。
    """
    check_ndim("logps", logps, 2, "(B, T)")
    check_shape("sampler_logps", sampler_logps, logps.shape, like="logps")
    check_mask("mask", mask, logps.shape, like="logps")
    advantages = advantages.reshape(-1, 1) if advantages.dim() == 1 else advantages
    check_shape("advantages", advantages, (logps.shape[0], 1), like="(B, 1)")
    kl = torch.nan_to_num(sampler_logps - logps.detach(), nan=0.0)
    mean_kl = (kl * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
    return ((advantages >= 0) | (mean_kl <= threshold)).to(mask.dtype)


# --8<-- [end:off_policy_sequence_mask]
