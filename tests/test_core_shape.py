"""第 2 章式 (pg-core)：本书每个策略梯度损失的梯度都是 −Σ_{i,t} m_{i,t} Ψ_{i,t} ∇log π_θ(y_{i,t})。

Ψ_{i,t} 在当前 θ 处取值、不求导。∇_θ L = Σ_{i,t} (∂L/∂log π_{i,t}) ∇_θ log π_{i,t}，所以式 (pg-core) 等价于
∂L/∂logps = −m·Ψ。下面对每个损失按第 2 章章末估计量表的一行（优势、比率粒度、截断、KL 放在哪、汇总）独立写出 Ψ，
再与 autograd 对 `logps` 的梯度比较。比率与截断的取值覆盖截断起作用与不起作用的 token。
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlhf_toy import group_advantages, grpo_loss, ppo_policy_loss, reinforce_loss, rloo_advantages
from rlhf_toy.losses import (
    clipped_is_weight_loss,
    gamma_weight_loss,
    geometric_mean_ratio_loss,
    length_weighted_sequence_loss,
    soft_gate_loss,
)
from rlhf_toy.losses.distillation import onpolicy_distillation_loss

G, N_PROMPTS, T = 4, 2, 5
B = G * N_PROMPTS
BETA, EPS, EPS_HIGH = 0.1, 0.2, 0.28


def _batch():
    g = torch.Generator().manual_seed(6)  # 种子选成下面的测试里截断的各种情形都出现
    logps = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2 - 0.1
    old = (logps + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)).detach()
    ref = (logps + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)).detach()
    lengths = torch.tensor([5, 3, 1, 4, 2, 5, 4, 3])
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).to(torch.float64)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.9, 0.1, 0.0], dtype=torch.float64)
    return logps, old, ref, mask, rewards


def _clip_kept(w, adv, eps=EPS, eps_high=EPS):
    """1[截断不起作用]：PPO 式的双侧截断只在 (Â > 0, w > 1+ε_high) 与 (Â < 0, w < 1−ε) 时把梯度置 0。"""
    return ~(((w > 1 + eps_high) & (adv > 0)) | ((w < 1 - eps) & (adv < 0)))


def _k3_weight(logps, ref):
    """β k3 对 log π_θ 的导数是 β(1 − π_ref/π_θ)，所以 KL 放进损失时 Ψ 多出 −β(1 − π_ref/π_θ)。"""
    return -BETA * (1 - (ref - logps).exp())


def _psi(name, logps, old, ref, mask, rewards):
    """按估计量表的一行写出 Ψ（形状 (B, T)）；返回 (Ψ, 损失)。"""
    lp = logps.detach()
    w = (lp - old).exp()
    lengths = mask.sum(-1, keepdim=True)
    n_tokens = mask.sum()
    x = logps  # 叶子张量，autograd 对它求导
    if name == "REINFORCE":  # Ψ = Â/B，Â = r − b（这里 b = 0.5）
        adv = rewards - 0.5
        loss, _ = reinforce_loss(x, adv, mask)
        return (adv / B).unsqueeze(-1).expand(B, T), loss
    if name == "RLOO":  # Ψ = Â/B，Â = k/(k−1)(r − r̄)
        adv = rloo_advantages(rewards, G)
        loss, _ = reinforce_loss(x, adv, mask)
        return (adv / B).unsqueeze(-1).expand(B, T), loss
    if name == "PPO":  # 逐 token 优势（GAE 给的 (B, T)）、逐 token 比率、双侧截断、全部 token 平均
        adv = torch.randn(B, T, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        loss, _ = ppo_policy_loss(x, old, adv, mask, epsilon=EPS)
        return w * adv * _clip_kept(w, adv) / n_tokens, loss
    adv = group_advantages(rewards, G)
    a = adv.unsqueeze(-1)
    if name == "GRPO":  # 逐 token 比率、双侧截断、β k3 在损失里、先回答内平均再回答间平均
        loss, _ = grpo_loss(x, old, ref, adv, mask, epsilon=EPS, beta=BETA, loss_type="grpo")
        return (w * a * _clip_kept(w, a) + _k3_weight(lp, ref)) / (B * lengths), loss
    if name == "Dr. GRPO":  # 不除以标准差的优势，除以常数 B·L
        adv = group_advantages(rewards, G, scale_rewards="none")
        a = adv.unsqueeze(-1)
        loss, _ = grpo_loss(x, old, ref, adv, mask, epsilon=EPS, beta=BETA, loss_type="dr_grpo")
        return (w * a * _clip_kept(w, a) + _k3_weight(lp, ref)) / (B * T), loss
    if name == "DAPO":  # 非对称截断（clip-higher）、全部 token 平均、β = 0
        loss, _ = grpo_loss(x, old, None, adv, mask, epsilon=EPS, epsilon_high=EPS_HIGH, beta=0.0, loss_type="dapo")
        return w * a * _clip_kept(w, a, EPS, EPS_HIGH) / n_tokens, loss
    log_s = (torch.where(mask.bool(), lp - old, 0.0).sum(-1, keepdim=True)) / lengths  # 序列比率 s_i 的对数
    s = log_s.exp()
    if name == "GSPO":  # 序列比率 s_i、在 s_i 上双侧截断、β k3 在损失里、grpo 汇总
        loss, _ = grpo_loss(x, old, ref, adv, mask, epsilon=EPS, beta=BETA, importance_sampling_level="sequence")
        return (s * a * _clip_kept(s, a) + _k3_weight(lp, ref)) / (B * lengths), loss
    if name == "LUSPO":  # 同 GSPO，但每条回答的损失乘它的长度：Ψ 与长度无关
        loss, _ = length_weighted_sequence_loss(x, old, ref, adv, mask, epsilon=EPS, beta=BETA)
        return s * a * _clip_kept(s, a) / B + _k3_weight(lp, ref) / B, loss
    if name == "CISPO":  # 逐 token 权重 min(w, ε_max)、不求导、没有置 0 的区域、全部 token 平均
        loss, _ = clipped_is_weight_loss(x, old, ref, adv, mask, epsilon_high=1.3, beta=BETA)
        return (w.clamp(max=1.3) * a + _k3_weight(lp, ref)) / n_tokens, loss
    if name == "SAPO":  # 软门 4σ(1−σ)·w，σ = sigmoid(τ(w−1))，τ 按优势的符号；grpo 汇总
        tau = torch.where(a > 0, torch.tensor(1.0, dtype=a.dtype), torch.tensor(1.05, dtype=a.dtype))
        sig = torch.sigmoid(tau * (w - 1))
        loss, _ = soft_gate_loss(x, old, ref, adv, mask, beta=BETA)
        return (4 * sig * (1 - sig) * w * a + _k3_weight(lp, ref)) / (B * lengths), loss
    if name == "GMPO":  # 逐 token 在对数空间截断后取几何平均 s̃_i；k3 在回答内平均
        log_w = lp - old
        kept = torch.where(a > 0, log_w <= EPS, log_w >= -EPS)
        clipped = torch.where(a > 0, log_w.clamp(max=EPS), log_w.clamp(min=-EPS))  # 只截“会让目标继续变大”的一侧
        s_tilde = (torch.where(mask.bool(), clipped, 0.0).sum(-1, keepdim=True) / lengths).exp()
        loss, _ = geometric_mean_ratio_loss(x, old, ref, adv, mask, epsilon=EPS, beta=BETA)
        return (s_tilde * a * kept + _k3_weight(lp, ref)) / (B * lengths), loss
    if name == "VESPO":  # 整条回答的比率 W_i（乘积，不开方）过 Gamma 形核 φ、不求导；全部 token 平均
        log_big_w = torch.where(mask.bool(), lp - old, 0.0).sum(-1, keepdim=True)
        pos = a >= 0
        k = torch.where(pos, torch.tensor(2.0, dtype=a.dtype), torch.tensor(3.0, dtype=a.dtype))
        lam = torch.where(pos, torch.tensor(3.0, dtype=a.dtype), torch.tensor(2.0, dtype=a.dtype))
        phi = (lam + k * log_big_w - lam * log_big_w.exp()).exp()
        loss, _ = gamma_weight_loss(x, old, ref, adv, mask, beta=BETA)
        return (phi * a + _k3_weight(lp, ref)) / n_tokens, loss
    if name == "同策略蒸馏":  # 逐 token 优势 log π_T − log π_θ（不求导），没有比率与截断，全部 token 平均
        teacher = ref
        loss, _ = onpolicy_distillation_loss(x, teacher, mask)
        return (teacher - lp) / n_tokens, loss
    raise AssertionError(name)


ROWS = [  # 与第 2 章估计量表的行同序
    "REINFORCE",
    "RLOO",
    "PPO",
    "GRPO",
    "Dr. GRPO",
    "DAPO",
    "GSPO",
    "LUSPO",
    "CISPO",
    "SAPO",
    "VESPO",
    "GMPO",
    "同策略蒸馏",
]


@pytest.mark.parametrize("name", ROWS)
def test_every_policy_gradient_loss_has_the_core_shape(name):
    logps, old, ref, mask, rewards = _batch()
    logps = logps.clone().requires_grad_(True)
    psi, loss = _psi(name, logps, old, ref, mask, rewards)
    (grad,) = torch.autograd.grad(loss, logps)
    torch.testing.assert_close(grad, -mask * psi, rtol=1e-10, atol=1e-12)


def test_the_example_exercises_both_sides_of_the_clip():
    """批里既有截断起作用的 token，也有不起作用的，否则上面的比较说明不了截断那一格。"""
    logps, old, _ref, mask, rewards = _batch()
    w = (logps - old).exp()
    a = group_advantages(rewards, G).unsqueeze(-1)
    dropped = ~_clip_kept(w, a) & mask.bool()
    assert 0 < dropped.sum() < mask.sum()
    s = (torch.where(mask.bool(), logps - old, 0.0).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)).exp()
    assert 0 < (~_clip_kept(s, a)).sum() < B
    assert 0 < (w > 1.3).logical_and(mask.bool()).sum() < mask.sum()  # CISPO 的封顶也两边都有
    log_w = logps - old  # GMPO 在对数空间的截断
    assert 0 < (torch.where(a > 0, log_w > EPS, log_w < -EPS) & mask.bool()).sum() < mask.sum()


def test_the_page_table_has_exactly_the_tested_rows():
    """第 2 章章末的估计量表与上面的 ROWS 一一对应：表里多一行或少一行，这里就失败。"""
    page = (Path(__file__).resolve().parents[1] / "docs" / "policy-gradient.md").read_text(encoding="utf-8")
    section = page.split("{#estimator-table}", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    assert rows[0] == "算法"
    assert rows[1:] == ROWS
