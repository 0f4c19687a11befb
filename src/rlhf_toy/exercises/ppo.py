r"""第 4 章的练习：PPO 的截断策略损失（值与梯度，四个象限），以及带掩码的 GAE。"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from rlhf_toy.estimators.advantages import gae_advantages, whiten
from rlhf_toy.exercises._core import (
    Case,
    CheckResult,
    Exercise,
    Mistake,
    OutputError,
    as_tensor,
    loss_outputs,
    run_check,
)
from rlhf_toy.losses.ppo import ppo_policy_loss

# ---- 截断策略损失 ----


def _pair(w: float, label: str) -> Case:
    """两个 token，比率都是 w：第一个优势为 +1，第二个为 −1（截断只在其中一个让梯度为 0）。"""
    old = torch.tensor([[-1.0], [-1.0]])
    logps = old + math.log(w)
    inputs = {"logps": logps, "old_logps": old, "advantages": torch.tensor([[1.0], [-1.0]]), "mask": torch.ones(2, 1)}
    return Case(label, inputs, grad=("logps",))


def _policy_cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(4)
    logps = -torch.rand(3, 2, generator=g) - 0.5
    adv = torch.randn(3, 2, generator=g)
    near = logps + 0.08 * (torch.rand(3, 2, generator=g) - 0.5)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    junk_old = torch.where(mask.bool(), near, -7.0)  # 填充处的旧对数概率随意：比率远在截断范围之外
    return (
        Case(
            "同策略（logps == old_logps）",
            {"logps": logps, "old_logps": logps, "advantages": adv, "mask": torch.ones(3, 2)},
            grad=("logps",),
        ),
        Case(
            "比率都在截断范围内",
            {"logps": logps, "old_logps": near, "advantages": adv, "mask": torch.ones(3, 2)},
            grad=("logps",),
        ),
        _pair(1.5, "w = 1.5 > 1 + ε：Â > 0 的 token 被截断（梯度为 0），Â < 0 的不截断（坏回答的概率涨了，要拉回来）"),
        _pair(0.5, "w = 0.5 < 1 − ε：Â < 0 的 token 被截断（梯度为 0），Â > 0 的不截断（好回答的概率跌了，要拉回来）"),
        Case(
            "有填充（填充处的比率很极端）",
            {"logps": logps, "old_logps": junk_old, "advantages": adv, "mask": mask},
            grad=("logps",),
        ),
        Case(
            "epsilon = 0.1",
            {"logps": logps, "old_logps": near - 0.12, "advantages": adv, "mask": torch.ones(3, 2), "epsilon": 0.1},
            grad=("logps",),
        ),
    )


def _surrogate(logps, old_logps, advantages, mask, epsilon=0.2, *, ratio=None, combine="min", clip=True, mean="mask"):
    ratio = (logps - old_logps).exp() if ratio is None else ratio
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon) * advantages
    unclipped = ratio * advantages
    if not clip:
        per_token = -unclipped
    elif combine == "min":
        per_token = -torch.min(unclipped, clipped)
    elif combine == "max":
        per_token = -torch.max(unclipped, clipped)
    else:  # 只截断比率
        per_token = -clipped
    if mean == "all":
        return per_token.mean()
    if mean == "numel":
        return (per_token * mask).sum() / mask.numel()
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


POLICY_MISTAKES = (
    Mistake(
        "sign",
        "损失的符号反了：交给优化器的是 −min(w·Â, clip(w)·Â)。少了负号，Â > 0 的回答反而被压低。",
        lambda logps, old_logps, advantages, mask, epsilon=0.2: (
            -_surrogate(logps, old_logps, advantages, mask, epsilon)
        ),
    ),
    Mistake(
        "ratio_of_logps",
        "比率写成了 logps / old_logps：重要性采样比率是概率之比 π_θ/π_old = exp(logps − old_logps)。"
        "同策略时两者的值都是 1，但梯度不同。",
        lambda logps, old_logps, advantages, mask, epsilon=0.2: _surrogate(
            logps, old_logps, advantages, mask, epsilon, ratio=logps / old_logps
        ),
    ),
    Mistake(
        "no_clip",
        "没有截断：比率越过 1 + ε（Â > 0）或 1 − ε（Â < 0）之后梯度应为 0，这一步才不会把策略推得太远。",
        lambda logps, old_logps, advantages, mask, epsilon=0.2: _surrogate(
            logps, old_logps, advantages, mask, epsilon, clip=False
        ),
    ),
    Mistake(
        "max_not_min",
        "目标里取了 max 而不是 min（或损失里取了 min 而不是 max）：PPO 取两项里更悲观的一项，"
        "−min(w·Â, clip(w)·Â) = max(−w·Â, −clip(w)·Â)。取反之后截断就成了放松。",
        lambda logps, old_logps, advantages, mask, epsilon=0.2: _surrogate(
            logps, old_logps, advantages, mask, epsilon, combine="max"
        ),
    ),
    Mistake(
        "clip_only",
        "只截断了比率、没有取 min：写成 −Â·clip(w, 1 − ε, 1 + ε) 时，比率越过边界而方向与优势相反"
        "（Â < 0 而 w > 1 + ε：坏回答的概率反而涨了；Â > 0 而 w < 1 − ε）梯度也变成 0，策略不会被拉回来。"
        "取 min 时这两种情形保留梯度 −Â·w。",
        lambda logps, old_logps, advantages, mask, epsilon=0.2: _surrogate(
            logps, old_logps, advantages, mask, epsilon, combine="clip"
        ),
    ),
    Mistake(
        "no_mask",
        "平均时没有用掩码：填充 token 的损失（那里的比率是任意的）被算了进去。在掩码内按 token 平均。",
        lambda logps, old_logps, advantages, mask, epsilon=0.2: _surrogate(
            logps, old_logps, advantages, mask, epsilon, mean="all"
        ),
    ),
    Mistake(
        "divide_by_numel",
        "乘了掩码，却除以全部位置数 B·T：填充越多损失越小。分母是掩码之和（真实 token 数）。",
        lambda logps, old_logps, advantages, mask, epsilon=0.2: _surrogate(
            logps, old_logps, advantages, mask, epsilon, mean="numel"
        ),
    ),
)

POLICY_EXERCISE = Exercise("ppo_policy_loss", ppo_policy_loss, _policy_cases(), loss_outputs, POLICY_MISTAKES)


def check_ppo_policy_loss(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `ppo_policy_loss(logps, old_logps, advantages, mask, epsilon=0.2)`：PPO 的截断策略损失（第 4 章）。

    读者的函数返回标量损失（也可以像参考实现那样返回 `(loss, metrics)`，只检查损失）。用例：同策略、比率在截断范围内、
    比率越过两侧边界时优势的两种符号（截断只在其中一种让梯度为 0）、带填充、`epsilon = 0.1`；
    比较损失与它对 `logps` 的梯度（参考实现是 [`ppo_policy_loss`][rlhf_toy.losses.ppo.ppo_policy_loss]）。

    Args:
        your_fn: 读者的函数；张量形状都是 `(B, T)`。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_ppo_policy_loss(ppo_policy_loss, verbose=False).passed
        True
    """
    return run_check(POLICY_EXERCISE, your_fn, verbose=verbose)


# ---- GAE ----


def _gae_outputs(ret: Any) -> dict[str, torch.Tensor]:
    if not (isinstance(ret, tuple) and len(ret) == 2):
        raise OutputError("应返回 (advantages, returns) 两个张量")
    return {"advantages": as_tensor("advantages", ret[0]), "returns": as_tensor("returns", ret[1])}


def _gae_cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(5)
    rewards = torch.zeros(2, 4)
    rewards[:, -1] = torch.tensor([1.0, -0.5])
    rewards = rewards - 0.05 * torch.rand(2, 4, generator=g)  # 每个 token 扣一点 KL
    values = torch.rand(2, 4, generator=g)
    padded_rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 0.0]])
    padded_values = torch.tensor([[0.2, 0.4, 0.6, 9.0], [0.1, 0.3, 9.0, 9.0]])  # 填充处的价值是任意的 9.0
    full = torch.ones(2, 4)
    return (
        Case(
            "没有填充，γ = 1，λ = 0.95", {"rewards": rewards, "values": values, "mask": full, "gamma": 1.0, "lam": 0.95}
        ),
        Case("γ = 0.9，λ = 0.8", {"rewards": rewards, "values": values, "mask": full, "gamma": 0.9, "lam": 0.8}),
        Case(
            "γ = λ = 1（Â_t = 之后的奖励之和 − V_t）",
            {"rewards": rewards, "values": values, "mask": full, "gamma": 1.0, "lam": 1.0},
        ),
        Case(
            "右填充（填充处的价值是 9.0）",
            {
                "rewards": padded_rewards,
                "values": padded_values,
                "mask": torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]),
                "gamma": 1.0,
                "lam": 0.95,
            },
        ),
        Case(
            "中间有掩码为 0 的位置（多轮对话里夹着的提示词）",
            {
                "rewards": rewards,
                "values": values,
                "mask": torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]]),
                "gamma": 0.9,
                "lam": 0.95,
            },
        ),
        Case(
            "整行掩码为 0",
            {
                "rewards": rewards,
                "values": values,
                "mask": torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]),
                "gamma": 1.0,
                "lam": 0.95,
            },
        ),
        Case(
            "一个 token（T = 1）",
            {
                "rewards": torch.tensor([[1.0], [0.0]]),
                "values": torch.tensor([[0.3], [0.6]]),
                "mask": torch.ones(2, 1),
                "gamma": 1.0,
                "lam": 0.95,
            },
        ),
    )


def _recursion(rewards, values, mask, gamma, lam, *, use_lam=True, skip=True):
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_adv = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t] if skip else torch.ones_like(mask[:, t])
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * (lam if use_lam else 1.0) * next_adv
        advantages[:, t] = m * adv
        next_value = m * values[:, t] + (1 - m) * next_value
        next_adv = m * adv + (1 - m) * next_adv
    return advantages * mask


def _lam_missing(rewards, values, mask, gamma=1.0, lam=0.95):
    adv = _recursion(rewards, values, mask, gamma, lam, use_lam=False)
    return adv, (adv + values) * mask


def _over_padding(rewards, values, mask, gamma=1.0, lam=0.95):
    adv = _recursion(rewards, values, mask, gamma, lam, skip=False)
    return adv, (adv + values) * mask


def _returns_whitened(rewards, values, mask, gamma=1.0, lam=0.95):
    adv, _ = gae_advantages(rewards, values, mask, gamma, lam)
    return adv, (whiten(adv, mask) + values) * mask


def _returns_are_advantages(rewards, values, mask, gamma=1.0, lam=0.95):
    adv, _ = gae_advantages(rewards, values, mask, gamma, lam)
    return adv, adv


def _returns_unmasked(rewards, values, mask, gamma=1.0, lam=0.95):
    adv, _ = gae_advantages(rewards, values, mask, gamma, lam)
    return adv, adv + values


GAE_MISTAKES = (
    Mistake(
        "lam_missing",
        "递推里少了 λ：Â_t = δ_t + γλ·Â_{t+1}。少了 λ 就是 λ = 1 的蒙特卡洛优势，偏差小而方差大。",
        _lam_missing,
    ),
    Mistake(
        "returns_whitened",
        "用白化后的优势算了回报：价值模型的目标是 R_t = Â_t + V_t，用的是白化之前的优势；用了白化后的，价值模型学的就不是回报了。",
        _returns_whitened,
    ),
    Mistake(
        "returns_are_advantages", "回报是 R_t = Â_t + V_t（价值模型的目标），不是优势本身。", _returns_are_advantages
    ),
    Mistake(
        "runs_over_padding",
        "GAE 跑过了掩码为 0 的位置：不跳过时，填充处的任意价值会通过 γ·V_{t+1} 漏进最后一个真实 token 的优势里。"
        "递推时越过掩码为 0 的位置：V_{t'} 与 Â_{t'} 取下一个掩码为 1 的位置（没有则为 0）。",
        _over_padding,
    ),
    Mistake(
        "returns_unmasked",
        "回报在掩码为 0 的位置不为 0：R_t = (Â_t + V_t)·m_t，填充处的价值不该留在回报里。",
        _returns_unmasked,
    ),
)

GAE_EXERCISE = Exercise("gae_advantages", gae_advantages, _gae_cases(), _gae_outputs, GAE_MISTAKES)


def check_gae_advantages(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `gae_advantages(rewards, values, mask, gamma=1.0, lam=0.95)`：带掩码的 GAE（第 4 章）。

    读者的函数返回 `(advantages, returns)`，形状都是 `(B, T)`，掩码为 0 的位置为 0。用例：没有填充的三组
    $(\gamma, \lambda)$、右填充（填充处的价值是 9.0）、中间有掩码为 0 的位置、整行掩码为 0、$T = 1$；比较两个输出的值
    （参考实现是 [`gae_advantages`][rlhf_toy.estimators.advantages.gae_advantages]）。

    Args:
        your_fn: 读者的函数；`rewards`、`values`、`mask` 形状 `(B, T)`。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_gae_advantages(gae_advantages, verbose=False).passed
        True
    """
    return run_check(GAE_EXERCISE, your_fn, verbose=verbose)
