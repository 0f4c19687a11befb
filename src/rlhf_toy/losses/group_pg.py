r"""GPG（Group Policy Gradient）的损失：不要比率、不要截断的普通组内策略梯度。

GPG（Chu et al., 2025, arXiv 2504.02546）直接优化原始的强化学习目标，代理损失就是 REINFORCE 的
$-\hat A\log\pi_\theta$，再按 token 汇总（论文的目标按整批 token 数归一）。它和 GRPO 的区别在优势一侧
（verl `compute_gpg_outcome_advantage` 的组内修正），不在损失一侧；损失这里对应 verl 0.9.1 登记为 `"gpg"` 的
`compute_policy_loss_gpg`。约定：**损失 = −目标**。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
from torch import Tensor

from rlhf_toy.losses._token_inputs import check_policy_inputs
from rlhf_toy.losses.aggregate import aggregate_loss

# --8<-- [end:imports]


# --8<-- [start:gpg_loss]
def gpg_loss(
    logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    loss_type: str = "bnpo",
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""GPG 的策略损失：逐 token $\ell_{i,t} = -\hat A_{i,t}\log\pi_\theta(o_{i,t})$，再按 `loss_type` 汇总。

    没有重要性采样比率（importance sampling ratio），所以不需要 `old_logps`，也没有截断；同策略、只更新一次时
    梯度与 PPO/GRPO 相同。与 verl 0.9.1 `compute_policy_loss_gpg`（`policy_loss.loss_mode="gpg"`）逐式相同：
    `loss_type="bnpo"`（或 `"dapo"`）对 verl 的 `loss_agg_mode="token-mean"`（verl 的默认，也是 GPG 论文的按 token 平均），
    `"grpo"` 对 `"seq-mean-token-mean"`，`"dr_grpo"` 对 `"seq-mean-token-sum-norm"`（verl 的分母不计整行掩码为 0 的回答，
    本书计入，见 `tests/conformance/test_loss_aggregation_verl.py`）。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        advantages: 优势，形状 `(B,)`（每条回答一个）或 `(B, T)`，不带梯度（这里会 `detach`）。
        mask: 0/1 掩码，形状 `(B, T)`。
        loss_type: 汇总方式（`"grpo"`、`"bnpo"`、`"dr_grpo"`、`"dapo"`，见 `aggregate_loss`），默认 `"bnpo"`。
        max_completion_length: `dr_grpo` 的常数分母 $L$；默认取 `T`。

    Returns:
        `(loss, metrics)`：标量损失，以及 `{"advantage_mean": 掩码内优势的 token 平均}`。

    Raises:
        ValueError: `logps` 不是二维或 `B = 0`，`advantages`、`mask` 形状不符，含非有限值，`mask` 不是 0/1，
            或 `loss_type` 未知。

    Examples:
        >>> import torch
        >>> logps = torch.log(torch.tensor([[0.5, 0.25]]))
        >>> loss, _ = gpg_loss(logps, torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]))
        >>> round(loss.item(), 4)  # -log 0.5
        0.6931
    """
    adv = check_policy_inputs(logps, None, advantages, mask)
    per_token_loss = -adv * logps
    loss = aggregate_loss(per_token_loss, mask, loss_type, max_completion_length)
    inside = mask.bool()
    metrics = {"advantage_mean": (adv[inside].mean().item() if inside.any() else 0.0)}
    return loss, metrics


# --8<-- [end:gpg_loss]


# --8<-- [start:gpg_gradient_weight]
def gpg_gradient_weight(ratio: Tensor, advantages: Tensor) -> Tensor:
    r"""逐 token 损失对 $\log\pi_\theta$ 的导数 $\partial\ell_t/\partial\log\pi_\theta(o_t) = -\hat A_t$（与比率无关）。

    Args:
        ratio: 重要性采样比率 $w_t$，任意形状（只用来广播：GPG 的梯度不看它）。
        advantages: 优势 $\hat A_t$，可与 `ratio` 广播。

    Returns:
        与 `ratio`、`advantages` 广播后同形状的张量。

    Examples:
        >>> import torch
        >>> gpg_gradient_weight(torch.tensor([0.5, 1.0, 3.0]), torch.tensor(2.0))
        tensor([-2., -2., -2.])
    """
    return -advantages * torch.ones_like(ratio)


# --8<-- [end:gpg_gradient_weight]
