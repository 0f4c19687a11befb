r"""Clip-Cov 与 KL-Cov：只约束“协方差大”的少数 token，以减缓策略熵的塌缩。

Cui et al., 2025（*The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models*, arXiv 2505.22617，讲 Clip-Cov 与 KL-Cov 的一节）
推出：在 softmax 策略上用策略梯度更新时，熵的变化由 token 的对数概率与优势的协方差驱动——高概率且高优势的
token 压低熵。于是只对协方差最大的一小部分 token 动手：

- Clip-Cov：在协方差落在 $(\omega_{low}, \omega_{high})$ 的 token 里随机挑 $\lfloor rN\rfloor$ 个，不让它们产生梯度；
- KL-Cov：对协方差最大的 $\lfloor kN\rfloor$ 个 token 加一项 KL 惩罚 $\beta\lvert\log\pi_\theta - \log\pi_{old}\rvert$。

逐 token 的“协方差”是中心化乘积 $c_{i,t} = (\hat A_{i,t} - \bar A)(\log\pi_\theta(o_{i,t}) - \overline{\log\pi_\theta})$，两个平均都在
整批掩码内按 token 取。与 verl 0.9.1 登记为 `"clip_cov"`、`"kl_cov"` 的 `compute_policy_loss_clip_cov`、
`compute_policy_loss_kl_cov`（移植自论文代码 PRIME-RL/Entropy-Mechanism-of-RL）对应。约定：**损失 = −目标**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy._checks import check_nonnegative
from rlhf_toy.losses._token_inputs import check_policy_inputs, check_positive
from rlhf_toy.losses.aggregate import aggregate_loss, masked_mean
from rlhf_toy.losses.grpo import clipped_surrogate

# --8<-- [end:imports]


# --8<-- [start:token_covariance]
def token_covariance(logps: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    r"""逐 token 的中心化乘积 $c_{i,t} = (\hat A_{i,t} - \bar A)(\log\pi_\theta(o_{i,t}) - \overline{\log\pi_\theta})$（不带梯度）。

    $\bar A$、$\overline{\log\pi_\theta}$ 是掩码内全部 token 的平均，所以 $c$ 在掩码内的平均就是两者的（有偏）协方差。

    Args:
        logps: 逐 token 对数概率，形状 `(B, T)`。
        advantages: 优势，形状 `(B, T)`。
        mask: 0/1 掩码，形状 `(B, T)`。

    Returns:
        形状 `(B, T)`；掩码为 0 的位置是 $-\infty$（永远不会被选中）。
    """
    inside = mask.bool()
    adv, logp = advantages.detach(), logps.detach()
    if not inside.any():
        return torch.full_like(logp, float("-inf"))
    centred = (adv - adv[inside].mean()) * (logp - logp[inside].mean())
    return torch.where(inside, centred, float("-inf"))


# --8<-- [end:token_covariance]


# --8<-- [start:clip_cov_selection]
def clip_cov_selection(
    covariance: Tensor,
    candidates: Tensor,
    clip_cov_ratio: float,
    clip_cov_lb: float,
    clip_cov_ub: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Clip-Cov 挑出的 token：在 $\omega_{low} < c < \omega_{high}$ 的候选里随机取 $\max(\lfloor rN\rfloor, 1)$ 个。

    $N$ 是掩码内的 token 数（`candidates` 之外的也算）。候选按行优先排好，用 `torch.randperm(n, generator=generator)`
    打乱后取前面的（与 verl 相同的顺序与随机数用法：`generator=None` 用全局随机数发生器，`torch.manual_seed(s)`
    之后与 verl 选出同一组 token）。候选不足时全取。

    Args:
        covariance: [`token_covariance`][rlhf_toy.losses.covariance_clip.token_covariance] 的结果，形状 `(B, T)`。
        candidates: 布尔张量 `(B, T)`：可以被选的 token（掩码内、且 PPO 截断没有起作用的）。
        clip_cov_ratio: 比例 $r$。
        clip_cov_lb: 下界 $\omega_{low}$。
        clip_cov_ub: 上界 $\omega_{high}$。
        generator: 随机数发生器；`None` 用全局的。

    Returns:
        布尔张量 `(B, T)`，`True` 表示被选中（梯度被截掉）。
    """
    num_tokens = int((covariance > float("-inf")).sum().item())
    clip_num = max(int(clip_cov_ratio * num_tokens), 1)
    window = (covariance < clip_cov_ub) & (covariance > clip_cov_lb) & candidates
    idx = torch.nonzero(window)
    if len(idx) > 0:
        perm = torch.randperm(len(idx), generator=generator)
        idx = idx[perm[: min(clip_num, len(idx))]]
    selected = torch.zeros_like(candidates, dtype=torch.bool)
    selected[idx[:, 0], idx[:, 1]] = True
    return selected


# --8<-- [end:clip_cov_selection]


# --8<-- [start:clip_cov_loss]
def clip_cov_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    generator: torch.Generator | None = None,
    loss_type: str = "bnpo",
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""Clip-Cov 的损失：PPO 的截断代理损失，另把随机挑出的高协方差 token 的损失置 0。

    逐 token $\ell_{i,t} = -\min\big(w\hat A,\ \mathrm{clip}(w, 1-\epsilon, 1+\epsilon_{high})\hat A\big)\cdot(1 - s_{i,t})$，
    $s$ 由 [`clip_cov_selection`][rlhf_toy.losses.covariance_clip.clip_cov_selection] 给出（候选不含 PPO 截断已起作用的 token），
    再按 `loss_type` 汇总。与 verl 0.9.1 `compute_policy_loss_clip_cov` 逐式相同（同一随机种子下选同一组 token）。
    verl 的约定：

    - 被选中的 token 的**损失值也是 0**（verl 乘以 `corr = 0`），论文的说法是截掉梯度（detach）；两者梯度相同，损失值不同。
    - 比率不限幅、没有 dual-clip（与 verl `vanilla` 不同）；$N$ 是本地微批的掩码 token 数。
    - 默认值是 verl `PolicyLossConfig` 的：$r = 2\times10^{-4}$、$\omega_{low} = 1$、$\omega_{high} = 5$；
      $\lfloor rN\rfloor < 1$ 时仍选 1 个（小批次上选中的比例远大于 $r$）。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`，不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`。
        epsilon: 截断下侧幅度（verl `clip_ratio_low`）。
        epsilon_high: 截断上侧幅度（verl `clip_ratio_high`）；`None` 表示等于 `epsilon`。
        clip_cov_ratio: 挑选比例 $r > 0$（verl `policy_loss.clip_cov_ratio`）。
        clip_cov_lb: 协方差下界 $\omega_{low}$（verl `policy_loss.clip_cov_lb`）。
        clip_cov_ub: 协方差上界 $\omega_{high}$（verl `policy_loss.clip_cov_ub`）。
        generator: 挑选用的随机数发生器；`None` 用全局的（与 verl 相同）。
        loss_type: 汇总方式，默认 `"bnpo"`（verl 的 `token-mean`）。
        max_completion_length: `dr_grpo` 的常数分母 $L$；默认取 `T`。

    Returns:
        `(loss, metrics)`：标量损失与 verl 的指标 `actor/pg_clipfrac`（掩码内被挑中的 token 比例；注意不含 PPO 截断的）、
        `actor/ppo_kl`（$\overline{\log\pi_{old} - \log\pi_\theta}$）。

    Raises:
        ValueError: 形状不符、`B = 0`、含非有限值、`old_logps` 带梯度、`mask` 不是 0/1、`epsilon` 为负、
            `clip_cov_ratio` 不是有限的正数、`clip_cov_lb >= clip_cov_ub`，或 `loss_type` 未知。
    """
    adv = check_policy_inputs(logps, old_logps, advantages, mask)
    check_nonnegative("epsilon", epsilon)
    if epsilon_high is not None:
        check_nonnegative("epsilon_high", epsilon_high)
    check_positive("clip_cov_ratio", clip_cov_ratio)
    if not clip_cov_lb < clip_cov_ub:
        raise ValueError(f"clip_cov_lb 应小于 clip_cov_ub，实际是 {clip_cov_lb} 与 {clip_cov_ub}")
    surrogate, is_clipped = clipped_surrogate(logps, old_logps, adv, epsilon, epsilon_high)
    covariance = token_covariance(logps, adv, mask)
    selected = clip_cov_selection(
        covariance, mask.bool() & ~is_clipped, clip_cov_ratio, clip_cov_lb, clip_cov_ub, generator
    )
    per_token_loss = surrogate * (~selected).to(logps.dtype)
    loss = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length)
    metrics = {
        "actor/pg_clipfrac": masked_mean(selected.to(logps.dtype), mask).item(),
        "actor/ppo_kl": masked_mean(old_logps - logps.detach(), mask).item(),
    }
    return loss, metrics


# --8<-- [end:clip_cov_loss]


# --8<-- [start:kl_cov_selection]
def kl_cov_selection(covariance: Tensor, kl_cov_ratio: float) -> Tensor:
    r"""KL-Cov 挑出的 token：掩码内协方差最大的 $\max(\lfloor kN\rfloor, 1)$ 个（`torch.topk`，确定性）。

    Args:
        covariance: [`token_covariance`][rlhf_toy.losses.covariance_clip.token_covariance] 的结果，形状 `(B, T)`，
            掩码外为 $-\infty$。
        kl_cov_ratio: 比例 $k$。

    Returns:
        布尔张量 `(B, T)`；掩码全为 0 时一个也不选。
    """
    inside = covariance > float("-inf")
    selected = torch.zeros_like(inside)
    valid_idx = torch.nonzero(inside.reshape(-1), as_tuple=True)[0]
    if len(valid_idx) == 0:
        return selected
    num = max(1, int(len(valid_idx) * kl_cov_ratio))
    top = torch.topk(covariance.reshape(-1)[valid_idx], num, largest=True).indices
    selected.view(-1)[valid_idx[top]] = True
    return selected


# --8<-- [end:kl_cov_selection]


# --8<-- [start:kl_cov_loss]
def kl_cov_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 0.1,
    loss_type: str = "bnpo",
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""KL-Cov 的损失：**不截断**的代理损失 $-w\hat A$，协方差最大的 token 另加 $\beta\lvert\log w\rvert$。

    逐 token $\ell_{i,t} = -w_{i,t}\hat A_{i,t} + \beta\,s_{i,t}\,\lvert\log\pi_\theta(o_{i,t}) - \log\pi_{old}(o_{i,t})\rvert$，
    $s$ 由 [`kl_cov_selection`][rlhf_toy.losses.covariance_clip.kl_cov_selection] 给出，再按 `loss_type` 汇总。
    与 verl 0.9.1 `compute_policy_loss_kl_cov` 逐式相同。verl 的约定：

    - 比率不截断（`clip_ratio*` 对 KL-Cov 不起作用），也不限幅；
    - $\beta$ 读 `policy_loss.ppo_kl_coef`：`PolicyLossConfig` 的默认是 0.1（verl 函数在它为 `None` 时才用 1.0）；
      这里的默认取 0.1；
    - 协方差的两个平均是掩码内 token 的普通平均；$N$ 是本地微批的掩码 token 数。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        old_logps: 采样时策略的对数概率，形状 `(B, T)`，不带梯度。
        advantages: 优势，形状 `(B,)` 或 `(B, T)`，不带梯度。
        mask: 0/1 掩码，形状 `(B, T)`。
        kl_cov_ratio: 挑选比例 $k > 0$（verl `policy_loss.kl_cov_ratio`）。
        ppo_kl_coef: KL 惩罚系数 $\beta \ge 0$（verl `policy_loss.ppo_kl_coef`）。
        loss_type: 汇总方式，默认 `"bnpo"`（verl 的 `token-mean`）。
        max_completion_length: `dr_grpo` 的常数分母 $L$；默认取 `T`。

    Returns:
        `(loss, metrics)`：标量损失与 verl 的指标 `actor/ppo_kl`——注意 KL-Cov 里它是 $\overline{\lvert\log w\rvert}$（取绝对值），
        与别的损失的 $\overline{-\log w}$ 不同；另加 `kl_cov_fraction`（被挑中的 token 比例，verl 不记）。

    Raises:
        ValueError: 形状不符、`B = 0`、含非有限值、`old_logps` 带梯度、`mask` 不是 0/1、`kl_cov_ratio` 不是有限的正数、
            `ppo_kl_coef` 为负，或 `loss_type` 未知。
    """
    adv = check_policy_inputs(logps, old_logps, advantages, mask)
    check_positive("kl_cov_ratio", kl_cov_ratio)
    check_nonnegative("ppo_kl_coef", ppo_kl_coef)
    log_ratio = logps - old_logps
    selected = kl_cov_selection(token_covariance(logps, adv, mask), kl_cov_ratio)
    per_token_loss = -adv * log_ratio.exp() + torch.where(selected, ppo_kl_coef * log_ratio.abs(), 0.0)
    loss = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length)
    metrics = {
        "actor/ppo_kl": masked_mean(log_ratio.detach().abs(), mask).item(),
        "kl_cov_fraction": masked_mean(selected.to(logps.dtype), mask).item(),
    }
    return loss, metrics


# --8<-- [end:kl_cov_loss]


# --8<-- [start:covariance_gradient_weights]
def clip_cov_gradient_weight(
    ratio: Tensor, advantages: Tensor, selected: Tensor, epsilon: float = 0.2, epsilon_high: float | None = None
) -> Tensor:
    r"""Clip-Cov 逐 token 损失对 $\log\pi_\theta$ 的导数：PPO 的 $-w\hat A$（截断起作用处为 0），被挑中的 token 为 0。

    Args:
        ratio: 比率 $w > 0$。
        advantages: 优势 $\hat A$，可与 `ratio` 广播。
        selected: 布尔张量，可广播：被 Clip-Cov 挑中的 token。
        epsilon: 截断下侧幅度。
        epsilon_high: 截断上侧幅度；`None` 表示等于 `epsilon`。

    Returns:
        广播后的形状。

    Examples:
        >>> import torch
        >>> w = torch.tensor([0.5, 1.0, 1.0, 3.0])
        >>> clip_cov_gradient_weight(w, torch.tensor(1.0), torch.tensor([False, False, True, False]))
        tensor([-0.5000, -1.0000,  0.0000,  0.0000])
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    clipped = ((ratio < 1 - epsilon) & (advantages < 0)) | ((ratio > 1 + eps_high) & (advantages > 0))
    return torch.where(clipped | selected, 0.0, -ratio * advantages)


def kl_cov_gradient_weight(ratio: Tensor, advantages: Tensor, selected: Tensor, ppo_kl_coef: float = 0.1) -> Tensor:
    r"""KL-Cov 逐 token 损失对 $\log\pi_\theta$ 的导数：$-w\hat A + \beta\,s\,\operatorname{sign}(\log w)$。

    没有截断：未被挑中的 token 的梯度随 $w$ 线性增长；被挑中的 token 多一个把 $\log w$ 推回 0 的常数 $\pm\beta$。

    Args:
        ratio: 比率 $w > 0$。
        advantages: 优势 $\hat A$，可与 `ratio` 广播。
        selected: 布尔张量，可广播：被 KL-Cov 挑中的 token。
        ppo_kl_coef: $\beta$。

    Returns:
        广播后的形状。

    Examples:
        >>> import torch
        >>> kl_cov_gradient_weight(torch.tensor([0.5, 2.0]), torch.tensor(1.0), torch.tensor(True), ppo_kl_coef=0.1)
        tensor([-0.6000, -1.9000])
    """
    return -ratio * advantages + torch.where(selected, ppo_kl_coef * torch.sign(torch.log(ratio)), 0.0)


# --8<-- [end:covariance_gradient_weights]
