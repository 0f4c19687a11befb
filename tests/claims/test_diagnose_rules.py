"""rlhf_toy.diagnose (the chapter-14 page comes later): the metric names its rules read are TRL 1.16's.

Each name a rule reads, other than the book loops' own names (`rules.BOOK_ALIASES`), is a string TRL's GRPOTrainer or
DPOTrainer (or transformers' Trainer) logs; the names the report recognises without a rule (`report.KNOWN_TRL`) too.
"""

from __future__ import annotations

import re
from pathlib import Path

import transformers.trainer
import transformers.trainer_utils
import trl.trainer.dpo_trainer
import trl.trainer.grpo_trainer

from rlhf_toy.diagnose import RULES
from rlhf_toy.diagnose.report import KNOWN_BOOK, KNOWN_TRL
from rlhf_toy.diagnose.rules import ACCURACY_METRICS, BOOK_ALIASES

from .pinned import ROOT

GRPO = Path(trl.trainer.grpo_trainer.__file__).read_text(encoding="utf-8")
DPO = Path(trl.trainer.dpo_trainer.__file__).read_text(encoding="utf-8")
TRAINER = Path(transformers.trainer.__file__).read_text(encoding="utf-8")
UTILS = Path(transformers.trainer_utils.__file__).read_text(encoding="utf-8")  # speed_metrics: train_runtime, …


def _logged_by_trl(name: str) -> bool:
    quoted = f'"{name}"'
    speed = name.startswith("train_") and f'f"{{split}}_{name.removeprefix("train_")}"' in UTILS
    return quoted in GRPO or quoted in DPO or quoted in TRAINER or speed


def test_every_trl_metric_a_rule_reads_is_logged_by_the_pinned_trl():
    # rules.py: “规则读 TRL 1.16 的指标名（grpo_trainer.py、dpo_trainer.py 与 transformers Trainer 记录的名字）”
    names = {n for rule in RULES for candidates in rule.metrics for n in candidates}
    trl_names = {n for n in names - BOOK_ALIASES if not n.startswith("eval_")}
    assert {"reward", "frac_reward_zero_std", "kl", "entropy", "clip_ratio/region_mean"} <= trl_names
    assert {"completions/mean_length", "completions/clipped_ratio", "grad_norm", "loss"} <= trl_names
    assert {"rewards/margins", "rewards/chosen", "logps/chosen"} <= trl_names
    assert {"sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean"} <= trl_names
    missing = sorted(n for n in trl_names if not _logged_by_trl(n))
    assert not missing, f"not logged by the pinned TRL / transformers: {missing}"


def test_grpo_metrics_the_rules_read_are_logged_where_the_rules_say():
    # rules.py, check_kl_explodes / the kl rule's note: “TRL 的 GRPOTrainer 只在 beta ≠ 0 时记录 kl”
    assert re.search(r'if self\.beta != 0\.0:\s*self\._metrics\[mode\]\["kl"\]\.append', GRPO)
    # check_sampler_mismatch: the sampling/* metrics exist only with vLLM and its importance-sampling correction
    block = GRPO[GRPO.index("if self.use_vllm and self.vllm_importance_sampling_correction:") :]
    assert block.index('"sampling/sampling_logp_difference/mean"') < block.index("output = {")
    # history.py: “TRL 1.16 的 GRPOTrainer.log 在一个指标这一段里的值全是 NaN 时记 None”
    assert "metrics[key] = sum(valid) / len(valid) if valid else None" in GRPO
    # report.py KNOWN_PREFIXES / ACCURACY_METRICS: evaluation metrics get the eval_ prefix
    assert 'metrics = {f"eval_{key}": val for key, val in metrics.items()}' in GRPO
    # ...but eval_reward is the same reward functions scored on the eval prompts (the loop that fills "reward" also
    # runs in eval mode), so it rises with a hacked reward and is not an accuracy metric
    assert 'self._metrics[mode]["reward"].append(' in GRPO
    assert "eval_reward" not in ACCURACY_METRICS


def test_grad_norm_is_logged_before_clipping():
    # rules.py, check_grad_spike: “Trainer 记录的 grad_norm 是限幅之前的全局范数”
    assert "Clip gradients to max_grad_norm. Returns the pre-clip gradient norm." in TRAINER
    assert "grad_norm = self._clip_grad_norm(model)" in TRAINER
    assert 'logs["grad_norm"] = grad_norm.item() if isinstance(grad_norm, torch.Tensor) else grad_norm' in TRAINER


def test_names_the_report_recognises_exist():
    # report.py, KNOWN_TRL / KNOWN_BOOK: names recognised without a rule are really logged by TRL or by the book
    missing = sorted(n for n in KNOWN_TRL if not _logged_by_trl(n))
    assert not missing, f"not logged by the pinned TRL / transformers: {missing}"
    book = "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "src" / "rlhf_toy").rglob("*.py") if "diagnose" not in p.parts
    )
    missing = sorted(n for n in KNOWN_BOOK | BOOK_ALIASES if f'"{n}"' not in book)
    assert not missing, f"not logged by the book's loops: {missing}"
