r"""诊断一份训练日志：判断日志的种类，运行全部规则，列出缺少与未识别的指标，打印中文报告。"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlhf_toy.diagnose.history import History, read_history
from rlhf_toy.diagnose.rules import ACCURACY_METRICS, RULES, Finding, run_rule

# --8<-- [end:imports]

# 判断日志种类的指标（任一出现即是）：DPO 先于 GRPO 判断（TRL 的 DPO 日志也有 `entropy`）
KIND_MARKERS = {
    "dpo": ("rewards/margins", "rewards/chosen", "logps/chosen"),
    "ppo": ("objective/scores", "objective/kl"),
    "grpo": ("reward", "reward_std", "frac_reward_zero_std", "clip_ratio/region_mean", "completions/mean_length"),
    "other": ("loss", "grad_norm", "train_loss"),
}
KIND_NAMES = {
    "grpo": "GRPO（在线，组内相对优势）",
    "ppo": "PPO",
    "dpo": "DPO（离线偏好）",
    "other": "其他（只有 loss 等通用指标）",
}

# 认得、但没有规则读的指标。不在这里、也没有规则读的指标列为“未识别”
KNOWN_TRL = frozenset(
    {
        # transformers Trainer
        "loss", "learning_rate", "train_runtime", "train_samples_per_second", "train_steps_per_second",
        "total_flos", "train_loss",
        # TRL 1.16 GRPOTrainer
        "num_tokens", "step_time", "reward_std", "completions/min_length", "completions/max_length",
        "completions/mean_terminated_length", "completions/min_terminated_length", "completions/max_terminated_length",
        "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/low_min", "clip_ratio/high_max",
        "sampling/sampling_logp_difference/max", "sampling/importance_sampling_ratio/min",
        "sampling/importance_sampling_ratio/max", "policy_loss", "entropy_coef", "aux_loss", "cispo_clip_ratio",
        "tools/call_frequency", "tools/failure_frequency",
        # TRL 1.16 DPOTrainer
        "rewards/rejected", "rewards/accuracies", "logps/rejected", "logits/chosen", "logits/rejected",
        "mean_token_accuracy", "entropy",
    }
)  # fmt: skip
"""TRL 1.16 与 transformers 记录、但没有规则读的指标名（`tests/claims/test_diagnose_rules.py` 对着源码检查）。"""

KNOWN_BOOK = frozenset(
    {
        "effective_batch_size", "clip_ratio/low_mean", "clip_ratio/high_mean", "kl_to_ref", "rejected_prob",
        "objective/non_score_reward", "objective/rlhf_reward", "val/explained_variance", "loss/policy_avg",
        "loss/value_avg", "policy/approxkl_k1", "policy/approxkl_k3", "val/clipfrac_avg",
    }
)  # fmt: skip
"""本书训练循环与评估函数记录、但没有规则读的指标名。"""

KNOWN = KNOWN_TRL | KNOWN_BOOK
KNOWN_PREFIXES = ("rewards/", "eval_", "test_")  # TRL：每个奖励函数的 rewards/<名字>/mean|std；评估加 eval_ 前缀


@dataclass
class Diagnosis:
    """一份日志的诊断结果；`str(diagnosis)` 是中文报告。

    Attributes:
        source: 日志从哪来。
        kind: 日志种类：`"grpo"`、`"ppo"`、`"dpo"` 或 `"other"`。
        steps: 日志覆盖的步（第一步、最后一步）。
        findings: 每条规则一个结果，顺序同 `rules.RULES`。
        unknown: 日志里没有规则读、也不在已知名单里的指标。
    """

    source: str
    kind: str
    steps: tuple[int, int]
    findings: list[Finding]
    unknown: list[str]

    @property
    def detected(self) -> list[Finding]:
        """检出的症状（含 `info` 级）。"""
        return [f for f in self.findings if f.status == "detected"]

    @property
    def problems(self) -> list[Finding]:
        """检出的 `warning` 级症状（训练真的出了问题）。"""
        return [f for f in self.detected if f.severity == "warning"]

    @property
    def missing(self) -> list[Finding]:
        """因为缺少指标而没能检查的规则。"""
        return [f for f in self.findings if f.status == "missing"]

    def symptoms(self) -> set[str]:
        """检出的症状的规则名。"""
        return {f.symptom for f in self.detected}

    def __str__(self) -> str:
        lines = [
            f"训练日志诊断：{self.source}",
            f"种类：{KIND_NAMES[self.kind]}；第 {self.steps[0]}–{self.steps[1]} 步",
            "",
        ]
        if self.problems:
            lines.append(f"检出 {len(self.problems)} 个症状：")
            lines += _lines(self.problems)
        else:
            lines.append("没有检出症状（只就下面列出的、指标齐全的规则而言）。")
        notes = [f for f in self.detected if f.severity == "info"]
        if notes:
            lines += ["", "提示（看着像问题，其实不是）："] + _lines(notes)
        clean = [f for f in self.findings if f.status == "clean"]
        if clean:
            lines += ["", "检查过、正常：" + "；".join(f.title for f in clean)]
        if self.missing:
            lines += ["", "缺少指标、没能检查："]
            lines += [f"  - {f.title}：{f.evidence.removeprefix('缺少指标：')}" for f in self.missing]
        na = [f for f in self.findings if f.status == "not_applicable"]
        if na:
            lines += ["", "不适用于这种训练：" + "；".join(f.title for f in na)]
        if self.unknown:
            lines += ["", "未识别的指标（没有规则读它们）：" + "、".join(self.unknown)]
        return "\n".join(lines)


def _lines(findings: list[Finding]) -> list[str]:
    out = []
    for f in findings:
        out.append(f"  - {f.title}（第 {f.step} 步起）")
        out.append(f"    证据：{f.evidence}")
        out.append(f"    见：{f.section}")
    return out


def log_kind(h: History) -> str:
    """日志种类：按 `KIND_MARKERS` 的顺序，第一个有标志指标的种类。

    Raises:
        ValueError: 日志里没有任何认得的训练指标（不是训练日志）。
    """
    for kind, markers in KIND_MARKERS.items():
        if any(h.has(m) for m in markers):
            return kind
    names = "、".join(sorted(h.series)[:10]) or "（没有数值）"
    raise ValueError(
        f"log：{h.source} 不像训练日志：没有 reward、loss、grad_norm、rewards/margins 等任何训练指标；它的指标是 {names}"
    )


def diagnose(log: str | Path | Sequence[Mapping[str, object]], accuracy_metric: str | None = None) -> Diagnosis:
    r"""诊断一份训练日志。

    Args:
        log: `trainer.state.log_history`、本书训练循环返回的 `history`（每步一个指标字典），
            或 TRL 写出的 `trainer_state.json` 的路径。
        accuracy_metric: 留出集正确率的指标名；`None` 时依次找 `rules.ACCURACY_METRICS`
            （`eval_accuracy`、`accuracy`、`success_prob`）。

    Returns:
        `Diagnosis`：每条规则一个 `Finding`（检出 / 正常 / 缺少指标 / 不适用），以及未识别的指标。

    Raises:
        ValueError: 日志读不了（见 `read_history`）、不是训练日志（见 `log_kind`），或 `accuracy_metric` 不在日志里。

    Examples:
        >>> history = [{"step": s, "reward": 0.5, "frac_reward_zero_std": 1.0, "loss": 0.0} for s in range(1, 5)]
        >>> d = diagnose(history)
        >>> sorted(d.symptoms()), [f.step for f in d.problems]
        (['no_learning_signal'], [1])
    """
    h = read_history(log)
    kind = log_kind(h)
    rules = RULES
    if accuracy_metric is not None:
        if not h.has(accuracy_metric):
            raise ValueError(f"accuracy_metric：日志里没有 {accuracy_metric!r}")
        rules = tuple(
            r if r.symptom != "reward_without_accuracy" else _with_accuracy(r, accuracy_metric) for r in RULES
        )
    findings = [run_rule(rule, h, kind) for rule in rules]
    read = {n for rule in rules for names in rule.metrics for n in names}
    unknown = sorted(k for k in h.series if k not in read and k not in KNOWN and not k.startswith(KNOWN_PREFIXES))
    return Diagnosis(h.source, kind, (h.steps[0], h.steps[-1]), findings, unknown)


def _with_accuracy(rule, name: str):  # noqa: ANN001, ANN202 - Rule
    from dataclasses import replace

    return replace(rule, metrics=(rule.metrics[0], (name,)))


__all__ = ["ACCURACY_METRICS", "Diagnosis", "diagnose", "log_kind"]
