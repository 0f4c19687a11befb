"""docs/kl.md: what the page says about the KL options of TRL and verl, checked against the pinned libraries."""

from __future__ import annotations

import pytest
import torch
import trl
import verl.trainer.ppo.core_algos as core_algos
from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer
from verl.trainer.config import AlgoConfig
from verl.workers.config import ActorConfig

from rlhf_toy import BanditTask, TablePolicy, importance_corrected_k3, kl_estimate
from rlhf_toy.studies.kl_estimators import exact_kl

from .pinned import default_config, module_exists, module_source, source


def test_trl_grpo_kl_defaults():
    # kl.md table: “TRL GRPOTrainer，KL 进损失 | beta（默认 0.0 …）”; “TRL RLOOTrainer，KL 进奖励 | beta=0.05”.
    assert default_config(GRPOConfig).beta == 0.0
    assert default_config(RLOOConfig).beta == 0.05


def test_trl_use_bias_correction_kl_is_on_by_default():
    # kl.md “本书对照的 TRL 1.16.0 默认 True”, the table rows “TRL GRPOTrainer，KL 进损失（默认）… +β w (e^d − d − 1)，
    # w 带梯度” and “未修正的 k3 … use_bias_correction_kl=False”, and conclusion 3 “记录的 kl 是 w k3 的 token 平均”:
    # in TRL 1.16 it is the default (it matters once beta > 0), and the logged kl is w·k3.
    assert default_config(GRPOConfig).use_bias_correction_kl is True
    text = source(GRPOTrainer._compute_loss)
    assert "coef_1 = torch.exp(log_importance_weights)" in text  # not detached: the gradient flows through w
    assert "if self.args.use_bias_correction_kl: per_token_kl = per_token_kl * coef_1" in text
    assert text.index("per_token_kl = per_token_kl * coef_1") < text.index('self._metrics[mode]["kl"]')
    assert "per_token_loss = per_token_loss + self.beta * per_token_kl" in text


def test_trl_sequence_level_ratio_is_broadcast_onto_the_per_token_kl():
    # kl.md “importance_sampling_level="sequence"（GSPO）时，TRL 乘的 w 是整条回答的长度归一化比率，形状 (B, 1)，
    # 被广播到每个 token 的 k3 上。TRL 自己的文档也说明，这时梯度不再是反向 KL 的无偏梯度”.
    text = source(GRPOTrainer._compute_loss)
    assert "log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)" in text
    assert "log_importance_weights = log_importance_weights.unsqueeze(-1)" in text
    doc = " ".join(GRPOConfig.__doc__.split())
    assert (
        'The unbiased reverse-KL property holds for `importance_sampling_level="token"`; with `"sequence"` a '
        "sequence-level weight is broadcast onto the per-token KL." in doc
    )


def test_trl_sequence_level_kl_gradient_replaces_k3_t_by_the_mean():
    # kl.md “与未修正的 k3 相比，梯度多出一项 (Σ_t k3,t) ∇mean_t log π_θ（issue #6586）；与逐 token 的修正相比，第 t 个位置上的
    # k3,t ∇log π_θ(o_t) 被换成了 ((1/|o|) Σ_s k3,s) ∇log π_θ(o_t)”: TRL's sequence-level w (the two source lines checked in
    # the test above) times the per-token k3, on-policy, one sequence of 4 tokens, gradient with respect to the log-probs.
    assert "per_token_kl = per_token_kl * coef_1" in source(GRPOTrainer._compute_loss)
    torch.manual_seed(0)
    ref_logps = torch.randn(1, 4, dtype=torch.float64) - 1.0
    old_logps = torch.randn(1, 4, dtype=torch.float64) - 1.0
    mask = torch.ones(1, 4, dtype=torch.float64)
    logps = old_logps.clone().requires_grad_(True)  # on-policy: w = 1 in value
    log_w = ((logps - old_logps) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    k3 = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
    (sequence,) = torch.autograd.grad((torch.exp(log_w).unsqueeze(-1) * k3).sum(), logps, retain_graph=True)
    (uncorrected,) = torch.autograd.grad(k3.sum(), logps)
    (token,) = torch.autograd.grad(importance_corrected_k3(logps, ref_logps, old_logps).sum(), logps)
    k3 = k3.detach()
    assert torch.allclose(sequence - uncorrected, k3.sum() / 4 * torch.ones_like(k3))
    assert torch.allclose(sequence - token, k3.sum() / 4 - k3)
    # the token-level correction: −d, the reverse-KL coefficient
    assert torch.allclose(token, (logps - ref_logps).detach())


def test_trl_kl_term_is_aggregated_with_the_policy_loss_by_loss_type():
    # kl.md bullet “TRL 怎样汇总 KL 项”: β·w·k3 is added per token, then aggregated with the policy term by loss_type;
    # "grpo"/"sapo" average within each answer (weight 1/|o_i|), the default "dapo" divides by the batch's token count.
    assert default_config(GRPOConfig).loss_type == "dapo"
    text = source(GRPOTrainer._compute_loss)
    add = text.index("per_token_loss = per_token_loss + self.beta * per_token_kl")
    assert 'if self.loss_type in ["grpo", "sapo"]:' in text[add:]
    assert "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()" in text[add:]
    assert 'elif self.loss_type in ["cispo", "dapo", "vespo"]:' in text[add:]
    assert 'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes' in text[add:]
    assert "loss = (per_token_loss * mask).sum() / normalizer" in text[add:]


def test_trl_logs_the_mean_over_logging_steps():
    # kl.md “TRL 每 logging_steps 步才记录一次（GRPOConfig 默认 10），记录的是这期间各步 kl 的平均”.
    assert default_config(GRPOConfig).logging_steps == 10
    assert "metrics[key] = sum(valid) / len(valid) if valid else None" in source(GRPOTrainer.log)
    assert "self._metrics[mode].clear()" in source(GRPOTrainer.log)


def test_trl_rloo_puts_summed_k1_into_the_reward():
    # kl.md table row “TRL RLOOTrainer，KL 进奖励 | beta=0.05 | r_i − β Σ_t k1,t（整条回答求和，用 log π_old）”.
    text = source(RLOOTrainer)
    assert "per_token_kl = old_per_token_logps - ref_per_token_logps" in text
    assert "kl = (per_token_kl * completion_mask).sum(-1)" in text
    assert "rewards = rewards - self.beta * kl" in text


def test_trl_rloo_multiplies_the_advantage_by_the_ratio():
    # kl.md “异策略” bullet: “TRL 的 RLOOTrainer 在采样时就用 log π_old 算好 k1、扣进奖励，代理目标再把优势乘上比率 w” and
    # “RLOOTrainer 默认 num_iterations=1、steps_per_generation 等于梯度累积步数：每批样本只用一遍、只走一步优化器”:
    # the advantage (built from the k1-shaped reward) is computed once per generation batch and multiplied by
    # exp(log π_θ − log π_old) of the whole completion in the loss.
    defaults = default_config(RLOOConfig)
    assert defaults.num_iterations == 1
    assert defaults.steps_per_generation == defaults.gradient_accumulation_steps
    loss = source(RLOOTrainer._compute_loss)
    assert "log_ratio = logps - old_logps" in loss and 'advantages = inputs["advantages"]' in loss
    assert "coef_1 = torch.exp(log_ratio)" in loss and "per_sequence_loss1 = coef_1 * advantages" in loss
    generate = source(RLOOTrainer)
    assert generate.index("per_token_kl = old_per_token_logps - ref_per_token_logps") < generate.index(
        "advantages = rewards - baselines"
    )


def test_trl_has_no_ppo_trainer():
    # kl.md footnote [^trl-ppo] “TRL 的 PPOTrainer 已被删除（PR #7020），1.16.0 中没有它” (conclusion 4 and the table row
    # “TRL PPOTrainer（历史：… 1.16.0 中没有）”).
    assert not module_exists("trl.experimental.ppo")
    assert not hasattr(trl, "PPOTrainer") and not hasattr(trl, "PPOConfig")


def test_trl_k3_is_not_clamped():
    # kl.md: “两个限幅参数默认是 None（不限幅，与 TRL 相同）” and the table rows “… 不限幅”.
    text = source(GRPOTrainer._compute_loss)
    k3 = text[text.index("per_token_kl = (") : text.index("# Importance sampling correction for the KL divergence")]
    assert "torch.exp(ref_per_token_logps - per_token_logps)" in k3 and "clamp" not in k3


def test_verl_kl_defaults():
    # kl.md table: “verl，KL 进奖励 | algorithm.use_kl_in_reward=True（默认 False），algorithm.kl_penalty="kl"，
    # kl_ctrl.kl_coef=0.001” and “verl，KL 进损失 | actor.use_kl_loss=True（默认 False），actor.kl_loss_type="low_var_kl"，
    # kl_loss_coef=0.001”: both off by default; the loss path calls kl_penalty with kl_loss_type, the reward path
    # subtracts β·KL from the token-level scores.
    algorithm = AlgoConfig()
    assert (algorithm.use_kl_in_reward, algorithm.kl_penalty, algorithm.kl_ctrl.kl_coef) == (False, "kl", 0.001)
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert (actor.use_kl_loss, actor.kl_loss_type, actor.kl_loss_coef) == (False, "low_var_kl", 0.001)
    losses = module_source("verl.workers.utils.losses")
    assert "kld = kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, kl_penalty=config.kl_loss_type)" in losses
    assert "token_level_rewards = token_level_scores - beta * kld" in module_source("verl.trainer.ppo.ray_trainer")


def test_verl_estimator_names_and_clamps():
    # kl.md: “verl 的 low_var_kl 先给对数比率限幅，再给结果限幅” (eq. kl-clamp, ±20 then ±10), the row “verl，KL 进损失 |
    # kl_loss_type="low_var_kl"（即 "k3"）… | kl_estimate(..., "k3", log_ratio_clamp=20, value_clamp=10)” and the row
    # “verl 的其他名字 | kl/k1，mse/k2，abs | −d；½d²；|d|（k1、k2 不限幅）” (k1 = log π − log π_ref = −d).
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
    assert torch.equal(k3, kl_estimate(logps, ref_logps, "k3", log_ratio_clamp=20, value_clamp=10))


def test_verl_k3_clamp_drops_the_gradient_on_both_sides():
    # kl.md “限幅” and “限幅什么时候起作用”: k3 = 10 at d ≈ 2.61 and d ≈ −11.0; beyond either, verl's low_var_kl has no
    # gradient (“π_ref = 1e−6 的 token 只要被抬到 0.06 以上，KL 项也不再管它”), inside it is 1 − e^d.
    ref_logps = torch.tensor([[1e-6, 1e-7, 1e-5, 0.2]], dtype=torch.float64).log()
    logps = torch.tensor([[0.5, 0.01, 0.1, 0.01]], dtype=torch.float64).log().requires_grad_(True)
    k3 = core_algos.kl_penalty(logps, ref_logps, "low_var_kl")
    (grad,) = torch.autograd.grad(k3.sum(), logps)
    d = (ref_logps - logps).detach()
    assert d[0, 0] < -11.0 and d[0, 1] < -11.0 and -11.0 < d[0, 2] < 2.61 < d[0, 3]
    assert k3[0, 0] == k3[0, 1] == k3[0, 3] == 10
    assert grad[0, 0] == grad[0, 1] == grad[0, 3] == 0
    assert torch.isclose(grad[0, 2], 1 - d[0, 2].exp())


def test_verl_k3_plus_is_straight_through():
    # kl.md “verl 0.9.1 的 kl_penalty 去掉名字末尾的 +，值按 k3（含两层限幅）算，梯度换成 ½(log π_θ − log π_ref)² 的梯度 −d”
    # (table row “verl，直通估计 | kl_loss_type="k3+"（或 "low_var_kl+"）”) and “同策略时与修正 k3 的逐样本梯度相同”.
    ref_logps = torch.tensor([[-1.0, -1.0, -1.0]], dtype=torch.float64)
    for name in ("k3+", "low_var_kl+"):
        logps = torch.tensor([[-2.0, -0.5, -30.0]], dtype=torch.float64, requires_grad=True)
        value = core_algos.kl_penalty(logps, ref_logps, name)
        assert torch.allclose(value, core_algos.kl_penalty(logps.detach(), ref_logps, "k3"))
        (grad,) = torch.autograd.grad(value.sum(), logps)
        assert torch.allclose(grad, (logps - ref_logps).detach())  # not clamped, even where the value is
        (corrected,) = torch.autograd.grad(importance_corrected_k3(logps, ref_logps).sum(), logps)
        assert torch.allclose(grad, corrected)  # float64: in float32 w·k3 at d = 29 loses the gradient to cancellation


def test_verl_plus_suffix_works_for_every_name():
    # kl.md table row “verl，直通估计 | kl_loss_type="<名字>+"，例如 "k3+"、"k1+" | 值按去掉 + 的名字算 …，梯度一律是 k2 的梯度 −d；
    # "k2+"、"mse+" 就是 k2”, the bullet “k1+ 记录 k1，梯度同 k2” and the common error “在 verl 里可以设 kl_loss_type="k1+"”.
    assert 'base_kl_penalty = kl_penalty[:-1] if kl_penalty.endswith("+") else kl_penalty' in source(
        core_algos.kl_penalty
    )
    ref_logps = torch.tensor([[-1.0, -1.0, -1.0]], dtype=torch.float64)
    for name, base in (("k1+", "k1"), ("kl+", "kl"), ("abs+", "abs"), ("k2+", "k2"), ("mse+", "mse")):
        logps = torch.tensor([[-2.0, -0.5, -30.0]], dtype=torch.float64, requires_grad=True)
        value = core_algos.kl_penalty(logps, ref_logps, name)
        assert torch.equal(value.detach(), core_algos.kl_penalty(logps.detach(), ref_logps, base))
        (grad,) = torch.autograd.grad(value.sum(), logps)
        assert torch.allclose(grad, (logps - ref_logps).detach())  # −d = log π_θ − log π_ref, k2's gradient
    logps = torch.tensor([[-2.0, -0.5]], dtype=torch.float64)
    assert torch.equal(
        core_algos.kl_penalty(logps, ref_logps[:, :2], "k1+"), kl_estimate(logps, ref_logps[:, :2], "k1")
    )


def test_verl_default_batch_gives_four_off_policy_updates():
    # kl.md “异策略” bullet: “verl 默认每批分 4 个小批更新，后 3 个小批都是异策略的”, and the test list “KL 损失用当前策略的对数概率、
    # 不乘 w”: train_batch_size 1024 and ppo_mini_batch_size 256 (both in prompts; the trainer multiplies the mini-batch by
    # rollout.n), one PPO epoch; the KL loss is kl_penalty(log_prob, ref_log_prob) with the current log-probs and no ratio.
    import importlib.util
    from pathlib import Path

    from omegaconf import OmegaConf

    root = Path(importlib.util.find_spec("verl").origin).parent
    shipped = OmegaConf.load(root / "trainer/config/_generated_ppo_trainer.yaml")
    actor = shipped.actor_rollout_ref.actor
    assert (shipped.data.train_batch_size, actor.ppo_mini_batch_size, actor.ppo_epochs) == (1024, 256, 1)
    trainer = module_source("verl.trainer.ppo.ray_trainer")
    assert "ppo_mini_batch_size = ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n" in trainer
    losses = module_source("verl.workers.utils.losses")
    kl_block = losses[losses.index("# add kl loss") : losses.index("policy_loss += kl_loss * config.kl_loss_coef")]
    assert "kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob" in kl_block
    assert "old_log_prob" not in kl_block and "ratio" not in kl_block


def test_verl_full_kl_is_not_implemented():
    # kl.md “verl 为它预留了 kl_penalty="full"，0.9.1 中还是 NotImplementedError” and the table row “full 在 0.9.1 中未实现”.
    with pytest.raises(NotImplementedError):
        core_algos.kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), "full")
    assert "logprob and ref_logprob should contain the logits for every token in vocabulary" in source(
        core_algos.kl_penalty_forward
    )


def test_verl_logs_the_clamped_k3_as_kl_loss():
    # kl.md “verl 的 low_var_kl 把值限幅到 10……它记录的 kl_loss 在期望上也偏低：抬高 8 时期望只有真值的 0.593”.
    text = module_source("verl.workers.utils.losses")
    assert "kld = kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, kl_penalty=config.kl_loss_type)" in text
    assert 'metrics["kl_loss"] = Metric(value=kl_loss, aggregation=metric_aggregation)' in text
    # The page's pair (prompt 0, correct answer's logit raised by 8), summed exactly over the 8 answers with verl's own function.
    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    ref_logps = TablePolicy.random(20, 8).logits[0].detach().double().log_softmax(-1)
    logits = ref_logps.clone()
    logits[task.correct[0]] += 8.0
    logps = logits.log_softmax(-1)
    verl_k3 = core_algos.kl_penalty(logps, ref_logps, "low_var_kl")
    ratio = ((logps.exp() * verl_k3).sum() / exact_kl(logps, ref_logps)).item()
    assert abs(ratio - 0.593) < 5e-4
    unclamped = kl_estimate(logps, ref_logps, "k3")
    assert abs(((logps.exp() * unclamped).sum() / exact_kl(logps, ref_logps)).item() - 1.0) < 1e-9
