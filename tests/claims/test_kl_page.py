"""docs/kl.md: what the page says about the KL options of TRL and verl, checked against the pinned libraries."""

from __future__ import annotations

import torch
import verl.trainer.ppo.core_algos as core_algos
from trl import GRPOConfig, GRPOTrainer, RLOOConfig
from verl.trainer.config import AlgoConfig
from verl.workers.config import ActorConfig

from .pinned import default_config, source


def test_trl_grpo_kl_defaults():
    # kl.md table: “TRL GRPOTrainer，KL 进损失 | beta（默认 0.0 …）”; “TRL RLOOTrainer，KL 进奖励 | beta=0.05”.
    assert default_config(GRPOConfig).beta == 0.0
    assert default_config(RLOOConfig).beta == 0.05


def test_trl_use_bias_correction_kl_is_on_by_default():
    # kl.md table row “TRL GRPOTrainer，修正 k3 | use_bias_correction_kl=True” and “打开 use_bias_correction_kl 后记录的是
    # 乘上 w 之后的值”: in TRL 1.16 it is the default (it matters once beta > 0), and the logged kl is w·k3.
    assert default_config(GRPOConfig).use_bias_correction_kl is True
    text = source(GRPOTrainer._compute_loss)
    assert "if self.args.use_bias_correction_kl: per_token_kl = per_token_kl * coef_1" in text
    assert text.index("per_token_kl = per_token_kl * coef_1") < text.index('self._metrics[mode]["kl"]')


def test_trl_k3_is_not_clamped():
    # kl.md: “两个截断参数默认是 None（不截断，与 TRL 相同）”.
    text = source(GRPOTrainer._compute_loss)
    k3 = text[text.index("per_token_kl = (") : text.index("# Importance sampling correction for the KL divergence")]
    assert "torch.exp(ref_per_token_logps - per_token_logps)" in k3 and "clamp" not in k3


def test_verl_kl_defaults():
    # kl.md table: “verl，KL 进奖励 | algorithm.use_kl_in_reward=True，algorithm.kl_penalty="kl"，kl_ctrl.kl_coef=0.001” and
    # “verl，KL 进损失 | actor.use_kl_loss=True，actor.kl_loss_type="low_var_kl"，kl_loss_coef=0.001”: both off by default.
    algorithm = AlgoConfig()
    assert (algorithm.use_kl_in_reward, algorithm.kl_penalty, algorithm.kl_ctrl.kl_coef) == (False, "kl", 0.001)
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert (actor.use_kl_loss, actor.kl_loss_type, actor.kl_loss_coef) == (False, "low_var_kl", 0.001)


def test_verl_estimator_names_and_clamps():
    # kl.md: “verl 的 low_var_kl 先截断对数比率，再截断结果” (eq. kl-clamp, ±20 then ±10) and the row “verl 的其他名字 |
    # kl/k1，mse/k2，abs | −d；½d²；|d|（k1、k2 不截断）” (k1 = log π − log π_ref = −d).
    logps, ref_logps = torch.tensor([[-1.0, -1.0, -1.0]]), torch.tensor([[-1.0 + 3.0, -1.0 - 25.0, 29.0]])
    d = ref_logps - logps
    assert torch.equal(core_algos.kl_penalty(logps, ref_logps, "kl"), -d)
    assert torch.equal(core_algos.kl_penalty(logps, ref_logps, "k1"), -d)
    assert torch.equal(core_algos.kl_penalty(logps, ref_logps, "mse"), 0.5 * d**2)
    assert torch.equal(core_algos.kl_penalty(logps, ref_logps, "abs"), d.abs())
    k3 = core_algos.kl_penalty(logps, ref_logps, "low_var_kl")
    assert torch.equal(k3, core_algos.kl_penalty(logps, ref_logps, "k3"))
    clamped_d = d.clamp(-20, 20)
    assert torch.allclose(k3, (clamped_d.exp() - clamped_d - 1).clamp(-10, 10))
    assert k3[0, 0] == 10 and k3[0, 2] == 10


def test_verl_k3_plus_is_straight_through():
    # kl.md “verl 的 k3+ … 值用 k3，梯度用 k2 … 在作者笔记记录的 verl 快照里它还会抛出 NotImplementedError”: in verl
    # 0.9.1 it works: the value is k3, the gradient that of k2 = ½(log π − log π_ref)².
    logps = torch.tensor([[-2.0, -0.5]], requires_grad=True)
    ref_logps = torch.tensor([[-1.0, -1.0]])
    value = core_algos.kl_penalty(logps, ref_logps, "k3+")
    assert torch.allclose(value, core_algos.kl_penalty(logps.detach(), ref_logps, "k3"))
    value.sum().backward()
    assert torch.allclose(logps.grad, (logps - ref_logps).detach())
