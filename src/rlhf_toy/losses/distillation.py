r"""蒸馏（distillation）的损失：同策略（on-policy）逐 token 反向 KL 的优势与损失，以及全词表上的精确散度。

两条路线（第 12 章）：

* **同策略蒸馏**：学生自己采样 $y\sim\pi_\theta$，教师给每个位置打分。逐 token 优势
  $A_t = \log\pi_T(y_t) - \log\pi_\theta(y_t)$（两个概率都以 $x, y_{<t}$ 为条件；不带梯度，即单样本的 $-k_1$），
  喂给折扣为 0 的逐 token REINFORCE。出处：Agarwal et al.（2024，GKD，arXiv:2306.13649）在学生样本上最小化
  逐 token 散度；Gu et al.（2024，MiniLLM，arXiv:2306.08543）用策略梯度最小化反向 KL；Thinking Machines 的博客
  “On-Policy Distillation”（Lu et al.，2025-10）把 $-$ 逐 token 反向 KL 当作折扣为 0 的逐 token 奖励。
  verl 0.9.1 的 `distillation_loss`（`use_policy_gradient=True`、`loss_mode="k1"`）也这样做：
  `advantages = -kl_penalty(log_prob, teacher_logprobs, "k1")`。
* **全词表散度**：教师与学生在同一位置上的整个下一 token 分布之间的正向 KL、反向 KL 与广义 JSD（TRL 1.16
  `DistillationTrainer` 的 `beta`：0 为正向 KL $\mathrm{KL}(\pi_T\|\pi_\theta)$，1 为反向 KL
  $\mathrm{KL}(\pi_\theta\|\pi_T)$）。

**损失 = −目标**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf_toy._checks import check_choice, check_detached, check_mask, check_ndim, check_shape, check_tensor
from rlhf_toy.losses.aggregate import masked_mean

# --8<-- [end:imports]

DIRECTIONS = ("forward", "reverse")


def _check_logps(logps: Tensor, teacher_logps: Tensor, mask: Tensor) -> None:
    check_ndim("logps", logps, 2, "(B, T)")
    check_shape("teacher_logps", teacher_logps, logps.shape, like="logps")
    check_mask("mask", mask, logps.shape, like="logps")
    check_detached("teacher_logps", teacher_logps, "教师只打分，不训练")


# --8<-- [start:reverse_kl_advantages]
def reverse_kl_advantages(logps: Tensor, teacher_logps: Tensor, mask: Tensor) -> Tensor:
    r"""同策略蒸馏的逐 token 优势 $A_t = \operatorname{sg}\big(\log\pi_T(y_t) - \log\pi_\theta(y_t)\big)$，填充位置为 0。

    $y_t$ 是学生自己采的 token。$-A_t$ 就是逐 token 反向 KL 的单样本估计量 $k_1$，其期望
    $\mathbb E_{y_t\sim\pi_\theta}[-A_t] = \mathrm{KL}(\pi_\theta\,\|\,\pi_T)$（该位置上）。

    Args:
        logps: 学生对自己样本的逐 token 对数概率 $\log\pi_\theta(y_t)$，形状 `(B, T)`。
        teacher_logps: 教师对同一些 token 的对数概率 $\log\pi_T(y_t)$，形状 `(B, T)`，不带梯度。
        mask: 回答掩码，形状 `(B, T)`，0/1 浮点。

    Returns:
        形状 `(B, T)` 的优势，不带梯度；掩码为 0 处为 0。

    Raises:
        ValueError: 形状不一致、掩码不是 0/1，或 `teacher_logps` 带梯度。
    """
    _check_logps(logps, teacher_logps, mask)
    return torch.where(mask.bool(), teacher_logps - logps.detach(), 0.0)  # 选取：填充处的 -inf 进不来


# --8<-- [end:reverse_kl_advantages]


# --8<-- [start:onpolicy_distillation_loss]
def onpolicy_distillation_loss(logps: Tensor, teacher_logps: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    r"""折扣为 0 的逐 token REINFORCE：$\mathcal L = -\frac{1}{\sum m}\sum_{i,t} m_{i,t}\,A_{i,t}\,\frac{\pi_\theta(y_{i,t})}{\operatorname{sg}\,\pi_\theta(y_{i,t})}$。

    比率的值为 1，所以损失的值是 $-\overline{A} = \overline{k_1}$（逐 token 反向 KL 的估计，token 平均），梯度是
    $-\frac{1}{\sum m}\sum m\,A\,\nabla\log\pi_\theta$。与 verl 0.9.1 `vanilla` 策略损失在同策略（`old_log_prob`
    等于 `log_prob`）、`loss_agg_mode="token-mean"` 时相同，此时 PPO 的裁剪不起作用。

    Args:
        logps: 学生的逐 token 对数概率，形状 `(B, T)`，带梯度。
        teacher_logps: 教师的逐 token 对数概率，形状 `(B, T)`，不带梯度。
        mask: 回答掩码，形状 `(B, T)`。整批掩码为 0 时损失为 0（梯度为 0）。

    Returns:
        `(loss, metrics)`：标量损失；`metrics = {"reverse_kl": 逐 token k1 的掩码平均}`。

    Raises:
        ValueError: 同 `reverse_kl_advantages`。
    """
    advantages = reverse_kl_advantages(logps, teacher_logps, mask)
    ratio = torch.exp(logps - logps.detach())  # 值为 1，梯度为 ∇log π
    loss = -masked_mean(advantages * ratio, mask)
    return loss, {"reverse_kl": -masked_mean(advantages, mask).item()}


# --8<-- [end:onpolicy_distillation_loss]


# --8<-- [start:token_kl]
def token_kl(logits: Tensor, teacher_logits: Tensor, direction: str = "reverse") -> Tensor:
    r"""每个位置上整个词表的精确 KL：`"reverse"` 为 $\sum_v \pi_\theta(v)\,(\log\pi_\theta(v) - \log\pi_T(v))$，`"forward"` 为 $\sum_v \pi_T(v)\,(\log\pi_T(v) - \log\pi_\theta(v))$。

    Args:
        logits: 学生的 logits，形状 `(..., V)`。
        teacher_logits: 教师的 logits，形状与 `logits` 相同（`-inf` 表示概率 0；正向 KL 里这样的词不计）。
        direction: `"reverse"`（$\mathrm{KL}(\pi_\theta\|\pi_T)$）或 `"forward"`（$\mathrm{KL}(\pi_T\|\pi_\theta)$）。

    Returns:
        形状 `(...)` 的 KL（nat），对两者都可求导。

    Raises:
        ValueError: 形状不一致或 `direction` 未知。
    """
    check_tensor("logits", logits)
    check_shape("teacher_logits", teacher_logits, logits.shape, like="logits")
    check_choice("direction", direction, DIRECTIONS)
    logps, teacher_logps = F.log_softmax(logits, -1), F.log_softmax(teacher_logits, -1)
    p, q = (logps, teacher_logps) if direction == "reverse" else (teacher_logps, logps)
    return torch.where(p.exp() > 0, p.exp() * (p - q), torch.zeros_like(p)).sum(-1)


# --8<-- [end:token_kl]


# --8<-- [start:generalized_jsd]
def generalized_jsd(logits: Tensor, teacher_logits: Tensor, beta: float) -> Tensor:
    r"""TRL 1.16 的广义 JSD（每个位置，整个词表）：$m = (1-\beta)\,\pi_\theta + \beta\,\pi_T$，$D_\beta = \beta\,\mathrm{KL}(\pi_T\|m) + (1-\beta)\,\mathrm{KL}(\pi_\theta\|m)$。

    两端按 TRL 的约定单独定义：$\beta = 0$ 是正向 KL $\mathrm{KL}(\pi_T\|\pi_\theta)$，$\beta = 1$ 是反向 KL
    $\mathrm{KL}(\pi_\theta\|\pi_T)$。注意 $D_\beta$ 在 $\beta\to 0$ 或 $\to 1$ 时趋于 0，不趋于两端的 KL：
    两端是另外定义的，不是极限。

    Args:
        logits: 学生的 logits，形状 `(..., V)`。
        teacher_logits: 教师的 logits，形状相同。
        beta: $\beta\in[0, 1]$。

    Returns:
        形状 `(...)` 的散度（nat）。

    Raises:
        ValueError: 形状不一致，或 `beta` 不在 $[0, 1]$。
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta 应在 [0, 1] 内，实际是 {beta}")
    if beta == 0.0:
        return token_kl(logits, teacher_logits, "forward")
    if beta == 1.0:
        return token_kl(logits, teacher_logits, "reverse")
    check_shape("teacher_logits", teacher_logits, logits.shape, like="logits")
    logps, teacher_logps = F.log_softmax(logits, -1), F.log_softmax(teacher_logits, -1)
    log_m = torch.logaddexp(logps + math.log(1 - beta), teacher_logps + math.log(beta))
    kl_teacher = (teacher_logps.exp() * (teacher_logps - log_m)).sum(-1)
    kl_student = (logps.exp() * (logps - log_m)).sum(-1)
    return beta * kl_teacher + (1 - beta) * kl_student


def divergence_loss(logits: Tensor, teacher_logits: Tensor, mask: Tensor, beta: float = 1.0) -> Tensor:
    r"""全词表散度在回答 token 上的平均：$\sum_{i,t} m_{i,t} D_\beta / \max(1, \sum m)$（TRL `_chunked_divergence_loss`）。

    Args:
        logits: 学生的 logits，形状 `(B, T, V)`。
        teacher_logits: 教师的 logits，形状相同（通常不带梯度）。
        mask: 回答掩码，形状 `(B, T)`。
        beta: 同 `generalized_jsd`（TRL `DistillationConfig.beta`，默认 1.0 即反向 KL）。

    Returns:
        标量损失；整批掩码为 0 时为 0。

    Raises:
        ValueError: 形状不一致，或 `beta` 越界。
    """
    check_ndim("logits", logits, 3, "(B, T, V)")
    check_mask("mask", mask, logits.shape[:2], like="logits 的前两维")
    per_token = generalized_jsd(logits, teacher_logits, beta)
    return masked_mean(per_token, mask)


# --8<-- [end:generalized_jsd]
