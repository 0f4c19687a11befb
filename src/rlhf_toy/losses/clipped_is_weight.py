r"""截断并截断梯度的重要性权重乘 $\log\pi_\theta$：CISPO（TRL `loss_type="cispo"`）。

PPO/GRPO 截断的是 $w A$ 这一项：比率越界的 token 梯度为 0，整个 token 被丢掉。CISPO 反过来，只截断**权重**：

$$\ell_{i,t} = -\operatorname{sg}\big(\min(w_{i,t},\ \epsilon_{max})\big)\,\hat A_i\,\log\pi_\theta(o_{i,t}),
\qquad w_{i,t} = \frac{\pi_\theta(o_{i,t})}{\pi_{old}(o_{i,t})}$$

$\operatorname{sg}$ 是 stop-gradient（`.detach()`）。梯度是 $-\min(w, \epsilon_{max})\hat A\,\nabla\log\pi_\theta$：
每个 token 都有梯度，比率太大时只是权重封顶在 $\epsilon_{max}$，而不是变成 0（见 `gradient_weight`）。
出处：MiniMax-M1（arXiv 2506.13585）的 CISPO 目标（式号未核对），权重写作 $\operatorname{clip}(r, 1-\epsilon^{IS}_{low},
1+\epsilon^{IS}_{high})$，论文只调上界、不设下界；TRL 1.16 按 ScaleRL（arXiv 2510.13786）的写法
$\operatorname{sg}(\min(\rho, \epsilon_{max}))$ 实现，**`epsilon_high` 就是绝对上界 $\epsilon_{max}$**（不是 $1+\epsilon_{high}$），
TRL 的 docstring 推荐 5.0；不设时 TRL 退回 `epsilon`（默认 0.2），于是同策略时每个权重都是 0.2。
"""

# --8<-- [start:imports]
from __future__ import annotations

from torch import Tensor

from rlhf_toy._checks import check_choice
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean
from rlhf_toy.losses.grpo import (
    IMPORTANCE_SAMPLING_LEVELS,
    _check_grpo_inputs,
    _check_sequence_level,
    sequence_log_ratio,
)

# --8<-- [end:imports]


# --8<-- [start:gradient_weight]
def gradient_weight(ratio: Tensor, advantage: Tensor | float, epsilon_high: float = 5.0) -> Tensor:
    r"""目标对 $\log\pi_\theta(o_{i,t})$ 的导数 $\min(w, \epsilon_{max})\,\hat A$（损失的梯度是它的相反数）。

    与截断代理目标不同，这里没有梯度为 0 的区域：$w > \epsilon_{max}$ 时权重封顶在 $\epsilon_{max}\hat A$，
    $w < 1$ 时权重就是 $w\hat A$（不设下界）。

    Args:
        ratio: 重要性采样比率 $w$，任意形状，非负。
        advantage: 优势 $\hat A$，可与 `ratio` 广播。
        epsilon_high: 权重上界 $\epsilon_{max}$（TRL `epsilon_high`）。

    Returns:
        与 `ratio`、`advantage` 广播后同形状的权重。

    Examples:
        >>> import torch
        >>> gradient_weight(torch.tensor([0.5, 1.0, 9.0]), 1.0).tolist()
        [0.5, 1.0, 5.0]
    """
    return ratio.clamp(max=epsilon_high) * advantage


# --8<-- [end:gradient_weight]


# --8<-- [start:clipped_is_weight_loss]
def clipped_is_weight_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    ref_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon_high: float = 5.0,
    beta: float = 0.0,
    importance_sampling_level: str = "token",
) -> tuple[Tensor, dict[str, float]]:
    r"""CISPO 损失：$\ell_{i,t} = -\operatorname{sg}(\min(w_{i,t}, \epsilon_{max}))\hat A_i\log\pi_\theta + \beta k_3$，按 token 平均。

    与 TRL 1.16 `GRPOTrainer._compute_loss` 在 `loss_type="cispo"` 时逐式相同（单进程、无梯度累积）：
    汇总同 `dapo`（全部掩码内 token 平均，见 `aggregate_loss`），$\beta k_3$ 逐 token 加在权重项之后。
    `importance_sampling_level="sequence"` 时 $w$ 换成 GSPO 的序列比率 $s_i$（`sequence_log_ratio`），每条回答一个权重，
    乘在它每个 token 的 $\log\pi_\theta$ 上，求和即 $-s_i\hat A_i\log\pi_\theta(o_i)$。TRL 构造训练器时对这个组合打一条
    日志警告（与 `bnpo`、`dr_grpo`、`dapo` 同一条：“按 token 求和使每条回答按长度加权”）；这里不警告，因为 CISPO 的
    token 级版本本来就按 token 求和 $\log\pi_\theta$，序列级并没有多乘一个长度。
    损失的**数值**含 $\log\pi_\theta$，本身没有意义（它不是代理目标），有意义的是梯度。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时的 $\log\pi_{old}$，形状 `(B, T)`，不带梯度；`None` 时取 `logps.detach()`（权重恒为
            $\min(1, \epsilon_{max})$）。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`；`beta == 0` 时可为 `None`。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`（`"sequence"` 时只能是 `(B,)`）。
        mask: 0/1 损失掩码，形状 `(B, T)`。`mask_truncated_completions=True` 时被截停的回答整行为 0：
            它们既不进分子也不进分母。
        epsilon_high: 权重上界 $\epsilon_{max} \ge 0$（TRL `epsilon_high`；默认 5.0 是 TRL docstring 的推荐值，
            TRL 的实际默认是不设、退回 `epsilon=0.2`）。
        beta: KL 系数 $\beta \ge 0$（TRL 1.16 默认 0）。
        importance_sampling_level: `"token"` 或 `"sequence"`，同 TRL。

    Returns:
        `(loss, metrics)`：标量损失；`metrics["cispo_clip_ratio"]` 是 TRL 的同名指标，$w > \epsilon_{max}$ 且
        $\hat A > 0$ 的 token 比例（$\hat A < 0$ 的 token 权重同样封顶，但 TRL 不计入）；`beta > 0` 时另有 `kl`。

    Raises:
        ValueError: 形状不符、含非有限值、`mask` 不是 0/1、`epsilon_high`/`beta` 为负、`beta > 0` 却没有 `ref_logps`、
            `importance_sampling_level` 未知，或 `"sequence"` 时 `advantages` 是 `(B, T)`。
    """
    _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, 0.0, epsilon_high)
    check_choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    if importance_sampling_level == "sequence":
        _check_sequence_level(advantages, logps, "grpo")  # 只检查 advantages 是 (B,)，不发警告
    old_logps = logps.detach() if old_logps is None else old_logps
    adv = advantages.detach().unsqueeze(-1) if advantages.dim() == 1 else advantages.detach()
    if importance_sampling_level == "sequence":
        log_ratio = sequence_log_ratio(logps, old_logps, mask)  # (B, 1)
    else:
        log_ratio = logps - old_logps
    ratio = log_ratio.detach().exp()
    weight = ratio.clamp(max=epsilon_high)  # 权重不带梯度：梯度只经过 log π_θ
    per_token_loss = -weight * adv * logps
    capped = ((ratio > epsilon_high) & (adv > 0)).float()
    metrics = {"cispo_clip_ratio": capped.mean().item() if capped.shape[1] == 1 else masked_mean(capped, mask).item()}
    if beta > 0:
        kl = kl_estimate(logps, ref_logps, "k3")
        per_token_loss = per_token_loss + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), mask).item()
    return aggregate_loss(per_token_loss.expand_as(logps), mask, "dapo"), metrics


# --8<-- [end:clipped_is_weight_loss]


def clipped_is_weight(ratio: Tensor, epsilon_high: float = 5.0) -> Tensor:
    r"""CISPO 的权重 $\operatorname{sg}(\min(w, \epsilon_{max}))$：封顶、不带梯度。

    Args:
        ratio: 重要性采样比率，任意形状。
        epsilon_high: 上界 $\epsilon_{max}$（TRL `epsilon_high`）。

    Returns:
        与 `ratio` 同形状、`requires_grad=False` 的张量。

    Examples:
        >>> import torch
        >>> clipped_is_weight(torch.tensor([0.5, 7.0])).tolist()
        [0.5, 5.0]
    """
    return ratio.detach().clamp(max=epsilon_high)
