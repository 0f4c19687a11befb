"""docs/overview.md: what chapter 1 says about TRL and verl, checked against the pinned TRL 1.16.0 and verl 0.9.1."""

from __future__ import annotations

import inspect
import re

import verl.trainer.ppo.core_algos as core_algos
from transformers import Trainer
from trl import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer, RewardTrainer
from trl.trainer.utils import get_config_model_id
from verl.trainer.config import AlgoConfig

from rlhf_toy import grpo_loss, ppo_policy_loss, reinforce_loss

from .pinned import DOCS, default_config, source


def test_grpo_defaults_to_no_kl_and_no_reference_model():
    # overview.md “四个模型”: “TRL 1.16.0 的 `GRPOConfig` 默认 `beta=0.0`，这时连参考模型都不加载”; “运行结果”,
    # footnote seed-trl-defaults: “TRL 1.16.0 的默认是 β = 0（不加 KL 项）、`num_iterations=1`（每批样本只更新一次，
    # 本书默认 2 次）、`loss_type="dapo"`”;
    # “带 KL 正则的目标”, after eq. (rlhf-optimum): “TRL 1.16.0 的 GRPO 默认 β = 0，损失里没有 KL 项，也就没有这一处差别”;
    # “直觉”: “TRL 默认不加（KL 系数 β = 0）”; the “前瞻” fold: “TRL 默认的 GRPO（β = 0）……满足第二条：
    # 默认每批生成只更新一次” (steps_per_generation defaults to gradient_accumulation_steps, trl grpo_config.py:1099;
    # the ratio is then 1, see test_ppo_page.py::test_grpo_ratio_is_one_under_trl_defaults).
    args = default_config(GRPOConfig)
    assert (args.beta, args.num_iterations, args.loss_type) == (0.0, 1, "dapo")
    assert args.steps_per_generation == args.gradient_accumulation_steps
    assert "if self.beta == 0.0: # If beta is 0.0, the reference model is not needed self.ref_model = None" in source(
        GRPOTrainer.__init__
    )


def test_trl_default_grpo_reweights_the_gradient_by_prompt_and_by_batch_length():
    # overview.md, the “前瞻” fold: “第一、三条它不满足，所以期望梯度是这个目标的梯度重新加权的结果”; “一是组内标准化：
    # 每组奖励减去组内平均、再除以组内标准差（`scale_rewards="group"`）”; “二是 `loss_type="dapo"`：逐 token 损失加起来，
    # 除以这批生成的 token 总数”; footnote seed-trl-defaults says the same of `dapo`. TRL 1.16.0: grpo_config.py:789
    # (scale_rewards, default "group"); grpo_trainer.py:2498 (num_items_in_batch = the generation batch's mask sum,
    # gathered over processes), :3168-3173 (dapo divides the masked sum by it, rescaled to one accumulation window).
    args = default_config(GRPOConfig)
    assert (args.scale_rewards, args.loss_type) == ("group", "dapo")
    assert "num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()" in source(GRPOTrainer)
    loss = source(GRPOTrainer._compute_loss)
    assert (
        'elif self.loss_type in ["cispo", "dapo", "vespo"]: # `num_items_in_batch` spans the generation batch, '
        "so rescale it to one accumulation window "
        'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes' in loss
    )
    assert "loss = (per_token_loss * mask).sum() / normalizer" in loss


def test_trl_logs_the_sampled_reward_as_reward():
    # overview.md: “TRL 的日志里只有这个采样估计，名字就叫 `reward`”.
    assert 'self._metrics[mode]["reward"].append(torch.nanmean(rewards).item())' in source(GRPOTrainer)


def test_history_keys_are_trl_metric_names():
    # overview.md “运行结果”: the history keys “键名与 TRL 的日志相同（`reward`、`kl`、`loss`、`rewards/margins` 等）”;
    # footnote metric-names: “本书的 `clip_ratio` 对应 TRL 1.16.0 的 `clip_ratio/region_mean`，TRL 另外还分别记
    # `clip_ratio/low_mean` 与 `clip_ratio/high_mean`”; footnote seed-trl-defaults: “默认配置下日志里没有 `kl`”
    # (TRL only logs `kl` when β ≠ 0).
    grpo = source(GRPOTrainer)
    for name in ("reward", "kl", "clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean"):
        assert f'self._metrics[mode]["{name}"]' in grpo
    assert 'self._metrics[mode]["clip_ratio"]' not in grpo
    assert 'if self.beta != 0.0: self._metrics[mode]["kl"].append(' in source(GRPOTrainer._compute_loss)
    assert 'self._metrics[mode]["rewards/margins"]' in source(DPOTrainer)
    assert 'logs["loss"] =' in source(Trainer._maybe_log_save_evaluate)
    assert default_config(DPOConfig).loss_type == ["sigmoid"]


def test_loss_type_chooses_the_denominator_or_replaces_the_per_token_loss():
    # overview.md “玩具在哪里做了简化”: “逐 token 损失怎样加成一个数也是这样：先在每条回答内平均，还是除以整批的
    # token 总数，或是除以一个常数。TRL 用 `loss_type` 选择”; the “已测试” box: `grpo`、`bnpo`、`dr_grpo`、`dapo` only
    # change the denominator, `cispo`, `sapo`, `vespo` replace the
    # per-token loss (grpo.md, the loss_type bullet of its “与论文 / TRL 的差异” box, says the same).
    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    for value in ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"):
        assert f"'{value}'" in help_text
    loss = source(GRPOTrainer._compute_loss)
    # one clipped surrogate for the four aggregation choices (and luspo) ...
    assert 'elif self.loss_type in ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]: coef_2 = torch.clamp(' in loss
    # ... and three other per-token losses
    assert 'if self.loss_type == "cispo": clamped_ratios = torch.clamp(coef_1, max=self.epsilon_high).detach()' in loss
    assert 'elif self.loss_type == "sapo": temperatures = torch.where(' in loss
    assert 'elif self.loss_type == "vespo": phi_seq = self.get_gamma_weights(' in loss
    # the four aggregation choices differ only in how the masked per-token losses are summed and divided
    assert 'if self.loss_type in ["grpo", "sapo"]: loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1)' in loss
    assert 'elif self.loss_type == "bnpo": loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)' in loss
    assert (
        'elif self.loss_type == "dr_grpo": loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)'
        in loss
    )
    assert 'elif self.loss_type in ["cispo", "dapo", "vespo"]:' in loss
    # luspo sums each completion's tokens without dividing by its length
    assert 'elif self.loss_type == "luspo":' in loss and "loss = (per_token_loss * mask).sum(-1).mean()" in loss


def test_verl_policy_losses_take_per_token_tensors_and_a_mask():
    # overview.md “玩具在哪里做了简化”, bullet “库里的损失接口” (the main text of “语言模型就是策略” links to it):
    # “verl `core_algos` 里的策略损失函数（如 `compute_policy_loss_vanilla`）接收同样的逐 token 张量加掩码。
    # 这些张量在 verl 里叫 `old_log_prob`、`log_prob`、`advantages`、`response_mask`”;
    # “verl 把旧策略的对数概率放在第一个。这个参数大多叫 `old_log_prob`，`compute_policy_loss_reinforce` 里叫 `rollout_log_prob`”.
    params = list(inspect.signature(core_algos.compute_policy_loss_vanilla).parameters)
    assert params[:4] == ["old_log_prob", "log_prob", "advantages", "response_mask"]
    losses = {name: fn for name, fn in vars(core_algos).items() if name.startswith("compute_policy_loss")}
    firsts = {name: list(inspect.signature(fn).parameters)[:4] for name, fn in losses.items()}
    assert len(firsts) > 10
    for name, first in firsts.items():
        expected_first = "rollout_log_prob" if name == "compute_policy_loss_reinforce" else "old_log_prob"
        assert first == [expected_first, "log_prob", "advantages", "response_mask"], name
    assert list(inspect.signature(ppo_policy_loss).parameters)[:4] == ["logps", "old_logps", "advantages", "mask"]
    grpo_params = ["logps", "old_logps", "ref_logps", "advantages", "mask"]
    assert list(inspect.signature(grpo_loss).parameters)[:5] == grpo_params
    assert list(inspect.signature(reinforce_loss).parameters)[:3] == ["logps", "advantages", "mask"]


def test_trl_losses_are_trainer_methods_that_compute_per_token_logps():
    # overview.md “玩具在哪里做了简化”, bullet “库里的损失接口”: “TRL 没有独立的损失函数：
    # GRPOTrainer、DPOTrainer 的损失写在 `_compute_loss(model, inputs)` 里，内部先算出逐 token 对数概率”.
    assert list(inspect.signature(GRPOTrainer._compute_loss).parameters) == ["self", "model", "inputs"]
    assert list(inspect.signature(DPOTrainer._compute_loss).parameters)[:3] == ["self", "model", "inputs"]
    assert "per_token_logps" in source(GRPOTrainer._compute_loss)
    assert "logps = per_token_logps.sum(dim=1)" in source(DPOTrainer._compute_loss)
    # “`RewardTrainer.compute_loss` 读的则是序列分类头给每条回答的一个分数”.
    assert list(inspect.signature(RewardTrainer.compute_loss).parameters)[:3] == ["self", "model", "inputs"]
    assert not hasattr(RewardTrainer, "_compute_loss")
    assert "rewards_chosen, rewards_rejected = torch.chunk(outputs.logits.squeeze(-1), chunks=2)" in source(
        RewardTrainer.compute_loss
    )


def test_reference_model_is_a_fresh_copy_of_the_policy_checkpoint():
    # overview.md “玩具在哪里做了简化”: “TRL 1.16.0 的 GRPOTrainer 没有 `ref_model` 参数。它在 β = 0 时不建参考模型；
    # β ≠ 0 时按策略模型配置里的 `_name_or_path` 从检查点再加载一份作参考模型。DPOTrainer 不传 `ref_model` 时同样从
    # 检查点再加载一份”;
    # “DPO 还可以事先算好参考对数概率……打开后（不用 FSDP 时）训练中不另放参考模型，
    # 参考对数概率在训练开始前直接用传进来的策略算”;
    # “用 LoRA 适配器训练时，TRL 也不另载参考模型，而是关掉适配器，或把已有的适配器复制成冻结的 `"ref"` 适配器”
    # (the details are in your-run.md “参考模型：关掉适配器就是原模型”, tested in test_your_run_page.py).
    assert "ref_model" not in inspect.signature(GRPOTrainer.__init__).parameters
    assert "ref_model" in inspect.signature(DPOTrainer.__init__).parameters
    assert 'return getattr(config, "_name_or_path", "")' in source(get_config_model_id)
    grpo, dpo = source(GRPOTrainer.__init__), source(DPOTrainer.__init__)
    assert "create_model_from_path(get_config_model_id(self.model.config)" in grpo
    assert "ref_model_path = get_config_model_id(self.model.config)" in dpo
    assert "elif is_peft_model(model): # If PEFT is used, the reference model is not needed" in grpo
    assert "if is_peft_model(self.model) or (args.precompute_ref_log_probs and not self.is_fsdp_enabled)" in dpo
    assert "model = self.ref_model or self.model" in source(DPOTrainer._precompute_ref_logps)
    # An existing PeftModel: its "default" adapter is copied into a frozen "ref" adapter (GRPO only when β ≠ 0).
    assert "elif is_peft_model(model) and args.beta != 0.0:" in grpo
    assert "elif is_peft_model(model) and ref_model is None:" in dpo
    for text in (grpo, dpo):
        assert 'model.add_adapter("ref", default_config)' in text
        assert "ref_param.data.copy_(param.data)" in text
    ref_adapter = 'adapter_name="ref" if "ref" in {}.peft_config else None'
    assert ref_adapter.format("model") in source(GRPOTrainer._generate_and_score_completions)
    assert ref_adapter.format("unwrapped_model") in source(DPOTrainer.compute_ref_log_probs)


def test_dpo_can_precompute_reference_logps():
    # overview.md “四个模型”: “DPO 还可以在训练前事先算好参考模型的对数概率，训练中就不用放参考模型”; the box
    # “玩具在哪里做了简化”: “`DPOConfig(precompute_ref_log_probs=True)`，默认关闭。
    # 打开后（不用 FSDP 时）训练中不另放参考模型，参考对数概率在训练开始前直接用传进来的策略算”.
    assert default_config(DPOConfig).precompute_ref_log_probs is False
    assert "args.precompute_ref_log_probs and not self.is_fsdp_enabled" in source(DPOTrainer.__init__)
    assert "model = self.ref_model or self.model" in source(DPOTrainer._precompute_ref_logps)


def test_grpo_puts_importance_weighted_k3_in_the_loss_and_log():
    # overview.md “运行结果”, footnote seed-trl-defaults: “设了 β ≠ 0 时，放进损失、记进日志的是乘上比率 w 的 k3”
    # (TRL 1.16.0's default `use_bias_correction_kl=True`).
    assert default_config(GRPOConfig).use_bias_correction_kl is True
    loss = source(GRPOTrainer._compute_loss)
    assert "if self.args.use_bias_correction_kl: per_token_kl = per_token_kl * coef_1" in loss
    assert 'self._metrics[mode]["kl"].append(global_masked_mean(per_token_kl))' in loss
    # The logged value is the weighted one: the multiplication comes before the metric.
    assert loss.index("per_token_kl = per_token_kl * coef_1") < loss.index('self._metrics[mode]["kl"]')
    assert (
        "per_token_kl = ( torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1 )"
        in loss
    )
    assert "per_token_loss = per_token_loss + self.beta * per_token_kl" in loss


def test_verl_discount_defaults_to_one():
    # overview.md table “标准强化学习与 RLHF”: “折扣 γ …通常取 γ = 1”, footnote verl-gamma: “例如 verl 0.9.1 的
    # `algorithm.gamma` 默认 1.0”.
    assert AlgoConfig().gamma == 1.0


def test_footnote_definitions_do_not_swallow_body_text():
    # E1 (review r2): Python-Markdown's footnotes extension joins a non-indented line right after `[^x]: ...` to the
    # footnote. On overview.md every footnote definition is followed by a blank line, an indented line or another one.
    lines = (DOCS / "overview.md").read_text(encoding="utf-8").splitlines()
    bad = [
        (n + 2, nxt)
        for n, (line, nxt) in enumerate(zip(lines, lines[1:], strict=False))
        if re.match(r"^\[\^[^\]]+\]:", line) and nxt.strip() and not nxt.startswith("    ") and not nxt.startswith("[^")
    ]
    assert bad == []
