"""docs/ppo.md: what the page says about TRL's PPOTrainer and verl's PPO, checked against the pinned libraries."""

from __future__ import annotations

import dataclasses

import torch
import trl
import verl.trainer.ppo.core_algos as core_algos
import verl.utils.torch_functional as verl_functional
from trl import GRPOConfig, GRPOTrainer
from verl.trainer.config import AlgoConfig

from .pinned import default_config, module_exists, module_source, source


def test_trl_has_no_ppo_trainer():
    # ppo.md, the opening “本书固定的 TRL 1.16.0 里已经没有 PPO” with its box “出处：TRL 的 PPO 是怎样被删除的”, the box
    # “历史：TRL v1.12 的 PPOTrainer” and the TRL defaults quoted on the page (kl_coef 0.05,
    # cliprange, vf_coef 0.1, num_ppo_epochs 4, …): TRL 1.16 has no PPOTrainer at all, so none of these can be checked
    # against the pinned TRL; the page has to name the version it took them from.
    assert not module_exists("trl.experimental.ppo")
    assert not hasattr(trl, "PPOTrainer") and not hasattr(trl, "PPOConfig")


def test_trl_1_16_grpo_names_for_ppo_cliprange_clipfrac_and_kl_coef():
    # ppo.md §截断: “ε 是截断范围（TRL 1.16 GRPO 的 epsilon，默认 0.2）”, and the box “历史：TRL v1.12 的 PPOTrainer”,
    # row 策略损失: “cliprange=0.2（TRL 1.16.0 的 GRPO 里叫 epsilon，默认也是 0.2）”; §截断: “clipfrac …
    # （TRL 1.16 的 GRPO 日志叫 clip_ratio/region_mean）”; §回报: “TRL v1.12 的 PPOConfig.kl_coef …；TRL 1.16 的 GRPO
    # 把 KL 放进损失，系数叫 beta”. TRL 1.16.0: trl/trainer/grpo_config.py:693-696 (epsilon, default 0.2),
    # :681 (beta); trl/trainer/grpo_trainer.py:3150 (beta times the KL term, added to the loss), :3273-3279 (the
    # region_mean metric counts the zero-gradient cells: low side with A < 0, high side with A > 0).
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert {"epsilon", "beta"} <= names and not {"cliprange", "kl_coef", "clipfrac"} & names
    assert default_config(GRPOConfig).epsilon == 0.2
    text = source(GRPOTrainer._compute_loss)
    assert "per_token_loss = per_token_loss + self.beta * per_token_kl" in text
    assert "is_low_clipped = (coef_1 < 1 - self.epsilon_low) & (advantages < 0)" in text
    assert "is_high_clipped = (coef_1 > 1 + self.epsilon_high) & (advantages > 0)" in text
    assert 'self._metrics[mode]["clip_ratio/region_mean"].append(global_masked_mean(is_region_clipped.float()))' in text
    assert '"clipfrac"' not in source(GRPOTrainer)


def test_verl_places_the_score_on_the_last_valid_token_in_the_reward_manager():
    # ppo.md “分数放在哪里。本书与 verl … 一样，把分数加在最后一个真实 token（EOS）上。verl 由奖励循环写在
    # valid_response_length - 1 处” with its footnote “在 experimental/reward_loop/reward_manager/base.py 的 assemble_rm_scores
    # 里；workers/reward_manager/naive.py 是旧实现，写法相同”: the trainer gets its scores from RewardLoopManager, whose
    # reward-manager classes come from verl.experimental.reward_loop; apply_kl_penalty only subtracts β·KL from
    # token_level_scores, and only with use_kl_in_reward=True.
    import re
    from pathlib import Path

    import verl

    loop = Path(verl.__file__).parent / "experimental" / "reward_loop"  # its package imports aiohttp: read the files
    base = re.sub(r"\s+", " ", (loop / "reward_manager" / "base.py").read_text(encoding="utf-8"))
    assert "def assemble_rm_scores(" in base and "valid_response_length - 1] = (" in base
    assert "self.reward_manager_cls.assemble_rm_scores(data, scores)" in (loop / "reward_loop.py").read_text("utf-8")
    assert "from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls" in module_source(
        "verl.trainer.ppo.reward"
    )
    assert "reward_tensor[i, valid_response_length - 1] = reward" in module_source("verl.workers.reward_manager.naive")
    ray_trainer = module_source("verl.trainer.ppo.ray_trainer")
    assert "from verl.experimental.reward_loop import RewardLoopManager" in ray_trainer
    assert "token_level_rewards = token_level_scores - beta * kld" in ray_trainer
    assert AlgoConfig().use_kl_in_reward is False


def test_verl_gae_defaults_and_masking():
    # ppo.md: “γ 是折扣（TRL 默认 1.0），λ …（TRL 默认 0.95，verl 默认 1.0）”; table rows GAE 的掩码 “verl 跳过掩码为 0
    # 的位置” and 优势白化 “verl 白化” (values compared in tests/conformance/test_ppo_verl.py).
    assert (AlgoConfig().gamma, AlgoConfig().lam) == (1.0, 1.0)
    gae = source(core_algos.compute_gae_advantage_return)
    assert "nextvalues = values[:, t] * response_mask[:, t] + (1 - response_mask[:, t]) * nextvalues" in gae
    assert "advantages = verl_F.masked_whiten(advantages, response_mask)" in gae


def test_verl_whitening_uses_the_bessel_corrected_variance():
    # ppo.md: “优势白化 … Bessel 校正，同 TRL masked_whiten”; the table: verl whitens.
    x, mask = torch.tensor([1.0, 2.0, 3.0, 9.0]), torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert verl_functional.masked_var(x, mask) == torch.tensor([1.0, 2.0, 3.0]).var(correction=1)


def test_verl_value_loss_is_half_the_clipped_max():
    # ppo.md table row 价值损失: “½ max(·,·) … verl 同形”.
    text = source(core_algos.compute_value_loss)
    assert "clipped_vf_losses = torch.max(vf_losses1, vf_losses2)" in text
    assert "vf_loss = 0.5 * agg_loss(" in text


def test_verl_explained_variance_metric_name():
    # ppo.md, metrics: the book's val/explained_variance is its own name; verl logs critic/vf_explained_var.
    assert '"critic/vf_explained_var":' in module_source("verl.trainer.ppo.metric_utils")


def _verl_actor_config():
    from verl.workers.config.actor import ActorConfig

    return ActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1, rollout_n=1)


def test_verl_logs_ppo_kl_as_the_k1_mean_and_the_clip_fractions():
    # ppo.md, metrics and the table row “近似 KL”: “verl 的 actor/ppo_kl 是 log π_old − log π_θ 在掩码内的平均（即 k1，
    # 与本书的 policy/approxkl_k1 相同）；actor/pg_clipfrac 与 TRL 的 pg_clipfrac 同定义，actor/pg_clipfrac_lower 是
    # dual-clip 起作用的比例”.
    text = source(core_algos.compute_policy_loss_vanilla)
    assert "negative_approx_kl = log_prob - old_log_prob" in text
    assert "ppo_kl = verl_F.masked_mean(-negative_approx_kl, response_mask)" in text
    assert "pg_clipfrac = verl_F.masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)" in text
    for key in ('"actor/pg_clipfrac":', '"actor/ppo_kl":', '"actor/pg_clipfrac_lower":'):
        assert key in text
    old, new = torch.log(torch.tensor([[0.5, 0.2, 0.4]])), torch.log(torch.tensor([[0.4, 0.3, 0.4]]))
    _, metrics = core_algos.compute_policy_loss_vanilla(
        old, new, torch.ones(1, 3), torch.ones(1, 3), "token-mean", _verl_actor_config()
    )
    assert abs(metrics["actor/ppo_kl"] - (old - new).mean().item()) < 1e-6


def test_verl_vanilla_policy_loss_is_dual_clip_by_default():
    # ppo.md table row 策略损失: “verl 默认 loss_mode="vanilla" 对负优势做双截断（dual-clip …）：clip_ratio_c=3，
    # Ã<0 且 w>3 时不再给梯度”; the book's column “不做双截断” (it still gives the gradient −Ãw there).
    from rlhf_toy import ppo_policy_loss

    config = _verl_actor_config()
    assert (config.policy_loss.loss_mode, config.clip_ratio_c) == ("vanilla", 3.0)
    old = torch.zeros(1, 2)
    advantages, mask = torch.tensor([[-1.0, -1.0]]), torch.ones(1, 2)
    new = torch.tensor([[2.0, 0.1]], requires_grad=True)  # w = e² ≈ 7.4 > 3，以及 w ≈ 1.1（截断范围内）
    loss, metrics = core_algos.compute_policy_loss_vanilla(old, new, advantages, mask, "token-mean", config)
    loss.backward()
    assert new.grad[0, 0].item() == 0.0 and new.grad[0, 1].item() != 0.0
    assert metrics["actor/pg_clipfrac_lower"] == 0.5
    ours = new.detach().clone().requires_grad_(True)
    ppo_policy_loss(ours, old, advantages, mask)[0].backward()
    assert abs(ours.grad[0, 0].item() - 0.5 * torch.e**2) < 1e-4  # −Âw / 2 个 token


def test_verl_critic_and_actor_defaults():
    # ppo.md table: “价值损失 … verl cliprange_value=0.5”; “每批样本的轮数 … verl ppo_epochs=1”; “价值模型预热
    # （critic warm-up）：… verl 的 trainer.critic_warmup（默认 0）”; “损失的汇总：verl loss_agg_mode 默认 token-mean”.
    import dataclasses

    from verl.workers.config.critic import CriticConfig

    critic = {f.name: f.default for f in dataclasses.fields(CriticConfig)}
    assert critic["cliprange_value"] == 0.5 and critic["loss_agg_mode"] == "token-mean"
    actor = _verl_actor_config()
    assert actor.ppo_epochs == 1 and actor.loss_agg_mode == "token-mean" and actor.entropy_coeff == 0
    from pathlib import Path

    import verl.trainer.config as verl_config

    yaml_text = (Path(verl_config.__file__).parent / "ppo_trainer.yaml").read_text(encoding="utf-8")
    assert "critic_warmup: 0" in yaml_text


def test_verl_default_ppo_has_no_kl():
    # ppo.md table row KL 惩罚: “verl 默认两种 KL 都关（algorithm.use_kl_in_reward=False、actor.use_kl_loss=False，
    # 此时不建参考模型）；打开奖励里的 KL 时为逐 token k1，kl_ctrl.kl_coef=0.001”.
    from pathlib import Path

    import verl.trainer.config as verl_config

    algo, actor = AlgoConfig(), _verl_actor_config()
    assert algo.use_kl_in_reward is False and actor.use_kl_loss is False
    assert (algo.kl_penalty, algo.kl_ctrl.kl_coef) == ("kl", 0.001)
    yaml_text = (Path(verl_config.__file__).parent / "ppo_trainer.yaml").read_text(encoding="utf-8")
    assert (
        "Reference model will be enabled when actor.use_kl_loss or/and algorithm.use_kl_in_reward is/are True"
        in yaml_text
    )
    kl = core_algos.kl_penalty(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), "kl")
    assert abs(kl.item() - 0.5) < 1e-6  # log π_old − log π_ref：k1
    # 不建参考模型是行为：ray_trainer 用 need_reference_policy 决定 use_reference_policy
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_reference_policy

    def cfg(in_reward, kl_loss):
        return OmegaConf.create(
            {"algorithm": {"use_kl_in_reward": in_reward}, "actor_rollout_ref": {"actor": {"use_kl_loss": kl_loss}}}
        )

    assert need_reference_policy(cfg(False, False)) is False
    assert need_reference_policy(cfg(True, False)) and need_reference_policy(cfg(False, True))
    ray_trainer = module_source("verl.trainer.ppo.ray_trainer")  # it imports torchdata: read the file
    assert "self.use_reference_policy = need_reference_policy(self.config)" in ray_trainer


def test_trl_entropy_from_logits_agrees_on_finite_logits_and_gives_nan_at_minus_inf():
    # entropy.py (included in ppo.md): “在有限的 logits 上与 TRL 1.16.0 的 entropy_from_logits（分块计算
    # −Σ π log π）数值相同 … 两者遇到 −∞ 的 logits 都得到 NaN；这里 … 给出有限的值”.
    from trl.trainer.utils import entropy_from_logits as trl_entropy

    from rlhf_toy import entropy_from_logits

    assert "chunk_entropy = -(torch.exp(logps) * logps).sum(-1)" in source(trl_entropy)
    # “这是 CPU 上的分块实现；CUDA/XPU 上装了 Triton 时 TRL 改走融合核 _fused_logprob_entropy”
    from trl.trainer.utils import _supports_trl_loss_kernel

    assert "_fused_logprob_entropy(logits, index)" in source(trl_entropy)
    assert not _supports_trl_loss_kernel(torch.zeros(2, 3))  # CPU 张量不走融合核
    assert 'logits.device.type in ("cuda", "xpu")' in source(_supports_trl_loss_kernel)
    torch.manual_seed(0)
    logits = 3 * torch.randn(5, 7, 11)
    assert torch.allclose(trl_entropy(logits), entropy_from_logits(logits), atol=1e-6)
    extreme = torch.tensor([[0.0, 1.0, -float("inf")]])
    assert torch.isnan(trl_entropy(extreme)).all() and torch.isfinite(entropy_from_logits(extreme)).all()


def test_grpo_ratio_is_one_under_trl_defaults():
    # ppo.md §重要性采样比率: “TRL 1.16.0 的 GRPO 默认每批生成只走一个优化步（`num_iterations=1`）。
    # 这时比率 w 的值恒为 1，下一节的截断从不起作用”. Pinned trl 1.16.0: grpo_config.py:1099 sets
    # steps_per_generation = gradient_accumulation_steps by default; grpo_trainer.py:2642 generate_every =
    # steps_per_generation * num_iterations, and old log-probs are computed only when gradient_accumulation_steps is not
    # a multiple of it (or with the vLLM correction, at unchanged parameters); otherwise grpo_trainer.py:3066 uses
    # per_token_logps.detach(), so coef_1 = exp(0) = 1 at grpo_trainer.py:3095.
    args = default_config(GRPOConfig)
    assert args.num_iterations == 1
    assert args.steps_per_generation == args.gradient_accumulation_steps
    text = source(GRPOTrainer)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in text
    assert (
        "old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps"
        in source(GRPOTrainer._compute_loss)
    )


def test_grpo_default_dapo_is_the_masked_token_mean_of_the_ppo_loss():
    # ppo.md §截断, under eq. (ppo-policy-loss): “上横线表示在掩码内按 token 平均：整批所有真实 token 的损失加起来，
    # 除以这些 token 的个数。TRL 的 GRPO 默认（`loss_type="dapo"`）在单卡、不做梯度累积时也这样汇总”. TRL 1.16.0:
    # grpo_trainer.py:2498 (num_items_in_batch = the mask sum of the generation batch), :3168-3173 (dapo divides the
    # masked sum by it / num_processes × current_gradient_accumulation_steps / steps_per_generation, i.e. by the batch's
    # token count with one process and gradient_accumulation_steps = steps_per_generation = 1, the defaults).
    args = default_config(GRPOConfig)
    assert args.loss_type == "dapo"
    assert args.gradient_accumulation_steps == 1 and args.steps_per_generation == 1
    assert "num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()" in source(GRPOTrainer)
    loss = source(GRPOTrainer._compute_loss)
    assert 'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes' in loss
    assert (
        "normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation" in loss
    )
    assert "loss = (per_token_loss * mask).sum() / normalizer" in loss
