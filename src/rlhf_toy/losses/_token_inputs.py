"""verl 登记的几种策略损失共用的输入检查与 verl 的数值约定（私有模块）。"""

from __future__ import annotations

from torch import Tensor

from rlhf_toy._checks import check_detached, check_finite, check_mask, check_ndim, check_not_empty, check_shape

VERL_LOG_RATIO_CLAMP = 20.0  # verl 在 vanilla、dppo_*、sapo、cispo 里把 log w 限幅到 [-20, 20] 再取 exp


def check_policy_inputs(logps: Tensor, old_logps: Tensor | None, advantages: Tensor, mask: Tensor) -> Tensor:
    """检查 `logps (B, T)`、`old_logps (B, T)`、`advantages (B,)` 或 `(B, T)`、`mask (B, T)`；返回展开成 `(B, T)`、
    不带梯度的优势（优势是常数，同 `grpo_loss`、`reinforce_loss`）。`old_logps=None` 表示这个损失不用它。"""
    check_ndim("logps", logps, 2, "(B, T)")
    check_not_empty("logps", logps)
    check_finite("logps", logps)
    if old_logps is not None:
        check_shape("old_logps", old_logps, logps.shape, like="logps")
        check_finite("old_logps", old_logps)
        check_detached("old_logps", old_logps, "比率 exp(logps − old_logps) 对参数的梯度恰好抵消为 0")
    check_mask("mask", mask, logps.shape, like="logps")
    if advantages.dim() == 1:
        check_shape("advantages", advantages, logps.shape[:1], like="logps 的第 0 维")
        advantages = advantages.unsqueeze(-1)
    else:
        check_shape("advantages", advantages, logps.shape, like="logps")
    check_finite("advantages", advantages)
    return advantages.detach().expand_as(logps)


def check_positive(name: str, value: float) -> None:
    """标量超参数必须是有限的正数（`clip_cov_ratio`、`tau_pos` 这类为 0 没有意义的量）。"""
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"{name} 应是有限的正数，实际是 {value}")
