"""docs/dpo-variants.md: what the page says about TRL's DPOTrainer and CPOTrainer, checked against the pinned TRL."""

from __future__ import annotations

import re

from trl.experimental.cpo import CPOConfig, CPOTrainer
from trl.trainer.dpo_trainer import DPOTrainer

from .pinned import default_config, module_exists, source

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
    # dpo-variants.md, table and “TRL 还有 exo_pair、nca_pair、bco_pair、sppo_hard、aot、apo_zero、apo_down、discopop
    # 等损失，本书不实现”: the loss types of TRL 1.16's DPOTrainer, sigmoid_norm among them.
    text = source(DPOTrainer._compute_loss)
    listed = re.search(r"Should be one of \[(.*?)\]", text)[1]
    assert set(re.findall(r"'(\w+)'", listed)) == TRL_DPO_LOSS_TYPES
    assert {f'"{name}"' for name in TRL_DPO_LOSS_TYPES} <= set(re.findall(r'loss_type == ("\w+")', text))


def test_ipo_and_sigmoid_norm_divide_by_the_length_clamped_to_one():
    # dpo-variants.md: “TRL 的 IPO 和 sigmoid_norm 先把对数概率比除以回答长度”, “当前版本先把长度截到至少 1”.
    for loss_type in ("ipo", "sigmoid_norm"):
        assert "chosen_avg_score = chosen_scores / chosen_mask.sum(dim=1).clamp(min=1.0)" in branch(loss_type)


def test_label_smoothing_is_read_by_robust_only():
    # dpo-variants.md: cDPO “没有：sigmoid 不读 label_smoothing”; “TRL 的 ipo、hinge 公式里没有 label_smoothing”.
    for loss_type in ("sigmoid", "hinge", "ipo", "sigmoid_norm"):
        assert "label_smoothing" not in branch(loss_type), loss_type
    assert "self.label_smoothing" in branch("robust")


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
