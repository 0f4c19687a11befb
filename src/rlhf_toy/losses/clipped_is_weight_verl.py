r"""CISPO 的 verl 写法：截断的重要性采样权重只作常数系数（stop-gradient），梯度总经过 $\log\pi_\theta$。

CISPO（MiniMax-M1, MiniMax, 2025, arXiv 2506.13585，CISPO 一节的目标函数）是
$\frac{1}{\sum_i\lvert o_i\rvert}\sum_{i,t}\operatorname{sg}(\hat r_{i,t})\,\hat A_{i,t}\log\pi_\theta(o_{i,t})$，$\hat r = \mathrm{clip}(r, 1-\epsilon^{IS}_{low}, 1+\epsilon^{IS}_{high})$：
与 PPO 不同，比率被截断的 token 仍有梯度（只是系数被压住）。本模块只写 verl 0.9.1 的约定
（`compute_policy_loss_cispo`，`policy_loss.loss_mode="cispo"`）；TRL 的 `loss_type="cispo"` 另有模块。
与论文、TRL 的差异见 [`cispo_loss_verl`][rlhf_toy.losses.clipped_is_weight_verl.cispo_loss_verl]。约定：**损失 = −目标**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_nonnegative
from rlhf_toy.losses._token_inputs import VERL_LOG_RATIO_CLAMP, check_policy_inputs
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean

# --8<-- [end:imports]


# --8<-- [start:cispo_loss_verl]
def cispo_loss_verl(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    loss_type: str = "bnpo",
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""verl 的 CISPO 损失：逐 token $\ell_{i,t} = -\operatorname{sg}\big(\mathrm{clip}(w_{i,t}, 1-\epsilon, 1+\epsilon_{high})\big)\hat A_{i,t}\log\pi_\theta(o_{i,t})$，
    $w = \exp\big(\mathrm{clamp}(\log\pi_\theta - \log\pi_{old}, -20, 20)\big)$，再按 `loss_type` 汇总。

    与 verl 0.9.1 `compute_policy_loss_cispo` 逐式相同。verl 的约定与论文、TRL 的差异：

    - **截断的两侧**：verl 用 PPO 的 `clip_ratio_low` / `clip_ratio_high`（默认都是 0.2）作相对幅度，
      两侧都截：$[1-\epsilon_{low}, 1+\epsilon_{high}]$ = 默认 $[0.8, 1.2]$，与 PPO 的截断范围相同。论文的式子同样是
      $1\pm\epsilon^{IS}$ 的相对形式，但它的 $\epsilon^{IS}$ 是为 IS 权重单独调的（论文 §3.1：$\epsilon^{IS}_{low}$
      设得很大，只调 $\epsilon^{IS}_{high}$），不是 PPO 的 0.2；TRL 的 `epsilon_high` 则是**绝对**上限（$\min(w, \epsilon_{high})$，推荐 5.0），没有下界。
    - **汇总**：verl 读 `loss_agg_mode`，默认 `token-mean`：按整个小批的 token 数归一；论文式 (4) 按每个提示词的
      $G$ 条回答的 token 数归一；TRL 按 `dapo` 汇总（整个生成批次的 token 数）。
    - verl 先把 $\log w$ 限幅到 $[-20, 20]$（只影响比率的值，不影响梯度，因为比率不带梯度）。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`，不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`。
        epsilon: 下侧幅度 $\epsilon_{low}$（verl `clip_ratio_low`，默认 0.2）。
        epsilon_high: 上侧幅度 $\epsilon_{high}$（verl `clip_ratio_high`）；`None` 表示等于 `epsilon`。
        loss_type: 汇总方式，默认 `"bnpo"`（verl 的 `token-mean`）。
        max_completion_length: `dr_grpo` 的常数分母 $L$；默认取 `T`。

    Returns:
        `(loss, metrics)`：标量损失与 verl 的指标 `actor/pg_clipfrac`（掩码内比率被截断、$w \ne \hat r$ 的 token 比例，
        不看优势的符号）、`actor/ppo_kl`（限幅后的 $\overline{-\log w}$）。

    Raises:
        ValueError: 形状不符、`B = 0`、含非有限值、`old_logps` 带梯度、`mask` 不是 0/1、`epsilon`/`epsilon_high` 为负，
            或 `loss_type` 未知。
    """
    adv = check_policy_inputs(logps, old_logps, advantages, mask)
    check_nonnegative("epsilon", epsilon)
    eps_high = epsilon if epsilon_high is None else epsilon_high
    check_nonnegative("epsilon_high", eps_high)
    log_ratio = (logps - old_logps).clamp(-VERL_LOG_RATIO_CLAMP, VERL_LOG_RATIO_CLAMP)
    ratio = log_ratio.detach().exp()
    clipped = ratio.clamp(1 - epsilon, 1 + eps_high)
    per_token_loss = -clipped * adv * logps
    loss = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length)
    metrics = {
        "actor/pg_clipfrac": masked_mean((ratio != clipped).to(logps.dtype), mask).item(),
        "actor/ppo_kl": masked_mean(-log_ratio.detach(), mask).item(),
    }
    return loss, metrics


# --8<-- [end:cispo_loss_verl]


# --8<-- [start:cispo_gradient_weight_verl]
def cispo_gradient_weight_verl(
    ratio: Tensor, advantages: Tensor, epsilon: float = 0.2, epsilon_high: float | None = None
) -> Tensor:
    r"""逐 token 损失对 $\log\pi_\theta$ 的导数：$-\mathrm{clip}(w_t, 1-\epsilon, 1+\epsilon_{high})\,\hat A_t$。

    与 PPO 的对照：PPO 在截断起作用的一侧给 0，这里给被压住的常数 $(1\pm\epsilon)\hat A_t$，永不为 0（除非 $\hat A_t = 0$）。

    Args:
        ratio: 重要性采样比率 $w_t > 0$，任意形状。
        advantages: 优势 $\hat A_t$，可与 `ratio` 广播。
        epsilon: 下侧幅度 $\epsilon_{low}$。
        epsilon_high: 上侧幅度；`None` 表示等于 `epsilon`。

    Returns:
        广播后的形状。

    Examples:
        >>> import torch
        >>> cispo_gradient_weight_verl(torch.tensor([0.5, 1.0, 3.0]), torch.tensor(1.0))
        tensor([-0.8000, -1.0000, -1.2000])
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    return -torch.clamp(ratio, 1 - epsilon, 1 + eps_high) * advantages


# --8<-- [end:cispo_gradient_weight_verl]
