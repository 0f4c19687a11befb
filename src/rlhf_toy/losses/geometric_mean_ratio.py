r"""最大化逐 token 截断比率的几何平均：GMPO（TRL `trl.experimental.gmpo.GMPOTrainer`）。

GRPO 对一条回答的 token 项取**算术**平均，一个比率极端的 token 就能主导整条回答。GMPO（Zhao et al., 2025,
arXiv 2507.20673，*Geometric-Mean Policy Optimization*）改取**几何**平均，并在对数空间里逐 token 截断：

$$\log\tilde w_{i,t} = \begin{cases}\min\big(\log w_{i,t},\ \epsilon_{high}\big) & \hat A_i > 0\\
\max\big(\log w_{i,t},\ -\epsilon\big) & \hat A_i \le 0\end{cases},\qquad
s_i = \exp\Big(\frac{1}{\lvert o_i\rvert}\sum_t m_{i,t}\log\tilde w_{i,t}\Big),\qquad
\mathcal L = \frac1B\sum_i \big(-s_i\hat A_i + \beta\,\bar k_{3,i}\big)$$

$\bar k_{3,i}$ 是第 $i$ 条回答内 $k_3$ 的 token 平均。截断只在“会让目标继续变大”的一侧起作用（PPO 的 `min`
在对数空间里的写法）：$\hat A > 0$ 时只封顶 $\log w \le \epsilon_{high}$，$\hat A \le 0$ 时只托底
$\log w \ge -\epsilon$。比率空间的截断区间是 $(e^{-\epsilon}, e^{\epsilon_{high}})$，GMPO 论文与 TRL 的 `GMPOConfig`
默认 $\epsilon = 0.4$（$e^{\pm0.4} \approx (0.67, 1.49)$，比 GRPO 的 $(0.8, 1.2)$ 宽）。
与 GSPO 的区别：GSPO 先取几何平均再截断 $s_i$（一条回答要么全截要么不截），GMPO 先逐 token 截断再取几何平均。

与 TRL 1.16 `GMPOTrainer._compute_loss` 逐式相同（单进程、无梯度累积），只有一处有意的差异：整行掩码为 0 的回答
（例如 `mask_truncated_completions=True` 截掉的）在 TRL 里 $s_i = e^0 = 1$，贡献 $-\hat A_i/B$ 这个常数（梯度为 0）；
本函数让它贡献 0，同 `grpo`。梯度两边相同。GMPO 不读 `loss_type` 与 `importance_sampling_level`。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_not_empty, check_shape
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.losses.grpo import _check_grpo_inputs

# --8<-- [end:imports]


# --8<-- [start:clipped_log_ratio]
def clipped_log_ratio(
    log_ratio: Tensor, advantages: Tensor, epsilon: float = 0.4, epsilon_high: float | None = None
) -> Tensor:
    r"""GMPO 的逐 token 对数比率截断：$\hat A > 0$ 时 $\min(\log w, \epsilon_{high})$，否则 $\max(\log w, -\epsilon)$。

    Args:
        log_ratio: $\log w = \log\pi_\theta - \log\pi_{old}$，任意形状，带梯度。
        advantages: 优势，可与 `log_ratio` 广播；只用符号。
        epsilon: 对数空间的下侧幅度（下界 $-\epsilon$；TRL `GMPOConfig.epsilon`，默认 0.4）。
        epsilon_high: 对数空间的上界 $\epsilon_{high}$；`None` 表示等于 `epsilon`。

    Returns:
        与 `log_ratio` 同形状的截断后对数比率；被截断处梯度为 0。

    Examples:
        >>> clipped_log_ratio(torch.tensor([-1.0, 1.0]), torch.tensor([1.0, 1.0])).tolist()
        [-1.0, 0.4000000059604645]
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    clamped = log_ratio.clamp(-epsilon, eps_high)
    return torch.where(advantages > 0, torch.minimum(log_ratio, clamped), torch.maximum(log_ratio, clamped))


# --8<-- [end:clipped_log_ratio]


# --8<-- [start:gradient_weight]
def gradient_weight(
    ratio: Tensor, advantage: Tensor | float, epsilon: float = 0.4, epsilon_high: float | None = None
) -> Tensor:
    r"""只有一个 token 的回答里，目标 $s\hat A$ 对 $\log\pi_\theta$ 的导数：未截断时 $w\hat A$，截断时 0。

    一般长度 $\lvert o_i\rvert$ 时，未截断 token 的导数是 $s_i\hat A_i/\lvert o_i\rvert$（$s_i$ 是截断后比率的几何平均），
    截断的 token 为 0；画成 $w$ 的函数时与单 token 的情形只差常数因子。截断区间是 $(e^{-\epsilon}, e^{\epsilon_{high}})$。

    Args:
        ratio: token 比率 $w > 0$，任意形状。
        advantage: 优势 $\hat A$，可与 `ratio` 广播。
        epsilon: 对数空间的下侧幅度。
        epsilon_high: 对数空间的上界；`None` 表示等于 `epsilon`。

    Returns:
        广播后同形状的权重。

    Examples:
        >>> gradient_weight(torch.tensor([1.0, 2.0]), 1.0).tolist()
        [1.0, 0.0]
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    advantage = torch.as_tensor(advantage, dtype=ratio.dtype)
    log_w = ratio.log()
    clipped = torch.where(advantage > 0, log_w > eps_high, log_w < -epsilon)
    return torch.where(clipped, 0.0, ratio * advantage)


# --8<-- [end:gradient_weight]


# --8<-- [start:geometric_mean_ratio_loss]
def geometric_mean_ratio_loss(
    logps: Tensor,
    old_logps: Tensor | None,
    ref_logps: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon: float = 0.4,
    epsilon_high: float | None = None,
    beta: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    r"""GMPO 损失 $\frac1B\sum_i\big(-s_i\hat A_i + \beta\bar k_{3,i}\big)$，$s_i$ 是截断后逐 token 比率的几何平均。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时的 $\log\pi_{old}$，形状 `(B, T)`，不带梯度；`None` 时取 `logps.detach()`（$s_i = 1$，梯度是
            $-\hat A_i/\lvert o_i\rvert$ 乘 $\nabla\log\pi_\theta$，即 `grpo` 汇总的策略梯度）。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`；`beta == 0` 时可为 `None`。
        advantages: 优势，形状 `(B,)`（每条回答一个；TRL 的 GMPO 也只接受这种形状）。
        mask: 0/1 损失掩码，形状 `(B, T)`；整行为 0 的回答贡献 0（TRL 贡献常数 $-\hat A_i/B$，见模块说明），仍算在 $B$ 里。
        epsilon: 对数空间的下侧幅度 $\epsilon \ge 0$（TRL `GMPOConfig.epsilon`，默认 0.4）。
        epsilon_high: 对数空间的上界 $\epsilon_{high} \ge 0$；`None` 表示等于 `epsilon`（TRL 同）。
        beta: KL 系数 $\beta \ge 0$（TRL 默认 0）；KL 在每条回答内按 token 平均后加到序列损失上。

    Returns:
        `(loss, metrics)`：标量损失与 TRL GMPO 记录的 `clip_ratio/low_mean`（$\log w < -\epsilon$ 且 $\hat A < 0$
        的 token 比例）、`clip_ratio/high_mean`（$\log w > \epsilon_{high}$ 且 $\hat A > 0$）、`clip_ratio/region_mean`；
        `beta > 0` 时另有 `kl`。

    Raises:
        ValueError: 形状不符（`advantages` 必须是 `(B,)`）、空批次、含非有限值、`mask` 不是 0/1、
            `epsilon`/`epsilon_high`/`beta` 为负、`beta > 0` 却没有 `ref_logps`。
    """
    _check_grpo_inputs(logps, old_logps, ref_logps, advantages, mask, beta, epsilon, epsilon_high)
    check_shape("advantages", advantages, logps.shape[:1], like="logps 的第 0 维：每条回答一个优势")
    check_not_empty("logps", logps)
    old_logps = logps.detach() if old_logps is None else old_logps
    adv = advantages.detach()
    log_ratio = logps - old_logps
    clipped = clipped_log_ratio(log_ratio, adv.unsqueeze(-1), epsilon, epsilon_high)
    lengths = mask.sum(-1)
    log_s = torch.where(mask.bool(), clipped, 0.0).sum(-1) / lengths.clamp(min=1.0)  # 几何平均的对数，(B,)
    per_sequence_loss = -log_s.exp() * adv
    eps_high = epsilon if epsilon_high is None else epsilon_high
    low = ((log_ratio.detach() < -epsilon) & (adv.unsqueeze(-1) < 0)).float()
    high = ((log_ratio.detach() > eps_high) & (adv.unsqueeze(-1) > 0)).float()
    metrics = {
        "clip_ratio/low_mean": masked_mean(low, mask).item(),
        "clip_ratio/high_mean": masked_mean(high, mask).item(),
        "clip_ratio/region_mean": masked_mean(torch.maximum(low, high), mask).item(),
    }
    if beta > 0:
        kl = kl_estimate(logps, ref_logps, "k3")
        per_sequence_loss = per_sequence_loss + beta * masked_mean(kl, mask, dim=-1)
        metrics["kl"] = masked_mean(kl.detach(), mask).item()
    return torch.where(lengths > 0, per_sequence_loss, 0.0).mean(), metrics


# --8<-- [end:geometric_mean_ratio_loss]
