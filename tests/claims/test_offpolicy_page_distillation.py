"""Claims on chapter 12's distillation section (.ch12/distillation/page.md, 与 TRL / verl 的差异) against TRL 1.16 / verl 0.9.1."""

from __future__ import annotations

import dataclasses

from trl.experimental.gold import GOLDConfig
from trl.trainer.distillation_config import DistillationConfig


def fields(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def test_trl_distillation_config_beta_defaults_to_reverse_kl_and_has_no_lmbda():
    # "TRL 1.16 的 DistillationConfig.beta 默认 1.0（反向 KL）；它总在学生样本上训练，没有 lmbda"
    f = fields(DistillationConfig)
    assert f["beta"] == 1.0
    assert "lmbda" not in f


def test_trl_gold_config_has_the_on_policy_fraction_lmbda():
    # "同策略比例 lmbda 在 trl.experimental.gold 的 GOLDConfig 里，默认 0.5"
    assert fields(GOLDConfig)["lmbda"] == 0.5


def test_verl_distillation_defaults_policy_gradient_with_k3():
    # "Python 数据类 DistillationLossConfig 的默认：use_policy_gradient=True、loss_mode='k3'、policy_loss_mode='vanilla'、loss_max_clamp=10"
    from verl.workers.config import DistillationLossConfig

    f = fields(DistillationLossConfig)
    assert f["use_policy_gradient"] is True
    assert f["loss_mode"] == "k3"
    assert f["policy_loss_mode"] == "vanilla"
    assert f["loss_max_clamp"] == 10.0


def test_trl_gkd_config_defaults_and_seq_kd_trains_on_teacher_generations():
    # "同策略比例 lmbda 在 trl.experimental.gkd 的 GKDConfig 里：默认 lmbda=0.5、beta=0.5、seq_kd=False；
    #  seq_kd=True 时，不由学生采样的那些步改用教师生成的回答，损失仍是同一个广义 JSD"
    import inspect

    from trl.experimental.gkd import GKDConfig, GKDTrainer

    f = fields(GKDConfig)
    assert (f["lmbda"], f["beta"], f["seq_kd"]) == (0.5, 0.5, False)
    step = inspect.getsource(GKDTrainer.training_step)
    assert "if random.random() <= self.lmbda:" in step
    on_policy, teacher = step.split("elif self.seq_kd:")
    assert (
        "generate_on_policy_outputs(\n                    unwrapped_model" in on_policy
        and "self.teacher_model" not in on_policy
    )
    assert "self.teacher_model" in teacher and "generate_on_policy_outputs" in teacher
    assert "self.generalized_jsd_loss(" in inspect.getsource(GKDTrainer.compute_loss)


def test_verl_distillation_adds_the_task_reward_policy_loss_by_default():
    # "verl 默认把任务奖励的策略损失一起加上（use_task_rewards=True），蒸馏损失乘 distillation_loss_coef=1.0 后与之相加"
    import inspect

    from verl.trainer.distillation import losses
    from verl.workers.config import DistillationLossConfig

    f = fields(DistillationLossConfig)
    assert f["use_task_rewards"] is True
    assert f["distillation_loss_coef"] == 1.0
    src = inspect.getsource(losses.distillation_ppo_loss)
    assert "policy_loss, policy_metrics = ppo_loss(config, model_output, data, dp_group)" in src
    assert "if not distillation_loss_config.use_task_rewards:\n            policy_loss = 0.0" in src
    assert "policy_loss += distill_loss * distillation_loss_coef" in src


def test_verl_clamps_the_distillation_loss_before_it_becomes_the_advantage():
    # "数据类默认的 loss_max_clamp=10 把逐 token 蒸馏损失截在 ±10，再取负当优势；设 None 才不截"
    import inspect
    import re

    from verl.trainer.distillation import losses
    from verl.workers.config import DistillationLossConfig

    assert fields(DistillationLossConfig)["loss_max_clamp"] == 10.0
    src = re.sub(r"\s+", " ", inspect.getsource(losses.distillation_loss))
    clamp = (
        "if loss_config.loss_max_clamp is not None: # clamping min is for k1 loss which can be negative "
        "distillation_losses = distillation_losses.clamp(min=-loss_config.loss_max_clamp, max=loss_config.loss_max_clamp)"
    )
    advantage = "advantages=-distillation_losses.detach()"
    assert src.count(clamp) == 1 and src.count(advantage) == 1
    assert src.index(clamp) < src.index(advantage)


def _student_teacher_and_kl_gradients():
    """A six-answer student (logits with grad) and teacher, and the exact gradients of KL(π‖π_T) and KL(π_T‖π)."""
    import torch

    torch.manual_seed(0)
    logits = torch.randn(6, dtype=torch.float64, requires_grad=True)
    teacher = torch.randn(6, dtype=torch.float64).log_softmax(0)
    logps = logits.log_softmax(0)
    probs = logps.exp()
    reverse = torch.autograd.grad((probs * (logps - teacher)).sum(), logits, retain_graph=True)[0]
    forward = torch.autograd.grad((teacher.exp() * (teacher - logps)).sum(), logits, retain_graph=True)[0]
    return logits, teacher, logps, probs, reverse, forward


def test_verl_k3_as_the_advantage_does_not_follow_the_reverse_kl_gradient():
    # "用 k3 当优势时，期望梯度不再是反向 KL 的梯度（第 7 章：是反向与正向 KL 两个梯度之差）；k1 才是"
    import torch
    import verl.trainer.ppo.core_algos as core_algos

    logits, teacher, logps, probs, reverse, forward = _student_teacher_and_kl_gradients()
    for mode, expected in (("k1", reverse), ("k3", reverse - forward)):
        # verl: advantages = -kl_penalty(student, teacher, mode).detach(); vanilla 同策略损失的梯度 = -A ∇log π
        advantages = -core_algos.kl_penalty(logps.detach(), teacher, mode)
        surrogate = (probs.detach() * -advantages * logps).sum()
        grad = torch.autograd.grad(surrogate, logits, retain_graph=True)[0]
        assert torch.allclose(grad, expected), mode
    assert not torch.allclose(reverse - forward, reverse)


def _verl_generated_config():
    import importlib.util
    from pathlib import Path

    from omegaconf import OmegaConf

    root = Path(importlib.util.find_spec("verl").origin).parent
    return OmegaConf.load(root / "trainer/config/_generated_ppo_trainer.yaml")


def test_verl_shipped_distillation_config_backpropagates_k3():
    # "verl 自带的配置里 use_policy_gradient 是 false、loss_mode="k3"、loss_max_clamp: null：逐 token 的 k3 直接当损失反传"
    import inspect

    from verl.trainer.distillation import losses

    shipped = _verl_generated_config().distillation.distillation_loss
    assert (shipped.use_policy_gradient, shipped.loss_mode, shipped.loss_max_clamp) == (False, "k3", None)
    src = inspect.getsource(losses.distillation_loss)
    direct = src.split("# Directly backpropagate distillation loss as a supervised loss", 1)[1]
    assert "agg_loss(\n            loss_mat=distillation_losses," in direct


def test_verl_k3_as_a_loss_follows_the_forward_kl_gradient():
    # "学生样本上 k3 的期望梯度是正向 KL 的梯度（第 7 章“放进损失”），不是反向 KL"
    import torch
    import verl.trainer.ppo.core_algos as core_algos

    logits, teacher, logps, probs, reverse, forward = _student_teacher_and_kl_gradients()
    # 直接反传：样本 y ~ π 固定，对 k3(y) 求导，再按 π 加权求期望
    expected_grad = torch.autograd.grad((probs.detach() * core_algos.kl_penalty(logps, teacher, "k3")).sum(), logits)[0]
    assert torch.allclose(expected_grad, forward) and not torch.allclose(expected_grad, reverse)


def test_verl_k3_loss_is_still_clamped_so_clamped_tokens_get_no_gradient():
    # "loss_max_clamp: null 只去掉蒸馏损失里的第二道限幅；kl_penalty 仍把对数比率限幅在 ±20、把 k3 限幅在 [-10, 10]。
    # log(π_T/π_θ) 约低于 −11 或高于 2.6 的 token 上 k3 超过 10、没有梯度；期望梯度只在限幅区内与正向 KL 相同"
    import inspect

    import torch
    import verl.trainer.ppo.core_algos as core_algos
    from verl.trainer.distillation import losses

    text = " ".join(inspect.getsource(core_algos.kl_penalty_forward).split())
    assert "kl = torch.clamp(kl, min=-20, max=20)" in text
    assert "return torch.clamp(kld, min=-10, max=10)" in text
    assert "kl_penalty(" in inspect.getsource(losses.compute_distillation_loss_reverse_kl_estimator)
    # 限幅区的边界：e^x − x − 1 = 10，x = log(π_T/π_θ)
    x = torch.tensor([-11.01, -10.99, 2.60, 2.62], dtype=torch.float64, requires_grad=True)
    k3 = core_algos.kl_penalty(torch.zeros_like(x), x, "k3")
    (grad,) = torch.autograd.grad(k3.sum(), x)
    assert k3.tolist()[0] == 10.0 and k3.tolist()[3] == 10.0 and grad[0] == 0 and grad[3] == 0
    assert k3.tolist()[1] < 10 and k3.tolist()[2] < 10 and grad[1] != 0 and grad[2] != 0
    # 一个尖锐的教师：4 个 token 上 log π_T ≈ −14，学生在它们上面有 0.62 的质量
    logits = torch.tensor([0.0, 0.5, 1.0, -0.5, 1.5, 1.0, 0.5, 0.0], dtype=torch.float64, requires_grad=True)
    teacher = torch.tensor([1.0, 0.5, 0.0, 0.2, -14, -14, -14, -14], dtype=torch.float64).log_softmax(0)
    logps = logits.log_softmax(0)
    probs = logps.exp()
    inside = (core_algos.kl_penalty(logps, teacher, "k3") < 10).detach()
    assert inside.tolist() == [True] * 4 + [False] * 4 and probs[4:].sum() > 0.6
    verl = torch.autograd.grad(
        (probs.detach() * core_algos.kl_penalty(logps, teacher, "k3")).sum(), logits, retain_graph=True
    )[0]
    forward = torch.autograd.grad((teacher.exp() * (teacher - logps)).sum(), logits, retain_graph=True)[0]
    unclamped_k3 = (teacher - logps).exp() - (teacher - logps) - 1
    only_inside = torch.autograd.grad((probs.detach() * unclamped_k3 * inside).sum(), logits)[0]
    assert not torch.allclose(verl, forward, atol=1e-2)
    assert torch.allclose(verl, only_inside)


def test_trl_iw_opd_trainer_is_the_sampled_token_estimator():
    # "逐 token 单样本的估计在 trl.experimental.iw_opd 的 IWOPDTrainer 里（distillation_objective="iw_opd"，
    # lmbda 默认 1.0）：优势 sg(log π_T − log μ)（没有采样器的对数概率时用学生自己的），再乘随前缀累计 |A| 递减的权重
    # （iw_opd_gamma，默认 0.5）；γ = 0、同策略时梯度就是式 (opd-loss) 的梯度"
    import collections
    import inspect
    import types

    import torch
    from trl.experimental.iw_opd import IWOPDConfig, IWOPDTrainer

    from rlhf_toy.losses.distillation import onpolicy_distillation_loss

    f = fields(IWOPDConfig)
    assert (f["lmbda"], f["distillation_objective"], f["iw_opd_gamma"]) == (1.0, "iw_opd", 0.5)
    text = " ".join(inspect.getsource(IWOPDTrainer._compute_iw_opd_loss).split())
    assert "weights = (1.0 + self.iw_opd_gamma * (1.0 - prefix_abs_advantages / total_abs_advantages)).detach()" in text
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, 6, (2, 4), generator=g)
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.float64)
    teacher = (
        torch.randn(2, 4, 6, generator=g, dtype=torch.float64).log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
    )
    metrics = {m: collections.defaultdict(list) for m in ("train", "eval")}
    stub = types.SimpleNamespace(
        temperature=1.0, iw_opd_gamma=0.0, iw_opd_epsilon=1e-8, model=torch.nn.Module(), _metrics=metrics
    )
    grads = []
    for trl_side in (True, False):
        theta = logits.clone().requires_grad_(True)
        if trl_side:
            labels = torch.where(mask.bool(), tokens, torch.full_like(tokens, -100))
            loss = IWOPDTrainer._compute_iw_opd_loss(stub, theta, tokens, labels, teacher)
        else:
            logps = theta.log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
            loss, _ = onpolicy_distillation_loss(logps, torch.where(mask.bool(), teacher, 0.0), mask)
        grads.append(torch.autograd.grad(loss, theta)[0])
    assert torch.allclose(grads[0], grads[1])
