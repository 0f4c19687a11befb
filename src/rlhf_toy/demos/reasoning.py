r"""第 11 章的演示：带草稿的加法上的推理型强化学习（RLVR）。

`python -m rlhf_toy reasoning {warm-start,grpo,rft,length,r1-zero,pass-at-k,best-of-n} [--quick]`。

* 两个起点：`"scratchpad"`（SFT 在一半带正确草稿、一半直接写答案的示范上）与 `"format"`（同样的格式，
  数字全是随机的：只学会了格式，R1-Zero 式的起点）。
* 强化学习用第 9 章的 `train_grpo`（一行没改），奖励由 `ScratchpadAdditionTask.reward` 组合：
  答案奖励 + `format_weight` 倍格式奖励 +（可选）DAPO 的软超长惩罚。
* `quick=True` 把 SFT 缩到 30 步、强化学习缩到 4 步（CI 与页面用），数字因此差得多，流程相同；完整版由
  `scripts/run_reasoning.py` 跑，结果缓存在 `docs/data/reasoning.json`。
"""

# --8<-- [start:imports]
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rlhf_toy._threads import single_thread
from rlhf_toy.estimators.pass_at_k import mean_pass_at_k
from rlhf_toy.policies import TablePolicy
from rlhf_toy.policies.table import exact_kl
from rlhf_toy.policies.transformer import TinyTransformerPolicy
from rlhf_toy.rollout.best_of_n import best_of_n_probs, kl_upper_bound
from rlhf_toy.studies.overoptimisation import make_setup
from rlhf_toy.tasks.addition import PAD, encode, shapes
from rlhf_toy.tasks.scratchpad import ScratchpadAdditionTask, accuracy_reward, format_reward, parse_completion
from rlhf_toy.train.grpo import GRPOConfig, train_grpo
from rlhf_toy.train.rejection_sampling import RFTConfig, train_rft
from rlhf_toy.train.sft import SFTConfig, train_sft

# --8<-- [end:imports]

STARTS = ("scratchpad", "format")
FORMAT_WEIGHT = 0.2  # R1 的配方：答案奖励 + 格式奖励
OVERLONG = (12, 6)  # DAPO 软超长惩罚：长度超过 6 个 token 开始扣分，到 12（最大长度）扣满 1


# --8<-- [start:warm_start]
def warm_start(
    start: str = "scratchpad", seed: int = 0, quick: bool = False, **task_kwargs: Any
) -> tuple[ScratchpadAdditionTask, TinyTransformerPolicy]:
    """建任务与模型并做 SFT：`"scratchpad"` 学一半带正确草稿、一半直接答的示范；`"format"` 学同样格式的随机数字。

    两种起点的 SFT 步数、批大小、学习率都相同（完整版 300 步 × 128 题，快速版 30 步 × 64 题），只有示范的内容不同。

    Args:
        start: `"scratchpad"` 或 `"format"`。
        seed: 随机种子（模型初始化与任务的题目划分、抽样）。
        quick: 是否只跑短版本。
        **task_kwargs: 传给 `ScratchpadAdditionTask`（例如 `format_weight`、`overlong`）；
            SFT 之后 `content` 被改回 `"correct"`，不影响强化学习。

    Returns:
        `(task, policy)`：`policy` 已经过 SFT。

    Raises:
        ValueError: 未知的 `start`。
    """
    if start not in STARTS:
        raise ValueError(f"start 应是 {STARTS} 之一，实际是 {start!r}")
    torch.manual_seed(seed)
    content = "correct" if start == "scratchpad" else "random"
    task = ScratchpadAdditionTask(seed=seed, p_scratchpad=0.5, content=content, **task_kwargs)
    policy = task.make_policy()
    config = SFTConfig(learning_rate=5e-3, steps=30 if quick else 300, batch_size=64 if quick else 128)
    with single_thread():
        train_sft(policy, task, config)
    task.content = "correct"
    return task, policy


# --8<-- [end:warm_start]


# --8<-- [start:grpo_config]
def grpo_config(quick: bool = False, **overrides: Any) -> GRPOConfig:
    """本章的 GRPO 配置：同第 9 章（32 个提示词 × G=8，lr 5e-4，`beta=0`，`loss_type="dapo"`），完整版 100 步、快速版 4 步。

    `num_iterations=1`：每批只更新一次，比率恒为 1，截断（`epsilon=0.2`、`epsilon_high=0.28`）从不起作用，
    所以这就是按组内标准化优势加权的单步在策略 REINFORCE；保留 `epsilon_high` 只是为了与第 9 章的配置一致。

    Args:
        quick: 是否只跑短版本。
        **overrides: 覆盖任意字段。

    Returns:
        配置。
    """
    fields = dict(num_generations=8, beta=0.0, learning_rate=5e-4, steps=4 if quick else 100, num_iterations=1)
    fields.update(loss_type="dapo", epsilon_high=0.28, max_completion_length=12)
    return GRPOConfig(**{**fields, **overrides})


# --8<-- [end:grpo_config]


# --8<-- [start:rl_from]
def rl_from(
    task: ScratchpadAdditionTask,
    policy: TinyTransformerPolicy,
    algorithm: str = "grpo",
    quick: bool = False,
    every: int | None = None,
    seed: int = 0,
    steps: int | None = None,
) -> list[dict]:
    """从一个热启动模型跑 GRPO 或拒绝采样微调（每步同样 32 个提示词 × 8 个回答），每 `every` 步在留出集上评估。

    两种算法用同一个任务（同一个奖励）、同一个学习率与同样多的采样回答；`policy` 被原地更新。

    Args:
        task: 任务（它的 `reward` 决定训练奖励：答案、格式、可选的超长惩罚）。
        policy: 热启动之后的策略，也是参考模型（冻结副本）。
        algorithm: `"grpo"` 或 `"rft"`。
        quick: 是否只跑短版本。
        every: 评估间隔；`None` 表示快速版 4（只在开始与结束时评估）、完整版 10。
        seed: 训练开始前设的全局随机种子（采样用）。
        steps: 步数；`None` 表示 `grpo_config(quick)` 的步数（快速版 4、完整版 100）。

    Returns:
        评估步的记录：第 0 项是强化学习之前（`step=0`），每项含 `step`、`samples`（累计采样的回答数）、
        `reward`（训练批的平均奖励，第 0 项为 NaN）与 `ScratchpadAdditionTask.evaluate` 的键（含 `kl`）。

    Raises:
        ValueError: 未知的 `algorithm`。
    """
    if algorithm not in ("grpo", "rft"):
        raise ValueError(f"algorithm 应是 'grpo' 或 'rft'，实际是 {algorithm!r}")
    every = (4 if quick else 10) if every is None else every
    config = grpo_config(quick) if steps is None else grpo_config(quick, steps=steps)
    per_step = task.batch_size * config.num_generations
    torch.manual_seed(seed)
    with single_thread():
        ref = policy.frozen_copy()
        rows = [{"step": 0, "samples": 0, "reward": float("nan"), **task.evaluate(policy, ref)}]

        def evaluate(p):
            return task.evaluate(p, ref)

        if algorithm == "grpo":
            history = train_grpo(policy, task, config, ref_policy=ref, evaluate=evaluate, eval_every=every)
        else:
            rft = RFTConfig(config.num_generations, config.learning_rate, config.steps, threshold=1.0)
            history = train_rft(policy, task, rft, evaluate=evaluate, eval_every=every)
    return rows + [{**h, "samples": h["step"] * per_step} for h in history if "accuracy" in h]


# --8<-- [end:rl_from]


# --8<-- [start:run_rl]
def run_rl(
    algorithm: str = "grpo",
    start: str = "scratchpad",
    seed: int = 0,
    quick: bool = False,
    overlong: bool = False,
    every: int | None = None,
) -> list[dict]:
    """热启动（`warm_start`）之后跑 `rl_from`，并打印每个评估步。

    Args:
        algorithm: `"grpo"` 或 `"rft"`。
        start: 起点，见 `warm_start`。
        seed: 随机种子。
        quick: 是否只跑短版本。
        overlong: 是否在奖励里加 DAPO 的软超长惩罚 `OVERLONG`（长度控制）。
        every: 评估间隔，见 `rl_from`。

    Returns:
        `rl_from` 的返回值。
    """
    task, policy = warm_start(start, seed, quick, format_weight=FORMAT_WEIGHT, overlong=OVERLONG if overlong else None)
    rows = rl_from(task, policy, algorithm, quick, every, seed)
    name = f"{algorithm}（{start}{'，超长惩罚' if overlong else ''}）"
    for r in rows:
        print(f"{name} 第 {r['step']:3d} 步  {format_row(r)}")
    return rows


def format_row(r: dict) -> str:
    """一行指标：贪心正确率、采样回答的平均长度、写草稿的比例、草稿算对的比例与熵。"""
    keys = ("accuracy", "completion_length", "scratchpad_rate", "scratchpad_correct", "entropy")
    return "  ".join(f"{k} {r[k]:.3f}" for k in keys)


# --8<-- [end:run_rl]


# --8<-- [start:pass_at_k_curve]
@torch.no_grad()
def pass_at_k_curve(
    policy: TinyTransformerPolicy, task: ScratchpadAdditionTask, n: int = 64, ks: tuple[int, ...] | None = None
) -> dict[int, float]:
    """留出集上的 pass@k：每道题按温度采 `n` 个回答，用答案奖励数出正确的个数，再用无偏估计量。

    Args:
        policy: 策略。
        task: 任务（用它的留出集与答案奖励）。
        n: 每道题的样本数。
        ks: 要算的 $k$；`None` 表示 `1, 2, 4, …` 直到 `n`。

    Returns:
        `{k: 留出集平均 pass@k}`。
    """
    ks = ks or tuple(2**i for i in range(n.bit_length()) if 2**i <= n)
    prompts = task.heldout_prompts()
    counts = torch.zeros(len(prompts), dtype=torch.long)
    chunk = max(1, 4096 // n)  # 一次生成不超过约 4096 条回答
    with single_thread():
        for i in range(0, len(prompts), chunk):
            p = prompts[i : i + chunk]
            completions, _ = policy.sample(p, n)
            answers = task.answers(p.repeat_interleave(n, dim=0))
            counts[i : i + chunk] = accuracy_reward(answers, completions).view(len(p), n).sum(1).long()
    return mean_pass_at_k(counts, n, ks)


# --8<-- [end:pass_at_k_curve]


# --8<-- [start:forced_mode_accuracy]
@torch.no_grad()
def forced_mode_accuracy(policy: TinyTransformerPolicy, task: ScratchpadAdditionTask, n: int = 16) -> dict[str, Tensor]:
    """两种写法在同一批题上的正确率：把回答的第一个 token 限定为数字（写草稿）或 `=`（不写草稿），其余照常按温度采样。

    限定的做法是把第一个 token 的分布截到允许的 token 上再归一化，也就是“已知模型选了这种写法”时的条件分布；
    留出集的每道题两种写法各采 `n` 个回答。`evaluate` 里的 `accuracy_with_scratchpad` 只在模型自己选了写草稿的题上算，
    这里的两个正确率都在全部留出题上算，可以直接相减。回答总长仍不超过 `task.max_completion_length`。

    Args:
        policy: 策略。
        task: 任务（用它的留出集与答案奖励）。
        n: 每道题每种写法的样本数。

    Returns:
        `{"scratchpad": 每题的正确率, "direct": 每题的正确率}`，形状都是 `(n_heldout,)`。
    """
    prompts = task.heldout_prompts()
    answers = [a for a in task.answers(prompts) for _ in range(n)]
    modes = {"scratchpad": [encode(str(d))[0] for d in range(10)], "direct": encode("=")}
    out = {}
    with single_thread():
        first_logits = policy.completion_logits(prompts, torch.full((len(prompts), 1), PAD))[:, 0] / policy.temperature
        for mode, allowed in modes.items():
            logits = torch.full_like(first_logits, float("-inf"))
            logits[:, allowed] = first_logits[:, allowed]
            first = torch.multinomial(torch.softmax(logits, -1), n, replacement=True).reshape(-1, 1)
            forced = torch.cat([prompts.repeat_interleave(n, dim=0), first], dim=1)  # 提示词左填充，接在末尾
            policy.max_completion_length -= 1  # 第一个 token 已经写了
            try:
                rest, _, _ = policy.generate(forced)
            finally:
                policy.max_completion_length += 1
            completions = torch.cat([first, rest], dim=1)
            out[mode] = accuracy_reward(answers, completions).view(len(prompts), n).mean(1)
    return out


# --8<-- [end:forced_mode_accuracy]


# --8<-- [start:best_of_n_sweep]
def best_of_n_sweep(seed: int = 0, ns: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)) -> list[dict]:
    r"""第 8 章的有偏奖励模型上的 best-of-N（精确计算，不采样）：代理奖励、真实奖励、KL 与上界随 $N$ 的变化。

    基础策略是第 8 章“SFT 之后”的参考模型，打分用有偏的查表奖励模型（它偏爱每题的诱饵回答）。

    Args:
        seed: `make_setup` 的种子。
        ns: 要算的 $N$。

    Returns:
        每个 $N$ 一项：`n`、`proxy_reward`（$\mathbb E_{\pi_N}[\hat r]$）、`success_prob`（真实奖励）、
        `decoy_prob`（选中诱饵的概率）、`kl`（精确的 $\mathrm{KL}(\pi_N\|\pi)$，各提示词平均）与 `kl_bound`。
    """
    setup = make_setup(seed)
    with torch.no_grad():
        probs = setup.reference.probs()
        table = setup.reward_model.table.detach()
        prompts = setup.task.prompts()
        rows = []
        for n in ns:
            bon = best_of_n_probs(probs, table, n)
            rows.append(
                {
                    "n": n,
                    "proxy_reward": (bon * table).sum(-1).mean().item(),
                    "success_prob": bon[prompts, setup.task.correct].mean().item(),
                    "decoy_prob": bon[prompts, setup.decoy].mean().item(),
                    "kl": max(exact_kl(TablePolicy(bon.clamp_min(1e-30).log()), setup.reference), 0.0),
                    "kl_bound": kl_upper_bound(n),
                }
            )
    return rows


# --8<-- [end:best_of_n_sweep]


# --8<-- [start:by_shape]
@torch.no_grad()
def by_shape(
    policy: TinyTransformerPolicy, task: ScratchpadAdditionTask, n: int = 16, per_shape: int = 150, seed: int = 0
) -> dict[str, dict[str, float]]:
    """按题型在训练题上评估：每种题型抽 `per_shape` 道训练题，每道题按温度采 `n` 个回答。

    训练批按题型均衡地抽，留出集却八成是两位数加两位数；这个评估把两者分开看。
    格式正确率按“写了草稿”与“没写草稿”分开算，用来看格式奖励偏向哪种写法。

    Args:
        policy: 策略。
        task: 任务（用它的训练题、答案奖励与格式奖励）。
        n: 每道题的样本数。
        per_shape: 每种题型抽的题数（无放回；题数不够时全取）。
        seed: 抽题用的随机种子（采样用全局随机数）。

    Returns:
        `{题型: {"accuracy", "scratchpad_rate", "format_scratchpad", "format_direct"}}`，题型是 `"1+1"`、`"1+2"`、
        `"2+1"`、`"2+2"`；某种写法一个样本也没有时它的格式正确率为 NaN。
    """
    generator = torch.Generator().manual_seed(seed)
    labels = shapes(task.train)
    out = {}
    with single_thread():
        for shape in ("1+1", "1+2", "2+1", "2+2"):
            idx = torch.tensor([i for i, s in enumerate(labels) if s == shape])
            prompts = task.encode_prompts(task.train[idx[torch.randperm(len(idx), generator=generator)[:per_shape]]])
            completions, _ = policy.sample(prompts, n)
            correct = accuracy_reward(task.answers(prompts.repeat_interleave(n, dim=0)), completions)
            fmt = format_reward(completions, task.n_digits)
            wrote = torch.tensor([parse_completion(row)[0] != "" for row in completions])
            nan = float("nan")
            out[shape] = {
                "accuracy": correct.mean().item(),
                "scratchpad_rate": wrote.float().mean().item(),
                "format_scratchpad": fmt[wrote].mean().item() if wrote.any() else nan,
                "format_direct": fmt[~wrote].mean().item() if (~wrote).any() else nan,
            }
    return out


# --8<-- [end:by_shape]


def run_pass_at_k(seed: int = 0, quick: bool = False) -> dict[str, dict[int, float]]:
    """热启动模型在 GRPO 前后的 pass@k（快速版 n=8、GRPO 4 步；完整版 n=64、100 步）。

    缓存里的曲线不是这个函数算的：它来自 `scripts/run_reasoning.py`，用的是 `grpo` 运行的最终模型。

    Args:
        seed: 随机种子。
        quick: 是否只跑短版本。

    Returns:
        `{"before": {k: pass@k}, "after": {k: pass@k}}`。
    """
    task, policy = warm_start("scratchpad", seed, quick, format_weight=FORMAT_WEIGHT)
    n = 8 if quick else 64
    out = {"before": pass_at_k_curve(policy, task, n)}
    with single_thread():
        train_grpo(policy, task, grpo_config(quick))
    out["after"] = pass_at_k_curve(policy, task, n)
    for name, curve in out.items():
        print(f"{name:>6}  " + "  ".join(f"pass@{k} {v:.3f}" for k, v in curve.items()))
    return out


def run_best_of_n(seed: int = 0, quick: bool = False) -> list[dict]:
    """打印 best-of-N 的扫描（精确计算，快速版与完整版相同）。"""
    rows = best_of_n_sweep(seed)
    for r in rows:
        print(
            f"N={r['n']:4d}  proxy {r['proxy_reward']:+.3f}  true {r['success_prob']:.3f}  "
            f"decoy {r['decoy_prob']:.3f}  KL {r['kl']:.3f} ≤ {r['kl_bound']:.3f}"
        )
    return rows


def run_reasoning(seed: int = 0, quick: bool = False, phase: str = "grpo") -> Any:
    """命令行 `python -m rlhf_toy reasoning PHASE` 的入口。

    Args:
        seed: 随机种子。
        quick: 是否只跑短版本。
        phase: `warm-start`、`grpo`（默认）、`rft`、`length`、`r1-zero`、`pass-at-k` 或 `best-of-n`。

    Returns:
        所选阶段的结果。

    Raises:
        ValueError: `phase` 未知。
    """
    if phase == "warm-start":
        out = {}
        for start in STARTS:
            task, policy = warm_start(start, seed, quick)
            with single_thread():
                out[start] = task.evaluate(policy)
            print(f"{start:>10}  {format_row(out[start])}")
        return out
    runs = {
        "grpo": dict(algorithm="grpo"),
        "rft": dict(algorithm="rft"),
        "length": dict(algorithm="grpo", overlong=True),
        "r1-zero": dict(algorithm="grpo", start="format"),
    }
    if phase in runs:
        return run_rl(seed=seed, quick=quick, **runs[phase])
    if phase == "pass-at-k":
        return run_pass_at_k(seed, quick)
    if phase == "best-of-n":
        return run_best_of_n(seed, quick)
    raise ValueError(f"未知的 phase={phase!r}；可选：warm-start、{'、'.join(runs)}、pass-at-k、best-of-n")


PHASES = ("warm-start", "grpo", "rft", "length", "r1-zero", "pass-at-k", "best-of-n")
