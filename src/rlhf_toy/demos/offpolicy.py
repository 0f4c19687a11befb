r"""第 12 章（异策略部分）的演示：过时与不一致的采样器、TIS / MIS / 序列掩码。

`python -m rlhf_toy offpolicy {bias,staleness,mismatch} [--quick]`。查表策略上的结果是精确的（对回答求和，没有采样噪声），
极小 Transformer 上的学习曲线由 `full_run` 跑（`scripts/run_offpolicy.py offpolicy`），缓存在 `docs/data/offpolicy.json`。
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy

import torch
from torch import Tensor

from rlhf_toy._threads import single_thread
from rlhf_toy.rollout.samplers import bf16_logps, temperature_logps, top_k_logps, top_p_logps
from rlhf_toy.studies.offpolicy import (
    CORRECTIONS,
    bias,
    expected_update,
    on_policy_gradient,
    stale_training,
    update_variance,
)
from rlhf_toy.tasks.bandit import BanditTask

# --8<-- [end:imports]

SOURCES = (
    "estimators/importance.py",
    "rollout/samplers.py",
    "studies/offpolicy.py",
    "train/offpolicy_grpo.py",
    "demos/offpolicy.py",
    "demos/tiny_lm.py",
    "policies",
    "tasks/addition.py",
    "train/sft.py",
    "losses/aggregate.py",
    "losses/dpo.py",
    "losses/grpo.py",
    "losses/ppo.py",
    "estimators/advantages.py",
    "estimators/dynamic_sampling.py",
    "estimators/entropy.py",
    "estimators/kl.py",
    "estimators/rewards.py",
    "tasks/bandit.py",
    "train/dpo.py",
    "train/grpo.py",
    "train/ppo.py",
)
STALENESS = (0, 1, 2, 4, 8, 16)
CURVE_STALENESS = (0, 1, 4, 16)
CAPS = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 100.0)
BIAS_STEP = 16  # 在第几步的策略上量偏差（μ = 第 16 − k 步的策略）
LEARNING_RATE = 2.0


def bandit_setup(seed: int = 0) -> tuple[Tensor, Tensor]:
    """20 个提示词 × 8 个回答的查表任务：初始 logits `randn`（float64）与奖励表（正确回答为 1）。

    Args:
        seed: 随机种子。

    Returns:
        `(logits, rewards)`，形状都是 `(20, 8)`。
    """
    torch.manual_seed(seed)
    task = BanditTask.make(20, 8)
    logits = torch.randn(20, 8, dtype=torch.float64)
    return logits, torch.nn.functional.one_hot(task.correct, 8).double()


# --8<-- [start:bias_vs_staleness]
def bias_vs_staleness(seed: int = 0, clip_max: float = 3.0) -> dict[str, list[float]]:
    """同策略精确训练 16 步，在第 16 步的策略上，用第 16 − k 步的策略当采样器：各修正的相对偏差与单样本方差。

    Args:
        seed: 随机种子。
        clip_max: TIS / MIS 的 $C$。

    Returns:
        `{"staleness": [...], "<修正>": 相对偏差, "<修正>_cosine": 余弦, "<修正>_length": 长度之比,
        "<修正>_variance": 方差}`。
    """
    logits, rewards = bandit_setup(seed)
    _, snaps = stale_training(logits, rewards, BIAS_STEP, 0, learning_rate=LEARNING_RATE)
    theta = snaps[BIAS_STEP]
    truth = on_policy_gradient(theta, rewards)
    out: dict[str, list[float]] = {"staleness": list(STALENESS)}
    for k in STALENESS:
        mu = torch.log_softmax(snaps[BIAS_STEP - k], dim=-1)
        for c in CORRECTIONS:
            b = bias(expected_update(theta, mu, rewards, c, clip_max), truth)
            out.setdefault(c, []).append(round(b.relative, 4))
            out.setdefault(f"{c}_cosine", []).append(round(b.cosine, 4))
            out.setdefault(f"{c}_length", []).append(round(b.length, 4))
            out.setdefault(f"{c}_variance", []).append(round(update_variance(theta, mu, rewards, c, clip_max), 4))
    return out


def bias_vs_cap(seed: int = 0, staleness: int = 16) -> dict[str, list[float]]:
    """固定 $k$，TIS 的上界 $C$ 换取什么：相对偏差与单样本方差随 $C$ 变化（MIS 一并给出）。

    Args:
        seed: 随机种子。
        staleness: $k$。

    Returns:
        `{"cap": [...], "tis": 偏差, "tis_variance": 方差, "mis": ..., "mis_variance": ...}`。
    """
    logits, rewards = bandit_setup(seed)
    _, snaps = stale_training(logits, rewards, BIAS_STEP, 0, learning_rate=LEARNING_RATE)
    theta, mu = snaps[BIAS_STEP], torch.log_softmax(snaps[BIAS_STEP - staleness], dim=-1)
    truth = on_policy_gradient(theta, rewards)
    out: dict[str, list[float]] = {"cap": list(CAPS)}
    for c in ("tis", "mis"):
        for cap in CAPS:
            out.setdefault(c, []).append(round(bias(expected_update(theta, mu, rewards, c, cap), truth).relative, 4))
            out.setdefault(f"{c}_variance", []).append(round(update_variance(theta, mu, rewards, c, cap), 4))
    return out


# --8<-- [end:bias_vs_staleness]


# --8<-- [start:bandit_curves]
def bandit_curves(seed: int = 0, steps: int = 30) -> dict[str, list[float]]:
    """精确期望更新的学习曲线：$k \\in \\{0, 1, 4, 16\\}$ × {不修正, TIS, MIS, 完整 IS}，每步的期望奖励。

    Args:
        seed: 随机种子。
        steps: 步数。

    Returns:
        `{"k=<k>/<修正>": 长 steps + 1 的期望奖励}`。
    """
    logits, rewards = bandit_setup(seed)
    out = {}
    for k in CURVE_STALENESS:
        for c in CORRECTIONS:
            curve, _ = stale_training(logits, rewards, steps, k, c, 3.0, LEARNING_RATE)
            out[f"k={k}/{c}"] = [round(x, 4) for x in curve]
    return out


# --8<-- [end:bandit_curves]


# --8<-- [start:mismatch_table]
def mismatch_table(seed: int = 0, step: int = 4) -> dict[str, dict[str, float]]:
    """同策略训练 `step` 步后的策略上，采样器换成温度 / top-k / top-p / bf16：各修正的相对偏差与 $\\mu = 0$ 处的 $\\pi$ 质量。

    Args:
        seed: 随机种子。
        step: 在第几步的策略上量。

    Returns:
        `{采样器: {"none": ..., "is": ..., "tis": ..., "mis": ..., "missing_mass": ...}}`。
    """
    logits, rewards = bandit_setup(seed)
    _, snaps = stale_training(logits, rewards, step, 0, learning_rate=LEARNING_RATE)
    theta = snaps[step]
    truth = on_policy_gradient(theta, rewards)
    samplers = {
        "temperature=0.7": temperature_logps(theta, 0.7),
        "temperature=1.5": temperature_logps(theta, 1.5),
        "top_k=2": top_k_logps(theta, 2),
        "top_k=4": top_k_logps(theta, 4),
        "top_p=0.9": top_p_logps(theta, 0.9),
        "bf16": bf16_logps(theta),
    }
    out = {}
    for name, mu in samplers.items():
        row = {c: round(bias(expected_update(theta, mu, rewards, c), truth).relative, 4) for c in CORRECTIONS}
        missing = (theta.softmax(-1) * (mu == -torch.inf)).sum(-1).mean()
        out[name] = {**row, "missing_mass": round(missing.item(), 4)}
    return out


# --8<-- [end:mismatch_table]

TRANSFORMER_CELLS = (
    (0, None),
    (4, None),
    (4, "sequence_mask"),
    (4, "token_truncate"),
    (16, None),
    (16, "sequence_mask"),
    (16, "token_truncate"),
)
ONE_SIDED_CELLS = (  # k = 4，只修正一侧：(clip_min, clip_max)
    (None, 1.0),  # w = min(ρ, 1)：只缩小 ρ < 1 的 token
    (1.0, 3.0),  # w = clip(ρ, 1, 3)：只放大 ρ > 1 的 token
)


# --8<-- [start:transformer_curves]
def transformer_curves(
    quick: bool = False, seed: int = 0, sampling_seed: int | None = None
) -> dict[str, list[dict[str, float]]]:
    """极小 Transformer（第 9 章的 SFT 热启动）上的异策略 GRPO：各（$k$, 修正）格子的留出集正确率曲线。

    另有两格不一致的采样器（采样温度 1.5、训练器温度 1.0，不修正与 `token_truncate`），
    两格只修正一侧的 `token_truncate`（$k = 4$，`ONE_SIDED_CELLS`）。每步还记下同一批样本上四种模式各自的 ESS（`ess/<模式>`）。

    Args:
        quick: `True` 时每格 3 步、只跑两格（CI 用，数字没有意义）。
        seed: 热启动的随机种子。
        sampling_seed: 采样的随机种子（每格从同一个热启动、同一个随机状态开始）；`None` 时取 `seed + 1`。

    Returns:
        `{"k=<k>/<模式或 none>[/clip_min=…,clip_max=…][/temperature=…]": [{"step", "accuracy", "reward", ...}, ...]}`。
    """
    from rlhf_toy.demos.tiny_lm import warm_start
    from rlhf_toy.estimators.importance import IS_MODES
    from rlhf_toy.train.offpolicy_grpo import OffPolicyGRPOConfig, train_offpolicy_grpo

    task, start = warm_start(seed)
    sampling_seed = seed + 1 if sampling_seed is None else sampling_seed
    steps, every = (3, 3) if quick else (100, 10)
    cells = [(k, m, 1.0, None, 3.0) for k, m in TRANSFORMER_CELLS]
    cells += [(0, None, 1.5, None, 3.0), (0, "token_truncate", 1.5, None, 3.0)]
    cells += [(4, "token_truncate", 1.0, lo, hi) for lo, hi in ONE_SIDED_CELLS]
    if quick:
        cells = [(4, None, 1.0, None, 3.0), (4, "sequence_mask", 1.0, None, 3.0)]

    def evaluate(policy):
        return {"accuracy": round(task.evaluate(policy)["accuracy"], 4)}

    out = {}
    for k, mode, tau, clip_min, clip_max in cells:
        policy = copy.deepcopy(start)
        torch.manual_seed(sampling_seed)
        task.generator.manual_seed(sampling_seed)  # 每格抽到同样的题
        config = OffPolicyGRPOConfig(
            steps=steps,
            staleness=k,
            sampler_temperature=tau,
            vllm_importance_sampling_correction=mode is not None,
            vllm_importance_sampling_mode=mode or "sequence_mask",
            vllm_importance_sampling_clip_max=clip_max,
            vllm_importance_sampling_clip_min=clip_min,
        )
        history = train_offpolicy_grpo(policy, task, config, evaluate, every)
        keep = ("step", "accuracy", "reward", "ess", "sampling/importance_sampling_ratio/mean")
        keep += tuple(f"ess/{m}" for m in IS_MODES)
        name = f"k={k}/{mode or 'none'}"
        if (clip_min, clip_max) != (None, 3.0):
            name += f"/clip_min={clip_min:g},clip_max={clip_max:g}" if clip_min else f"/clip_max={clip_max:g}"
        name += "" if tau == 1.0 else f"/temperature={tau}"
        out[name] = [{key: round(row[key], 4) for key in keep if key in row} for row in history]
    return out


# --8<-- [end:transformer_curves]


@single_thread()
def full_run(quick: bool = False) -> dict:
    """本部分的完整实验（缓存进 `docs/data/offpolicy.json`）：查表上的精确结果与极小 Transformer 的学习曲线。

    Args:
        quick: 只跑快速版。

    Returns:
        可写成 JSON 的字典（浮点数已舍入到 4 位）。
    """
    return {
        "bias_vs_staleness": bias_vs_staleness(),
        "bias_vs_cap": bias_vs_cap(),
        "bandit_curves": bandit_curves(),
        "mismatch": mismatch_table(),
        "transformer": transformer_curves(quick),
        "transformer_seed2": transformer_curves(quick, sampling_seed=2),  # 同一个热启动，采样种子 2
    }


@single_thread()
def demo_bias(quick: bool = True) -> str:
    """查表策略上，采样器落后 k 步时各修正的相对偏差与方差（精确）。

    Args:
        quick: 无影响（精确计算只要几毫秒），为了与其它演示的接口一致。

    Returns:
        打印用的表格。
    """
    r = bias_vs_staleness()
    lines = [
        "    相对偏差                     | 长度之比 ‖ḡ‖/‖∇J‖   | 余弦                | 方差",
        "k   none   is     tis    mis    | none   tis    mis   | none   tis    mis   | none   tis",
    ]
    for i, k in enumerate(r["staleness"]):
        length, cosine = (
            "  ".join(f"{r[f'{c}{suffix}'][i]:.3f}" for c in ("none", "tis", "mis"))
            for suffix in ("_length", "_cosine")
        )
        lines.append(
            f"{k:<3} {r['none'][i]:.3f}  {r['is'][i]:.3f}  {r['tis'][i]:.3f}  {r['mis'][i]:.3f}  "
            f"| {length} | {cosine} | {r['none_variance'][i]:.3f}  {r['tis_variance'][i]:.3f}"
        )
    return "\n".join(lines)


@single_thread()
def demo_staleness(quick: bool = True) -> str:
    """查表策略的精确学习曲线：第 5、10、30 步的期望奖励，k × 修正。

    Args:
        quick: 无影响（精确计算）。

    Returns:
        打印用的表格。
    """
    curves = bandit_curves()
    lines = ["cell            step5  step10 step30"]
    for name, c in curves.items():
        lines.append(f"{name:<15} {c[5]:.3f}  {c[10]:.3f}  {c[30]:.3f}")
    return "\n".join(lines)


@single_thread()
def demo_mismatch(quick: bool = True) -> str:
    """查表策略上采样器与训练器不一致（温度、top-k、top-p、bf16）时的相对偏差。

    Args:
        quick: 无影响（精确计算）。

    Returns:
        打印用的表格。
    """
    table = mismatch_table()
    lines = ["sampler          none   is     tis    mis    missing"]
    for name, row in table.items():
        lines.append(
            f"{name:<16} {row['none']:.3f}  {row['is']:.3f}  {row['tis']:.3f}  {row['mis']:.3f}  "
            f"{row['missing_mass']:.3f}"
        )
    return "\n".join(lines)
