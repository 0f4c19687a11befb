"""docs/dpo-variants.md: what the page says about TRL's DPOTrainer and CPOTrainer, checked against the pinned TRL."""

from __future__ import annotations

import dataclasses
import re

import torch
import trl
from conformance.trl_private import dpo_trainer
from trl import DPOConfig
from trl.experimental.cpo import CPOConfig, CPOTrainer
from trl.trainer.dpo_trainer import DPOTrainer
from trl.trainer.utils import FusedCausalLMOutput

from rlhf_toy import dpo_loss

from .pinned import config, default_config, module_exists, source

TRL_DPO_LOSS_TYPES = {
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
    "sigmoid_norm",
}


def branch(loss_type: str) -> str:
    """The source of one `loss_type` branch of DPOTrainer._compute_loss."""
    text = source(DPOTrainer._compute_loss)
    return text.split(f'if loss_type == "{loss_type}":', 1)[1].split("elif loss_type ==", 1)[0]


def test_dpo_loss_types_in_trl():
    # dpo-variants.md, table and “loss_type 还可以是 exo_pair、nca_pair、bco_pair、sppo_hard、aot、aot_unpaired、apo_zero、
    # apo_down、discopop、sft”: the loss types of TRL 1.16's DPOTrainer, sigmoid_norm among them.
    text = source(DPOTrainer._compute_loss)
    listed = re.search(r"Should be one of \[(.*?)\]", text)[1]
    assert set(re.findall(r"'(\w+)'", listed)) == TRL_DPO_LOSS_TYPES
    assert {f'"{name}"' for name in TRL_DPO_LOSS_TYPES} <= set(re.findall(r'loss_type == ("\w+")', text))


def test_ipo_and_sigmoid_norm_divide_by_the_length_clamped_to_one():
    # dpo-variants.md: “TRL 的 IPO 和 sigmoid_norm 先把对数概率比除以回答长度”, “损失里再把长度限幅为至少 1”.
    for loss_type in ("ipo", "sigmoid_norm"):
        assert "chosen_avg_score = chosen_scores / chosen_mask.sum(dim=1).clamp(min=1.0)" in branch(loss_type)


def test_label_smoothing_not_read_by_sigmoid_hinge_ipo_sigmoid_norm():
    # dpo-variants.md: cDPO “没有：sigmoid 不读 label_smoothing”; “TRL 的 ipo、hinge 公式里没有 label_smoothing”;
    # robust reads it (so do exo_pair, aot and aot_unpaired: “exo_pair、aot 另读 label_smoothing”).
    for loss_type in ("sigmoid", "hinge", "ipo", "sigmoid_norm"):
        assert "label_smoothing" not in branch(loss_type), loss_type
    for loss_type in ("robust", "exo_pair", "aot", "aot_unpaired"):
        assert "self.label_smoothing" in branch(loss_type), loss_type


def test_robust_label_smoothing_outside_range_only_warns():
    # dpo-variants.md: robust “ε ∉ [0, 0.5) 只警告”.
    text = source(DPOTrainer.__init__)
    assert 'if "robust" in self.loss_types and not (0.0 <= self.label_smoothing < 0.5): logger.warning(' in text


def test_cpo_trainer_lives_in_trl_experimental_cpo_with_simpo_defaults():
    # dpo-variants.md, SimPO row: “CPOTrainer：loss_type="simpo"，simpo_gamma=γ（默认 0.5），cpo_alpha=0”, and
    # “CPOTrainer 的 cpo_alpha 默认是 1.0”. CPOTrainer is in trl.experimental.cpo, not in trl.
    assert module_exists("trl.experimental.cpo")
    args = default_config(CPOConfig)
    assert (args.simpo_gamma, args.cpo_alpha) == (0.5, 1.0)
    assert "loss = losses.mean() + self.cpo_alpha * policy_nll_loss" in source(CPOTrainer)


def test_cpo_averages_log_probs_for_simpo_and_ipo():
    # dpo-variants.md: “CPOTrainer 对 simpo 用逐 token 平均的对数概率，对 sigmoid、hinge 用求和”; also accepts
    # label_smoothing for simpo “做法同 cDPO”.
    assert 'average_log_prob=self.loss_type in ["ipo", "simpo"]' in source(CPOTrainer)
    simpo = source(CPOTrainer.cpo_loss).split('if self.loss_type == "simpo":', 1)[1].split("elif", 1)[0]
    assert "* (1 - self.label_smoothing) - F.logsigmoid(-self.beta * logits) * self.label_smoothing" in simpo


def test_rewards_metrics_do_not_depend_on_loss_type():
    # dpo-variants.md, row 指标 rewards/*: “β sg(ρ)，与 loss_type 无关”: computed after the loss-type loop.
    text = source(DPOTrainer._compute_loss)
    assert text.index("chosen_rewards = self.beta * chosen_logratios.detach()") > text.index(
        "for loss_type, loss_weight"
    )
    assert text.index("chosen_rewards = self.beta * chosen_logratios.detach()") > text.index("Unknown loss type")


def test_fully_truncated_examples_are_dropped():
    # dpo-variants.md “用法：空回答”: “TRL 给回答末尾加 EOS（TRL 1.16.0 对纯文本格式的数据如此）”, “TRL 1.16.0 在准备数据时
    # 就丢掉提示词占满 max_length 的样本”; truncation_mode keep_start is the default.
    text = source(DPOTrainer._prepare_dataset)
    assert 'example["chosen"] = example["chosen"] + eos_token' in text
    assert 'dataset.filter(lambda example: len(example["prompt_ids"]) < args.max_length' in text
    assert default_config(DPOConfig).truncation_mode == "keep_start"


def test_simpo_gamma_is_a_cpo_option_not_a_dpo_option():
    # dpo-variants.md: “simpo_gamma（默认 0.5，只用于 simpo）的名字同 TRL CPOConfig，因为 TRL 的 DPOTrainer 没有 simpo”.
    assert "simpo_gamma" not in {field.name for field in dataclasses.fields(DPOConfig)}
    assert "simpo_gamma" in {field.name for field in dataclasses.fields(CPOConfig)}
    assert "simpo" not in TRL_DPO_LOSS_TYPES


def test_loss_type_is_a_list_with_loss_weights():
    # dpo-variants.md: “TRL 1.16.0 的 loss_type 是列表（默认 ["sigmoid"]），可以配合 loss_weights 把几个损失加权相加”.
    args = config(DPOConfig, loss_type="sigmoid")
    assert args.loss_type == ["sigmoid"]
    args = config(DPOConfig, loss_type=["sigmoid", "sft"], loss_weights=[1.0, 0.5])
    assert args.loss_type == ["sigmoid", "sft"]
    assert "for loss_type, loss_weight in zip(self.loss_types, self.loss_weights, strict=True):" in source(
        DPOTrainer._compute_loss
    )
    assert "loss += per_sequence_loss.mean() * loss_weight" in source(DPOTrainer._compute_loss)


def test_margin_changing_options():
    # dpo-variants.md: “改变间隔本身的 f_divergence_type（f-DPO：正向 KL、JS、α 散度，与不兼容的 loss_type 同用时报错）、
    # ld_alpha（LD-DPO）与 use_weighting（WPO）”.
    args = default_config(DPOConfig)
    assert (args.f_divergence_type, args.ld_alpha, args.use_weighting) == ("reverse_kl", None, False)
    doc = re.sub(r"\s+", " ", DPOConfig.__doc__)
    assert "`reverse_kl` (default), `forward_kl`, `js_divergence`, `alpha_divergence`" in doc
    assert "α parameter from the LD-DPO paper" in doc
    assert "[WPO](https://huggingface.co/papers/2406.11827)" in doc
    assert "is only supported for the following loss types" in source(DPOTrainer.__init__)


def test_dpo_hinge_is_on_the_log_ratio_margin():
    # dpo-variants.md, hinge: “这里和 TRL 用的是 RSO 的归一化版本（……相对参考模型的对数概率比）”: DPOTrainer's hinge
    # reads delta_score, the margin of the log-ratios against the reference model (added in TRL PR #866, “add SLiC
    # hinge loss to DPOTrainer … from the RSO paper equation (12)”).
    assert "per_sequence_loss = torch.relu(1 - self.beta * delta_score)" in branch("hinge")
    text = source(DPOTrainer._compute_loss)
    assert "delta_score = chosen_scores - rejected_scores" in text
    # chosen_scores is the log-ratio only on the default f_divergence_type="reverse_kl" branch.
    assert "chosen_logratios = chosen_logps - ref_chosen_logps" in text
    assert 'if self.f_divergence_type == "reverse_kl": # standard DPO chosen_scores = chosen_logratios' in text
    assert default_config(DPOConfig).f_divergence_type == "reverse_kl"


def test_cpo_hinge_has_no_reference_model():
    # dpo-variants.md: “CPOTrainer 没有参考模型，它的 hinge 是 SLiC 原始的 max(0, 1-β(log πθ(y_w)-log πθ(y_l)))，
    # 不是上表 DPOTrainer 的归一化版本”: with the default alpha=0 the logits are the policy log-prob difference.
    assert default_config(CPOConfig).alpha == 0.0
    text = source(CPOTrainer.cpo_loss)
    assert "logits = (policy_chosen_logps - policy_rejected_logps).to(self.accelerator.device)" in text
    assert 'elif self.loss_type == "hinge": losses = torch.relu(1 - self.beta * logits)' in text
    assert "ref_model" not in text


def test_kto_and_orpo_locations():
    # dpo-variants.md “本节没有实现的”: “KTO……TRL 1.16.0 里是 KTOTrainer；ORPO……在 trl.experimental.orpo”;
    # “CPOTrainer 也在 trl.experimental.cpo，不在 trl 顶层”.
    assert hasattr(trl, "KTOTrainer")
    assert module_exists("trl.experimental.orpo") and not hasattr(trl, "ORPOTrainer")
    assert not hasattr(trl, "CPOTrainer")
    assert {"apo_zero", "apo_down", "sft"} <= TRL_DPO_LOSS_TYPES
    assert "ld_alpha" in {field.name for field in dataclasses.fields(DPOConfig)}


def test_cdpo_is_a_weighted_robust_plus_sigmoid_combination():
    # dpo-variants.md, cDPO row “没有单独的选项（可用 robust 与 sigmoid 的负权重组合精确得到）” and 常见错误
    # “loss_type=["robust", "sigmoid"]、loss_weights=[-(1-2ε), 2(1-ε)]、label_smoothing=ε”: DPOConfig only checks that the
    # two lists have the same length (a negative weight is accepted), and DPOTrainer._compute_loss, run on one batch,
    # gives rlhf_toy's cDPO (value and gradient), not plain DPO.
    eps, beta = 0.2, 0.5
    weights = [-(1 - 2 * eps), 2 * (1 - eps)]
    args = config(DPOConfig, loss_type=["robust", "sigmoid"], loss_weights=weights, label_smoothing=eps)
    assert (args.loss_type, args.loss_weights, args.label_smoothing) == (["robust", "sigmoid"], weights, eps)
    trainer = dpo_trainer("robust", beta, eps)
    trainer.loss_types, trainer.loss_weights = list(args.loss_type), list(args.loss_weights)

    pairs, sequence, prompt = 4, 7, 2
    g = torch.Generator().manual_seed(0)
    completion_mask = torch.zeros(2 * pairs, sequence)
    completion_mask[:, prompt:] = 1
    per_token = (-torch.rand(2 * pairs, sequence - 1, generator=g, dtype=torch.float64)) * completion_mask[:, 1:]
    ref = per_token.sum(1) + 0.7 * torch.randn(2 * pairs, generator=g, dtype=torch.float64)
    theirs_leaf = per_token.clone().requires_grad_(True)
    zeros = torch.zeros_like(per_token)
    outputs = FusedCausalLMOutput(
        log_probs=theirs_leaf, entropy=zeros, mean_logits=zeros, is_top1=torch.zeros_like(zeros, dtype=torch.bool)
    )
    inputs = {
        "input_ids": torch.zeros(completion_mask.shape, dtype=torch.long),
        "attention_mask": torch.ones(completion_mask.shape),
        "completion_mask": completion_mask,
        "ref_chosen_logps": ref[:pairs],
        "ref_rejected_logps": ref[pairs:],
    }
    theirs = DPOTrainer._compute_loss(trainer, lambda **kwargs: outputs, inputs, return_outputs=False)

    ours_leaf = per_token.clone().requires_grad_(True)
    logps = ours_leaf.sum(1)
    cdpo, _ = dpo_loss(logps[:pairs], logps[pairs:], ref[:pairs], ref[pairs:], beta, label_smoothing=eps)
    plain, _ = dpo_loss(logps[:pairs], logps[pairs:], ref[:pairs], ref[pairs:], beta)
    torch.testing.assert_close(theirs, cdpo)
    assert (theirs - plain).abs() > 1e-3
    theirs.backward()
    cdpo.backward()
    torch.testing.assert_close(theirs_leaf.grad, ours_leaf.grad)
