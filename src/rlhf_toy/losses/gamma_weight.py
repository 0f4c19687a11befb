r"""用 Gamma 形核给整条回答的重要性权重整形，再乘 $\log\pi_\theta$：VESPO（TRL `loss_type="vespo"`）。

VESPO（arXiv 2602.10693，*Variational Sequence-Level Soft Policy Optimization*）不截断，而是把**整条回答**的比率
$W_i = \pi_\theta(o_i)/\pi_{old}(o_i) = \exp\sum_t m_{i,t}\log w_{i,t}$（乘积，不开 $\lvert o_i\rvert$ 次方）送进一个光滑的核

$$\phi(W) = W^{k}\,e^{-\lambda (W-1)} = \exp\big(\lambda + k\log W - \lambda W\big),\qquad \phi(1) = 1,$$

再像 REINFORCE 一样乘在 $\log\pi_\theta$ 上，$\phi$ 不带梯度：

$$\ell_{i,t} = -\operatorname{sg}\big(\phi(W_i)\big)\,\hat A_i\,\log\pi_\theta(o_{i,t}),\qquad
(k, \lambda) = \begin{cases}(k_{pos}, \lambda_{pos}) = (2, 3) & \hat A_i \ge 0\\ (k_{neg}, \lambda_{neg}) = (3, 2) & \hat A_i < 0\end{cases}$$

$\phi$ 在 $W = k/\lambda$ 处最大，$W \to 0$ 时像 $W^k$ 一样衰减（$k$ 管“比率太小”），$W$ 大时像 $e^{-\lambda W}$
一样衰减（$\lambda$ 管“比率太大”）。默认值与 TRL 1.16 `GRPOConfig.vespo_*` 相同。

与 TRL `GRPOTrainer.get_gamma_weights` 及 `_compute_loss` 的 `vespo` 分支逐式相同，包括它的两处限幅：逐 token
$\log w$ 限幅到 $[-20, 20]$，求和后的 $\log W$ 限幅到 $[\log 10^{-8}, 20]$；$\lambda$ 至少取 $10^{-4}$。
汇总同 `dapo`（掩码内全部 token 平均）。TRL 在 `use_vllm` 时还会把采样引擎的比率并进 $W$，这里没有这一项。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math

import torch
from torch import Tensor

from rlhf_toy._checks import check_nonnegative, check_shape
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean
from rlhf_toy.losses.grpo import _check_grpo_inputs

# --8<-- [end:imports]

LOG_RATIO_CLAMP = 20.0  # TRL：逐 token log w 与求和后的 log W 的上界
MIN_LOG_WEIGHT = math.log(1e-8)  # TRL：log W 的下界


def _check_shape_params(k_pos: float, lambda_pos: float, k_neg: float, lambda_neg: float) -> None:
    for name, value in (
        ("vespo_k_pos", k_pos),
        ("vespo_lambda_pos", lambda_pos),
        ("vespo_k_neg", k_neg),
        ("vespo_lambda_neg", lambda_neg),
    ):
        check_nonnegative(name, value)


def _kernel(log_w: Tensor, nonneg: Tensor, k_pos: float, lambda_pos: float, k_neg: float, lambda_neg: float) -> Tensor:
    """$\\phi = \\exp(\\lambda + k\\log W - \\lambda W)$，在对数空间里算；溢出或 NaN 记为 0（同 TRL）。"""
    d = log_w.dtype  # 直接建成输入的 dtype（TRL 先得到 float32；默认的 2、3 两者相同）
    k = torch.where(nonneg, torch.tensor(k_pos, dtype=d), torch.tensor(k_neg, dtype=d))
    lam = torch.where(nonneg, torch.tensor(lambda_pos, dtype=d), torch.tensor(lambda_neg, dtype=d)).clamp(min=1e-4)
    return (lam + k * log_w - lam * log_w.exp()).exp().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


# --8<-- [start:gamma_weight]
def gamma_weight(
    log_ratio: Tensor,
    mask: Tensor,
    advantages: Tensor,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
) -> Tensor:
    r"""每条回答的 VESPO 权重 $\operatorname{sg}(\phi(W_i))$，$\log W_i = \sum_t m_{i,t}\log w_{i,t}$（限幅同 TRL）。

    Args:
        log_ratio: 逐 token 的 $\log w = \log\pi_\theta - \log\pi_{old}$，形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`；整行为 0 时 $W = 1$，$\phi = 1$。
        advantages: 优势，形状 `(B,)`；只用它的符号（$\hat A \ge 0$ 用正侧参数）。
        vespo_k_pos: $\hat A \ge 0$ 时的幂指数 $k \ge 0$（TRL 默认 2.0）。
        vespo_lambda_pos: $\hat A \ge 0$ 时的衰减率 $\lambda \ge 0$（TRL 默认 3.0）。
        vespo_k_neg: $\hat A < 0$ 时的 $k$（TRL 默认 3.0）。
        vespo_lambda_neg: $\hat A < 0$ 时的 $\lambda$（TRL 默认 2.0）。

    Returns:
        形状 `(B, 1)`、不带梯度的 $\phi(W_i)$，dtype 同 `log_ratio`。

    Raises:
        ValueError: 形状不符，或 $k$、$\lambda$ 为负或非有限。

    Examples:
        >>> gamma_weight(torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1)).item()
        1.0
    """
    check_shape("mask", mask, log_ratio.shape, like="log_ratio")
    check_shape("advantages", advantages, log_ratio.shape[:1], like="log_ratio 的第 0 维")
    _check_shape_params(vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg)
    log_ratio = log_ratio.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    log_w = torch.where(mask.bool(), log_ratio, 0.0).sum(-1, keepdim=True).clamp(MIN_LOG_WEIGHT, LOG_RATIO_CLAMP)
    nonneg = (advantages.detach() >= 0).unsqueeze(-1)
    return _kernel(log_w, nonneg, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg)


# --8<-- [end:gamma_weight]


# --8<-- [start:gradient_weight]
def gradient_weight(
    ratio: Tensor,
    advantage: Tensor | float,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
) -> Tensor:
    r"""目标对回答中任一 token 的 $\log\pi_\theta$ 的导数 $\phi(W)\hat A$，作为整条回答比率 $W$ 的函数。

    $W = 1$ 时等于 $\hat A$；没有硬截断，$W$ 偏离 1 时平滑衰减（$\hat A \ge 0$ 时在 $W = 2/3$ 处最大，
    $\hat A < 0$ 时在 $W = 3/2$ 处最大，默认参数下）。$W$ 先限幅到 $[10^{-8}, e^{20}]$，同 TRL。

    Args:
        ratio: 整条回答的比率 $W \ge 0$，任意形状。
        advantage: 优势 $\hat A$，可与 `ratio` 广播。
        vespo_k_pos: $\hat A \ge 0$ 时的 $k$。
        vespo_lambda_pos: $\hat A \ge 0$ 时的 $\lambda$。
        vespo_k_neg: $\hat A < 0$ 时的 $k$。
        vespo_lambda_neg: $\hat A < 0$ 时的 $\lambda$。

    Returns:
        广播后同形状的权重。

    Examples:
        >>> gradient_weight(torch.tensor([1.0]), -1.0).item()
        -1.0
    """
    _check_shape_params(vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg)
    advantage = torch.as_tensor(advantage, dtype=ratio.dtype)
    log_w = ratio.clamp(min=1e-8).log().clamp(MIN_LOG_WEIGHT, LOG_RATIO_CLAMP)
    phi = _kernel(log_w, advantage >= 0, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg)
    return phi * advantage


# --8<-- [end:gradient_weight]


# --8<-- [start:gamma_weight_loss]
def gamma_weight_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    ref_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
    beta: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    r"""VESPO 损失：$\ell_{i,t} = -\operatorname{sg}(\phi(W_i))\hat A_i\log\pi_\theta(o_{i,t}) + \beta k_3$，按 token 平均。

    与 TRL 1.16 `GRPOTrainer._compute_loss` 在 `loss_type="vespo"` 时相同（单进程、无梯度累积、不用 vLLM）。
    没有 `importance_sampling_level` 参数：TRL 的 `vespo` 分支总是从逐 token 的 $\log w$ 求和得到 $W_i$，
    `importance_sampling_level="sequence"` 只改变 `use_bias_correction_kl` 的 KL 修正，对本损失没有作用（TRL 构造训练器时
    还会警告应使用 `"token"`）。也没有 `epsilon`：核本身就是信任域。损失的**数值**含 $\log\pi_\theta$，本身没有意义。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时的 $\log\pi_{old}$，形状 `(B, T)`，不带梯度；`None` 时取 `logps.detach()`（$W = 1$，$\phi = 1$，
            即普通的 REINFORCE 损失）。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`；`beta == 0` 时可为 `None`。
        advantages: 优势，形状 `(B,)`。
        mask: 0/1 损失掩码，形状 `(B, T)`；整行为 0 的回答（`mask_truncated_completions=True` 截掉的）不进分子也不进分母。
        vespo_k_pos: $\hat A \ge 0$ 时的 $k$（TRL 默认 2.0）。
        vespo_lambda_pos: $\hat A \ge 0$ 时的 $\lambda$（TRL 默认 3.0）。
        vespo_k_neg: $\hat A < 0$ 时的 $k$（TRL 默认 3.0）。
        vespo_lambda_neg: $\hat A < 0$ 时的 $\lambda$（TRL 默认 2.0）。
        beta: KL 系数 $\beta \ge 0$（TRL 1.16 默认 0）。

    Returns:
        `(loss, metrics)`：标量损失；`metrics["vespo/phi_seq_mean"]` 是 TRL 的同名指标（$\phi(W_i)$ 对全部回答的
        平均，含整行掩码为 0 的回答）；`beta > 0` 时另有 `kl`。

    Raises:
        ValueError: 形状不符（`advantages` 必须是 `(B,)`）、含非有限值、`mask` 不是 0/1、$k$/$\lambda$/`beta` 为负、
            `beta > 0` 却没有 `ref_logps`。
    """
    _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, 0.0, None)
    check_shape("advantages", advantages, logps.shape[:1], like="logps 的第 0 维：每条回答一个 φ")
    old_logps = logps.detach() if old_logps is None else old_logps
    adv = advantages.detach().unsqueeze(-1)
    phi = gamma_weight(
        logps - old_logps, mask, advantages, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg
    )
    per_token_loss = -phi * adv * logps
    metrics = {"vespo/phi_seq_mean": phi.mean().item()}
    if beta > 0:
        kl = kl_estimate(logps, ref_logps, "k3")
        per_token_loss = per_token_loss + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), mask).item()
    return aggregate_loss(per_token_loss, mask, "dapo"), metrics


# --8<-- [end:gamma_weight_loss]
