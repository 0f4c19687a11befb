r"""GMPO 的 verl 写法：最大化逐 token 比率的几何平均，而不是算术平均。

GMPO（Geometric-Mean Policy Optimization, Zhao et al., 2025, arXiv 2507.20673）把 GRPO 的
$\frac1{\lvert o\rvert}\sum_t w_t\hat A$ 换成 $\big(\prod_t w_t\big)^{1/\lvert o\rvert}\hat A$：几何平均对个别极端的比率不敏感，
于是可以放宽截断范围。截断在对数空间里、按优势的符号只截一侧（PPO 的信任域），而且在取几何平均**之前**逐 token 截断。
本模块只写 verl 0.9.1 的约定（`compute_policy_loss_geo_mean`，`policy_loss.loss_mode="geo_mean"`，移植自论文代码
callsys/GMPO）；TRL 的 GMPO（`trl.experimental.gmpo`）另有模块。约定：**损失 = −目标**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_nonnegative
from rlhf_toy.losses._token_inputs import check_policy_inputs
from rlhf_toy.losses.aggregate import masked_mean

# --8<-- [end:imports]


# --8<-- [start:sign_clipped_log_ratio]
def sign_clipped_log_ratio(
    log_ratio: Tensor, advantages: Tensor, epsilon: float = 0.2, epsilon_high: float | None = None
) -> Tensor:
    r"""按优势符号单侧截断的对数比率 $\operatorname{sgn}(\hat A)\min\big(\operatorname{sgn}(\hat A)\log w,\ \operatorname{sgn}(\hat A)\,\mathrm{clip}(\log w, -\epsilon, \epsilon_{high})\big)$。

    即 $\hat A > 0$ 时 $\min(\log w, \epsilon_{high})$，$\hat A < 0$ 时 $\max(\log w, -\epsilon)$，$\hat A = 0$ 时为 0
    （verl 照写 `torch.sign`，所以零优势的 token 对几何平均的贡献是 $\log w = 0$）。梯度在被截断的 token 上为 0。

    Args:
        log_ratio: $\log w = \log\pi_\theta - \log\pi_{old}$，任意形状，可带梯度。
        advantages: 优势，可与 `log_ratio` 广播。
        epsilon: 对数空间的下侧幅度（比率下界 $e^{-\epsilon}$）。
        epsilon_high: 对数空间的上侧幅度（比率上界 $e^{\epsilon_{high}}$）；`None` 表示等于 `epsilon`。

    Returns:
        广播后的形状。

    Examples:
        >>> import torch
        >>> sign_clipped_log_ratio(torch.tensor([-1.0, 1.0, -1.0, 1.0]), torch.tensor([1.0, 1.0, -1.0, -1.0]))
        tensor([-1.0000,  0.2000, -0.2000,  1.0000])
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    sign = torch.sign(advantages)
    clamped = torch.clamp(log_ratio, -epsilon, eps_high)
    return sign * torch.min(sign * log_ratio, sign * clamped)


# --8<-- [end:sign_clipped_log_ratio]


# --8<-- [start:gmpo_loss_verl]
def gmpo_loss_verl(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""verl 的 GMPO 损失：每条回答一个几何平均比率，

    $$\ell_i = -\bar A_i\,\exp\Big(\frac{1}{\lvert o_i\rvert}\sum_t m_{i,t}\,\widetilde{\log w}_{i,t}\Big),\qquad
    \mathcal L = \frac1B\sum_i \ell_i,$$

    $\widetilde{\log w}$ 是 [`sign_clipped_log_ratio`][rlhf_toy.losses.geometric_mean.sign_clipped_log_ratio]，
    $\bar A_i = \frac{1}{\lvert o_i\rvert}\sum_t m_{i,t}\hat A_{i,t}$（序列级优势时就是 $\hat A_i$）。
    与 verl 0.9.1 `compute_policy_loss_geo_mean` 逐式相同（verl 的分母是 $\lvert o_i\rvert + 10^{-8}$，这里是
    $\max(\lvert o_i\rvert, 1)$：相对差 $10^{-8}/\lvert o_i\rvert$，低于 float32 的舍入）。verl 的约定与论文、TRL 的差异：

    - **截断幅度在对数空间**：verl 把 PPO 的 `clip_ratio_low` / `clip_ratio_high` 直接当作 $\log w$ 的幅度，
      比率范围是 $(e^{-\epsilon_{low}}, e^{\epsilon_{high}})$；默认配置（0.2）给出 $(0.819, 1.221)$。
      论文（TRL 文档引作 Sec. 4）推荐更宽的 $(e^{-0.4}, e^{0.4})$，TRL `GMPOConfig` 的示例也用 `epsilon=0.4`。
    - **汇总是写死的**：verl 忽略 `loss_agg_mode`，对全部 $B$ 条回答取普通平均（整行掩码为 0 的回答贡献 0 但计入 $B$，
      这一点与 verl 别的 `seq-mean` 汇总不同，与本书、TRL 的 `grpo` 相同），所以这里没有 `loss_type` 参数。
    - 比率不限幅（verl 把那一行注释掉了）。
    - 论文写成 $\operatorname{sgn}(\hat A)\prod_t\lvert\cdot\rvert^{1/\lvert o\rvert}$；序列级优势时与上式相同。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`，不带梯度。逐 token 的优势在每条回答内取平均（verl 只支持序列级优势，
            并说明逐 token 时与论文不一致）。
        mask: 0/1 掩码，形状 `(B, T)`。
        epsilon: 对数空间的下侧幅度 $\epsilon_{low} \ge 0$（verl `clip_ratio_low`，默认 0.2）。
        epsilon_high: 对数空间的上侧幅度（verl `clip_ratio_high`）；`None` 表示等于 `epsilon`。

    Returns:
        `(loss, metrics)`：标量损失与 verl 的指标 `actor/pg_clipfrac`、`actor/pg_clipfrac_lower`（掩码内
        $\mathrm{clip}(\log w)\ne\log w$ 且 $\hat A > 0$、$\hat A < 0$ 的 token 比例——verl 数的是“限幅改变了值”的 token，
        包括 `min` 最终没有选中限幅值的那一侧）、`actor/ppo_kl`（$\overline{-\log w}$）。

    Raises:
        ValueError: 形状不符、`B = 0`、含非有限值、`old_logps` 带梯度、`mask` 不是 0/1，或 `epsilon`/`epsilon_high` 为负。

    Examples:
        >>> import math, torch
        >>> old = torch.zeros(1, 2)
        >>> logps = torch.tensor([[0.1, 0.5]])  # 第二个 token 的 log w = 0.5 被截到 0.2
        >>> loss, _ = gmpo_loss_verl(logps, old, torch.tensor([1.0]), torch.ones(1, 2))
        >>> round(loss.item(), 6) == round(-math.exp((0.1 + 0.2) / 2), 6)
        True
    """
    adv = check_policy_inputs(logps, old_logps, advantages, mask)
    check_nonnegative("epsilon", epsilon)
    if epsilon_high is not None:
        check_nonnegative("epsilon_high", epsilon_high)
    log_ratio = logps - old_logps
    clipped_log_ratio = sign_clipped_log_ratio(log_ratio, adv, epsilon, epsilon_high)
    inside = mask.bool()
    length = mask.sum(-1).clamp(min=1.0)
    log_s = torch.where(inside, clipped_log_ratio, 0.0).sum(-1) / length  # 选取，不相乘
    seq_advantage = torch.where(inside, adv, 0.0).sum(-1) / length
    loss = (-seq_advantage * log_s.exp()).mean()
    eps_high = epsilon if epsilon_high is None else epsilon_high
    changed = log_ratio.detach() != log_ratio.detach().clamp(-epsilon, eps_high)
    metrics = {
        "actor/pg_clipfrac": masked_mean((changed & (adv > 0)).to(logps.dtype), mask).item(),
        "actor/pg_clipfrac_lower": masked_mean((changed & (adv < 0)).to(logps.dtype), mask).item(),
        "actor/ppo_kl": masked_mean(-log_ratio.detach(), mask).item(),
    }
    return loss, metrics


# --8<-- [end:gmpo_loss_verl]


# --8<-- [start:gmpo_gradient_weight_verl]
def gmpo_gradient_weight_verl(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
) -> Tensor:
    r"""回答 $i$ 的损失 $\ell_i$ 对 $\log\pi_\theta(o_{i,t})$ 的导数：$-\bar A_i\,s_i\,m_{i,t}\,u_{i,t}/\lvert o_i\rvert$。

    $s_i$ 是截断后的几何平均比率，$u_{i,t} = 1$ 表示 token $t$ 没有被单侧截断（被截断或 $\hat A = 0$ 时为 0）。
    与 GRPO 的 $-w_{i,t}\hat A_i/\lvert o_i\rvert$ 相比，一个 token 的梯度系数不看它自己的比率 $w_{i,t}$，而看整条回答的
    几何平均 $s_i$：一个极端的 $w_{i,t}$ 被 $1/\lvert o_i\rvert$ 次方压住。单 token 的回答（$\lvert o\rvert = 1$）时 $s = w$，
    系数就是 $-w\hat A$（截断一侧为 0），与 PPO 相同。

    Args:
        logps: 逐 token 对数概率，形状 `(B, T)`。
        old_logps: 采样时的对数概率，形状 `(B, T)`。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`。
        epsilon: 对数空间的下侧幅度。
        epsilon_high: 对数空间的上侧幅度；`None` 表示等于 `epsilon`。

    Returns:
        形状 `(B, T)`（不带梯度）；掩码为 0 处为 0。乘以 $1/B$ 就是 `gmpo_loss_verl` 的梯度。

    Raises:
        ValueError: 同 [`gmpo_loss_verl`][rlhf_toy.losses.geometric_mean.gmpo_loss_verl]。
    """
    adv = check_policy_inputs(logps, old_logps, advantages, mask)
    eps_high = epsilon if epsilon_high is None else epsilon_high
    log_ratio = (logps - old_logps).detach()
    inside = mask.bool()
    length = mask.sum(-1, keepdim=True).clamp(min=1.0)
    clipped = sign_clipped_log_ratio(log_ratio, adv, epsilon, epsilon_high)
    s = (torch.where(inside, clipped, 0.0).sum(-1, keepdim=True) / length).exp()
    seq_advantage = torch.where(inside, adv, 0.0).sum(-1, keepdim=True) / length
    unclipped = torch.where(adv > 0, log_ratio <= eps_high, log_ratio >= -epsilon) & (adv != 0) & inside
    return -seq_advantage * s * unclipped.to(logps.dtype) / length


# --8<-- [end:gmpo_gradient_weight_verl]
