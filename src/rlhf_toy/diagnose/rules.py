r"""诊断规则：每个症状一条只看日志数值的明确规则，阈值写成模块常量，理由写在规则的 docstring 里。

规则读 TRL 1.16 的指标名（`trl/trainer/grpo_trainer.py`、`dpo_trainer.py` 与 transformers `Trainer` 记录的名字，
`tests/claims/test_diagnose_rules.py` 对着固定版本的源码检查），本书训练循环里对应的量列在后面作为别名
（例如本书 GRPO 的 `clip_ratio` 对应 TRL 的 `clip_ratio/region_mean`，本书 PPO 的 `objective/kl` 对应 `kl`）。
有的别名含义不完全相同：第 9 章评估里的 `completion_length`、`entropy`、`kl` 是更新之后、在留出集上量的，
不是 TRL 的训练批指标（第 14 章“健康的范围”一节）；规则对两者用同一个阈值。

一条规则的结果有四种：`detected`（日志里有这个症状）、`clean`（指标都在，没有症状）、`missing`（这条规则要读的指标
日志里没有）、`not_applicable`（这种训练不记录这类指标，例如 DPO 的日志没有 `reward`）。规则之外的推测一概不做：
报告只说哪条规则在哪一步、因为哪些数值成立，并指向推导这个机制的章节。

“持续”一律指连续 `SUSTAIN` 条有这个指标的日志（不足 `SUSTAIN` 条时指全部）；“开头”“结尾”指有这个指标的日志的前、后
四分之一（至少 1 条）的平均，用来比较趋势而不被单步噪声左右。

“条”是日志的行，不是优化步：TRL 1.16 默认 `logging_steps=10`，一行是 10 步的平均（`grad_norm` 是最后一步的），
这时连续 3 条是 30 步。诊断 TRL 的运行时设 `logging_steps=1`；本书的循环每步一行。
"""

# --8<-- [start:imports]
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from rlhf_toy.diagnose.history import History

# --8<-- [end:imports]

SUSTAIN = 3
"""“持续”的长度：连续 3 条日志。单步的噪声（一批样本偶然全对）不算症状，连续 3 条才算。"""


@dataclass(frozen=True)
class Finding:
    """一条规则在一份日志上的结果。

    Attributes:
        symptom: 规则名（英文，稳定，测试与程序用）。
        title: 症状的中文名。
        status: `"detected"`、`"clean"`、`"missing"` 或 `"not_applicable"`。
        severity: `"warning"`（训练出了问题）或 `"info"`（看着像问题、其实不是，报告解释原因）。
        step: 症状开始的步（`detected` 时）；其余情况为 `None`。
        evidence: 证据：指标名与数值（中文一句话）；`missing` 时写缺了哪些指标。
        section: 解释这个机制的章节，`page.md#anchor`。
        metrics: 规则读了（或想读而没有）的指标名。
    """

    symptom: str
    title: str
    status: str
    severity: str
    step: int | None
    evidence: str
    section: str
    metrics: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    """一条规则的元数据与检查函数。

    Attributes:
        symptom: 规则名。
        title: 症状的中文名。
        kinds: 适用的日志种类（`"grpo"`、`"ppo"`、`"dpo"`、`"other"` 的子集）。
        metrics: 每个要读的量一组候选名（先 TRL 的名字，后本书循环的别名）。
        section: 解释这个机制的章节（第 14 章复现了的症状指向它在 `reading-logs.md` 的一节，那里再链到推导机制的章节）。
        severity: `"warning"` 或 `"info"`。
        check: `check(history, names) -> (step, evidence) | None`；`names` 是各量实际用到的指标名（缺的为 `None`）。
        note: 指标缺失时报告里附加的说明（例如“只在用 vLLM 生成时记录”）。
    """

    symptom: str
    title: str
    kinds: tuple[str, ...]
    metrics: tuple[tuple[str, ...], ...]
    section: str
    severity: str
    check: Callable[[History, list[str | None]], tuple[int, str] | None]
    note: str = ""


def _fmt(x: float) -> str:
    """报告里的数：绝对值很大或很小时用科学计数法。"""
    return f"{x:.3g}" if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3) else f"{x:.3f}"


def _sustained(points: list[tuple[int, float]], bad: Callable[[float], bool]) -> int | None:
    """第一段连续 `SUSTAIN` 条（不足时为全部）满足 `bad` 的日志的起始步；没有时返回 `None`。"""
    need = min(SUSTAIN, len(points))
    run = 0
    for i, (_, v) in enumerate(points):
        run = run + 1 if bad(v) else 0
        if need and run >= need:
            return points[i - need + 1][0]
    return None


def _ends(values: list[float]) -> tuple[float, float]:
    """开头与结尾四分之一（至少 1 条）的平均。"""
    w = max(1, len(values) // 4)
    return statistics.fmean(values[:w]), statistics.fmean(values[-w:])


# ---------------------------------------------------------------------------------------------------------------------
# 1. GRPO 的 loss 恰为 0 或为负（不是 bug）

LOSS_ZERO_TOL = 1e-4
"""|loss| 不超过它就算“恰为 0”：float32 下每组优势之和的舍入误差远小于它（优势是 O(1) 的数，B 个相加的误差约 1e-6）。"""

REWARD_MOVES = 0.05
"""奖励“在动”：日志里 `reward` 的最大值与最小值之差至少 0.05（可验证奖励在 [0, 1] 内，0.05 是 5 个百分点）。"""


def check_loss_zero(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""GRPO 的 loss 恰为 0 或为负，而奖励在变：**不是 bug**。

    规则：有至少一半的日志 `loss` 满足 $|loss| \le$ `LOSS_ZERO_TOL` 或 $loss < 0$，同时 `reward` 的极差
    $\ge$ `REWARD_MOVES`。

    理由：`num_iterations=1`（TRL 的默认）时比率 $w \equiv 1$，`loss_type="grpo"` 的策略项的值是优势平均值的相反数，
    每组优势之和为 0，所以值是 0；梯度却是 $-\hat A_i$，不为 0（`docs/grpo.md` 常见错误“日志里的 loss 说明不了进度”）。
    按 token 汇总时值按长度加权，可正可负；$\beta > 0$ 时再加 $\beta$ 乘一批 $k_3$ 的平均。loss 的值不是进度。
    """
    loss, reward = names
    points = h.points(loss)
    flat = [(s, v) for s, v in points if abs(v) <= LOSS_ZERO_TOL or v < 0]
    rewards = h.values(reward)
    spread = max(rewards) - min(rewards)
    if 2 * len(flat) < len(points) or spread < REWARD_MOVES:
        return None
    lo = min(v for _, v in points)
    return flat[0][0], (
        f"{len(flat)}/{len(points)} 条日志的 loss ≈ 0 或为负（最小 {_fmt(lo)}），"
        f"reward 却在 {_fmt(min(rewards))} 到 {_fmt(max(rewards))} 之间变化"
    )


# ---------------------------------------------------------------------------------------------------------------------
# 2. KL 爆炸

KL_JUMP = 10.0
"""KL 一步涨到前一条日志的 10 倍以上才算爆炸。"""

KL_FLOOR = 0.01
"""比较的基数至少取 0.01 nat：训练开头 KL 从 0 起步，从 1e-4 涨到 1e-3 是正常的起步，不是爆炸。"""


def check_kl_explodes(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""KL 爆炸：某一条日志的 KL 至少是前一条的 `KL_JUMP` 倍（前一条小于 `KL_FLOOR` 时按 `KL_FLOOR` 算；第一条与
    `KL_FLOOR` 比）。

    理由：Adam 每步改动参数的幅度受学习率约束，健康的运行里 KL 随步数平滑增长。本书第 8 章老虎机上的 GRPO
    （种子 0，$G = 4$，16 步）：学习率 0.1 时相邻两条日志之比至多约 4 倍，且是从 0.01 nat 以下起步；学习率 0.5
    （第 6 章种子演示的学习率）时一批 $k_3$ 的平均先逐步上升、再持平，相邻之比也不到 5 倍；学习率 10 时第 1 步就是 $10^7$ 量级
    （`tests/test_diagnose.py` 的 `test_book_grpo_*`）。一步涨 10 倍说明一次更新把策略推得很远：学习率过大、loss 尖峰，
    或 `log_ratio` 溢出（`docs/kl.md` 限幅一节）。本书 PPO 记的 `objective/kl` 是整条回答的 KL（逐 token 求和），
    TRL GRPO 的 `kl` 是逐 token 平均，规则只看相对变化，两者通用。
    """
    (kl,) = names
    prev = None
    for step, v in h.points(kl):
        base = KL_FLOOR if prev is None else max(prev, KL_FLOOR)
        if v >= KL_JUMP * base:
            before = "起点" if prev is None else f"前一条 {_fmt(prev)}"
            return step, f"{kl} 从 {before} 涨到 {_fmt(v)}（≥ {KL_JUMP:g} × {_fmt(base)}）"
        prev = v
    return None


# ---------------------------------------------------------------------------------------------------------------------
# 3. 熵塌缩

ENTROPY_FAST_DROP = 1 / 3
"""快速塌缩：相邻 2 个间隔（3 条日志）内熵下降至少第一条日志熵值的 1/3。"""

ENTROPY_FLOOR = 0.05
"""深度塌缩：熵降到第一条日志的 5% 以下（分布几乎只剩一个回答）。"""


def check_entropy_collapse(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""熵塌缩：熵在 2 个日志间隔内掉了起始熵的 `ENTROPY_FAST_DROP` 以上、并且持续（连续 `SUSTAIN` 条都在这个水平之下，
    日志剩得不够时看剩下的全部）（快），或降到起始熵的 `ENTROPY_FLOOR` 以下（深）。

    要求持续，是因为 TRL 的 `entropy` 是一批采样回答上的平均，批与批之间有噪声：第 14 章学习率为 0 的对照运行里
    （策略一步也没变），加法任务上相邻几批的熵在 0.206 到 0.287 nat 之间起伏，单看两步之差会误报
    （`docs/reading-logs.md` 熵塌缩一节）。

    理由：健康的运行里熵逐渐下降，不在一两步内塌到 0（`docs/comparison.md` 健康 vs 异常）。阈值对着本书自己的运行定
    （第 8 章老虎机上的 GRPO，种子 0，$G = 4$，训练前先记一条）：学习率 0.1 与 0.5 时，两步之内熵最多掉起始值的
    约 27%；学习率 10 的坏配置第 1 步就掉了约 43%（从 $\log 8 \approx 2.08$ 到 1.19）。1/3 落在两者之间。
    深度塌缩：熵不到起始的 5% 时采样几乎总是同一个回答，组内奖励全相同、探索停止（DAPO 用 clip-higher 防的正是它，
    见 `docs/grpo-variants.md` 非对称截断）。任务只有一个正确回答、奖励已接近满分时，这是收敛，不是故障：报告给出
    这一步的奖励供判断。起始熵取第一条日志：TRL 的 `entropy` 是更新前这一批的熵，第一条就是起点；本书的循环在更新后
    评估，要看起点须在训练前先记一条（见测试）。
    """
    (ent,) = names
    points = h.points(ent)
    h0 = points[0][1]
    if h0 <= 0:
        return None
    for i in range(1, len(points)):
        step, v = points[i]
        start = points[max(0, i - 2)][1]
        level = start - ENTROPY_FAST_DROP * h0
        if all(u <= level for _, u in points[i : i + SUSTAIN]):  # 掉下去之后持续（日志不够时看剩下的全部）
            return (
                step,
                f"{ent} 在第 {points[max(0, i - 2)][0]} 到 {step} 步从 {_fmt(start)} 掉到 {_fmt(v)}（起始 {_fmt(h0)}）",
            )
        if v < ENTROPY_FLOOR * h0:
            reward = h.first("reward", "objective/scores")
            at = dict(h.points(reward)) if reward else {}
            tail = f"；这一步 {reward} = {_fmt(at[step])}" if step in at else ""
            return step, f"{ent} 降到 {_fmt(v)}，不到起始 {_fmt(h0)} 的 {ENTROPY_FLOOR:.0%}{tail}"
    return None


# ---------------------------------------------------------------------------------------------------------------------
# 4. frac_reward_zero_std 趋于 1

ZERO_STD_LIMIT = 0.9
"""组内奖励全相同的组占 90% 以上：只剩不到一成的组在提供梯度。"""


def check_zero_std(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""没有学习信号：`frac_reward_zero_std` 持续（连续 `SUSTAIN` 条）不低于 `ZERO_STD_LIMIT`。

    理由：组内奖励全相同时组内相对优势全为 0，这一组不贡献策略梯度（`docs/grpo.md` 用法：奖励全相同的组）；
    比例为 1 时整批没有策略梯度，$\beta = 0$ 时这一步什么也不学。奖励接近满分时是题太容易（或已学会），
    接近 0 时是题太难或奖励函数总判错（例如答案格式对不上，`docs/comparison.md` 健康 vs 异常的 `zero_variance`）；
    报告给出这段的平均奖励。DAPO 的动态采样丢掉这些组（`docs/grpo-variants.md` 动态采样）。
    """
    (frac,) = names
    points = h.points(frac)
    start = _sustained(points, lambda v: v >= ZERO_STD_LIMIT)
    if start is None:
        return None
    after = [v for s, v in points if s >= start]
    reward = h.first("reward")
    rewards = [v for s, v in h.points(reward) if s >= start] if reward else []
    tail = f"，这段平均 reward = {_fmt(statistics.fmean(rewards))}" if rewards else ""
    return start, f"{frac} 从第 {start} 步起持续 ≥ {ZERO_STD_LIMIT:g}（最大 {_fmt(max(after))}）{tail}"


# ---------------------------------------------------------------------------------------------------------------------
# 5. 回答长度塌缩

LENGTH_COLLAPSE = 0.5
"""平均回答长度持续低于第一条日志的一半。"""


def check_length_collapse(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""回答长度塌缩：平均回答长度持续（连续 `SUSTAIN` 条）低于第一条日志的 `LENGTH_COLLAPSE` 倍。

    理由：长度减半意味着模型换了一种回答方式（提早输出 EOS、跳过推理步骤），例如奖励里的长度惩罚压过了答案分
    （第 14 章症状 5）。按序列平均的汇总（`loss_type="grpo"`）不是一个单向的推力：它答对时偏爱短回答，
    答错时对长回答罚得轻（`docs/grpo-variants.md` 四种汇总与长度偏差）。一半是一个粗的界：阈值以上的缓慢缩短不报。
    """
    (length,) = names
    points = h.points(length)
    l0 = points[0][1]
    start = _sustained(points[1:], lambda v: v < LENGTH_COLLAPSE * l0)
    if start is None:
        return None
    low = min(v for s, v in points if s >= start)
    return start, f"{length} 从起始 {_fmt(l0)} 持续低于 {LENGTH_COLLAPSE:g} 倍（最低 {_fmt(low)}）"


# ---------------------------------------------------------------------------------------------------------------------
# 6. 回答写到长度上限

TRUNCATION_LIMIT = 0.2
"""被截停（写满 `max_completion_length` 仍没有 EOS）的回答持续占 20% 以上。"""


def check_truncation(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""回答写到长度上限：`completions/clipped_ratio` 持续（连续 `SUSTAIN` 条）不低于 `TRUNCATION_LIMIT`。

    理由：超长截停的回答没有写完，奖励函数看到的是半截答案（通常判错），但它的 token 照样进损失；五分之一的回答
    如此时，梯度里有相当一部分来自没写完的回答。对策是加长上限、`mask_truncated_completions`，或 DAPO 的软超长惩罚
    （`docs/grpo-variants.md` 软超长惩罚）。
    """
    (ratio,) = names
    points = h.points(ratio)
    start = _sustained(points, lambda v: v >= TRUNCATION_LIMIT)
    if start is None:
        return None
    return start, f"{ratio} 从第 {start} 步起持续 ≥ {TRUNCATION_LIMIT:g}（最大 {_fmt(max(v for _, v in points))}）"


# ---------------------------------------------------------------------------------------------------------------------
# 7. DPO：被选回答的对数概率下降，间隔却在变大

CHOSEN_LOGPS_DROP = 1.0
"""`logps/chosen`（整条回答的对数概率之和）结尾比开头低 1 nat 以上：被选回答概率的几何平均降到原来的 1/e 以下。"""


def check_dpo_chosen(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""DPO 被选回答变得更不可能，间隔却在变大：结尾的 `rewards/margins` 高于开头，同时结尾的 `logps/chosen` 比开头低
    `CHOSEN_LOGPS_DROP` 以上（没有 `logps/chosen` 时：结尾的 `rewards/chosen` 为负且低于开头）。

    理由：DPO 只优化被选与被拒回答对数概率之**差**，间隔变大可以完全来自压低被拒回答，被选回答的概率也可以一起下降
    （`docs/dpo.md` 常见错误“只盯着损失或 `rewards/margins`”）。`rewards/chosen` $= \beta(\log\pi_\theta - \log\piref)$，
    为负就是被选回答比参考模型下更不可能。TRL 的 `logps/chosen` 是一批的平均，批与批之间回答不同，所以比较开头与
    结尾四分之一的平均；要看同一批回答的趋势，在固定评估集上看 `eval_logps/chosen`。报告的起始步是最后一段一直低于
    开头平均的日志的第一条。
    """
    margins, chosen_logps, chosen_rewards = names
    m0, m1 = _ends(h.values(margins))
    if m1 <= m0:
        return None
    if chosen_logps is not None:
        c0, c1 = _ends(h.values(chosen_logps))
        if c0 - c1 < CHOSEN_LOGPS_DROP:
            return None
        name = chosen_logps
    else:
        c0, c1 = _ends(h.values(chosen_rewards))
        if not (c1 < 0 and c1 < c0):
            return None
        name = chosen_rewards
    # 起始步：最后一段一直低于开头平均的日志的第一条（先升后降时，不把开头几步的起伏算作下降的开始）
    step = h.points(name)[-1][0]
    for s, v in reversed(h.points(name)):
        if v >= c0:
            break
        step = s
    return step, f"{margins} 开头 {_fmt(m0)} → 结尾 {_fmt(m1)}，{name} 开头 {_fmt(c0)} → 结尾 {_fmt(c1)}"


# ---------------------------------------------------------------------------------------------------------------------
# 8. 训练奖励上升，留出集正确率不升

REWARD_RISE = 0.05
"""训练奖励结尾比开头高 0.05 以上才算“上升”（可验证奖励在 [0, 1] 内）。"""

ACCURACY_RISE = 0.01
"""留出集正确率结尾比开头高不到 0.01（1 个百分点）就算“没有上升”。"""

ACCURACY_METRICS = ("eval_accuracy", "accuracy", "success_prob")
"""留出集正确率的候选名：TRL 评估时给指标加 `eval_` 前缀；本书第 9 章评估记 `accuracy`、查表任务记 `success_prob`。

不含 TRL 的 `eval_reward`：它是同一组奖励函数在评估提示词上的分，奖励函数本身被投机时它与 `reward` 一起涨，
查不出这个症状。"""


def check_reward_vs_accuracy(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""训练奖励上升、留出集正确率不升：结尾比开头，`reward` 高 `REWARD_RISE` 以上，正确率高不到 `ACCURACY_RISE`。

    理由：训练日志里的奖励就是奖励函数（或奖励模型）给训练样本的分，它上升而留出集不升，是奖励过优化或奖励投机
    （`docs/comparison.md` 奖励过优化；格式奖励的例子见 `docs/reasoning.md` 格式奖励的投机）。只看训练奖励看不出来，
    所以这条规则需要评估指标：日志里没有时报告“缺少指标”。
    """
    reward, accuracy = names
    r0, r1 = _ends(h.values(reward))
    a0, a1 = _ends(h.values(accuracy))
    if r1 - r0 < REWARD_RISE or a1 - a0 >= ACCURACY_RISE:
        return None
    step = next((s for s, v in h.points(reward) if v - r0 >= REWARD_RISE), h.points(reward)[-1][0])
    return step, f"{reward} 开头 {_fmt(r0)} → 结尾 {_fmt(r1)}，{accuracy} 开头 {_fmt(a0)} → 结尾 {_fmt(a1)}"


# ---------------------------------------------------------------------------------------------------------------------
# 9. 梯度范数尖峰

GRAD_SPIKE = 10.0
"""梯度范数是此前（至多 20 条）日志中位数的 10 倍以上。"""

GRAD_HISTORY = 5
"""至少有 5 条此前的日志才判断（开头几步的梯度范数本来就大）。

TRL 默认 `logging_steps=10` 时这是前 50 步，而且每条只含那 10 步中最后一步的 `grad_norm`，别的步的尖峰看不到。
"""


def check_grad_spike(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""梯度范数尖峰：某条日志的 `grad_norm` 不低于此前至多 20 条的中位数的 `GRAD_SPIKE` 倍（此前至少 `GRAD_HISTORY` 条）。

    理由：transformers `Trainer` 记录的 `grad_norm` 是限幅（`max_grad_norm`，默认 1.0，见 `docs/trl.md` 与 TRL 的差异）
    **之前**的全局范数（`Trainer._clip_grad_norm` 返回限幅前的范数），所以限幅挡住了更新，日志照样看得到尖峰。中位数不受偶发尖峰影响；10 倍远超
    批与批之间的正常起伏。尖峰常伴随 loss 尖峰、KL 跳变，或某一批里极端的重要性比率。
    """
    (grad,) = names
    points = h.points(grad)
    for i in range(GRAD_HISTORY, len(points)):
        median = statistics.median(v for _, v in points[max(0, i - 20) : i])
        step, v = points[i]
        if median > 0 and v >= GRAD_SPIKE * median:
            return step, f"{grad} = {_fmt(v)}，此前中位数 {_fmt(median)}（{v / median:.1f} 倍）"
    return None


# ---------------------------------------------------------------------------------------------------------------------
# 10. 采样器与训练器的对数概率不一致

LOGP_DIFF_LIMIT = 0.05
"""采样器（vLLM）与训练器逐 token 对数概率之差的平均绝对值超过 0.05 nat。"""

IS_RATIO_BAND = 0.1
"""重要性权重 $\\pi_{训练}/\\pi_{vLLM}$ 的平均偏离 1 超过 0.1。"""


def check_sampler_mismatch(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""采样器与训练器不一致：`sampling/sampling_logp_difference/mean` 持续超过 `LOGP_DIFF_LIMIT`，或
    `sampling/importance_sampling_ratio/mean` 持续偏离 1 超过 `IS_RATIO_BAND`（都是连续 `SUSTAIN` 条）。

    理由：这两个指标只在用 vLLM 生成且开着 `vllm_importance_sampling_correction` 时记录（缺了就报“缺少指标”，
    说明这次运行没有这种不一致的测量）。采样器和训练器的权重相同，差异来自数值（bf16、内核），
    也来自只在采样器一侧生效的 `top_k` / `top_p`（温度两侧都用）；
    逐 token 平均差 0.05 nat 时，100 个 token 的回答上差异若同向累积可达 5 nat，远超 TRL 默认的序列权重上界
    `vllm_importance_sampling_clip_max=3.0`（$\ln 3 \approx 1.1$）。权重的平均偏离 1 一成，修正本身就把梯度缩放了一成。
    `docs/offpolicy.md` 过时与不一致的采样器推导了这两种修正与它们的偏差。
    """
    diff, ratio = names
    found = []
    if diff is not None:
        start = _sustained(h.points(diff), lambda v: v > LOGP_DIFF_LIMIT)
        if start is not None:
            found.append((start, f"{diff} 从第 {start} 步起持续 > {LOGP_DIFF_LIMIT:g}"))
    if ratio is not None:
        start = _sustained(h.points(ratio), lambda v: abs(v - 1) > IS_RATIO_BAND)
        if start is not None:
            found.append((start, f"{ratio} 从第 {start} 步起持续偏离 1 超过 {IS_RATIO_BAND:g}"))
    if not found:
        return None
    return min(s for s, _ in found), "；".join(text for _, text in found)


# ---------------------------------------------------------------------------------------------------------------------
# 11. 截断比例高

CLIP_LIMIT = 0.2
"""被截断的 token 持续占 20% 以上。"""


def check_clip_high(h: History, names: list[str | None]) -> tuple[int, str] | None:
    r"""截断比例高：截断比例持续（连续 `SUSTAIN` 条）不低于 `CLIP_LIMIT`。

    理由：比率越过 $[1-\epsilon, 1+\epsilon]$ 且方向与优势相同的 token 没有梯度（`docs/grpo.md` 重要性采样比率与截断）；
    五分之一的 token 被截断，说明每批样本上的更新走得太远（学习率太大或 `num_iterations` 太多），
    这些 token 的信号被白白丢掉。`num_iterations=1` 时比率恒为 1，截断比例按定义为 0，说明不了任何事。
    TRL 每次内循环都记一次（第一遍 $w \approx 1$），再平均；`num_iterations=2` 时 TRL 的值约为本书的一半
    （`docs/comparison.md` 健康 vs 异常）；阈值对两者一样，TRL 上更保守。
    """
    (clip,) = names
    points = h.points(clip)
    start = _sustained(points, lambda v: v >= CLIP_LIMIT)
    if start is None:
        return None
    return start, f"{clip} 从第 {start} 步起持续 ≥ {CLIP_LIMIT:g}（最大 {_fmt(max(v for _, v in points))}）"


# ---------------------------------------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule(
        symptom="loss_zero_or_negative",
        title="GRPO 的 loss 恰为 0 或为负、奖励却在变",
        kinds=("grpo",),
        metrics=(("loss",), ("reward",)),
        section="reading-logs.md#loss-zero",
        severity="info",
        check=check_loss_zero,
    ),
    Rule(
        symptom="kl_explodes",
        title="KL 爆炸",
        kinds=("grpo", "ppo"),
        metrics=(("kl", "objective/kl"),),
        section="reading-logs.md#kl-explodes",
        severity="warning",
        check=check_kl_explodes,
        note="TRL 的 GRPOTrainer 只在 beta ≠ 0 时记录 kl；TRL 1.16 的默认 beta=0.0",
    ),
    Rule(
        symptom="entropy_collapse",
        title="熵塌缩",
        kinds=("grpo", "ppo"),
        metrics=(("entropy", "policy/entropy_avg"),),
        section="reading-logs.md#entropy-collapse",
        severity="warning",
        check=check_entropy_collapse,
    ),
    Rule(
        symptom="no_learning_signal",
        title="组内奖励全相同，没有学习信号",
        kinds=("grpo",),
        metrics=(("frac_reward_zero_std",),),
        section="reading-logs.md#zero-std",
        severity="warning",
        check=check_zero_std,
    ),
    Rule(
        symptom="length_collapse",
        title="回答长度塌缩",
        kinds=("grpo",),
        metrics=(("completions/mean_length", "sample_length", "completion_length"),),
        section="reading-logs.md#length-collapse",
        severity="warning",
        check=check_length_collapse,
    ),
    Rule(
        symptom="truncation",
        title="回答写到长度上限",
        kinds=("grpo",),
        metrics=(("completions/clipped_ratio",),),
        section="reading-logs.md#truncation",
        severity="warning",
        check=check_truncation,
    ),
    Rule(
        symptom="dpo_chosen_down",
        title="DPO 被选回答的对数概率下降、间隔却变大",
        kinds=("dpo",),
        metrics=(("rewards/margins",), ("logps/chosen",), ("rewards/chosen",)),
        section="reading-logs-more.md#dpo-chosen-down",
        severity="warning",
        check=check_dpo_chosen,
    ),
    Rule(
        symptom="reward_without_accuracy",
        title="训练奖励上升，留出集正确率不升",
        kinds=("grpo", "ppo"),
        metrics=(("reward", "objective/scores"), ACCURACY_METRICS),
        section="reading-logs-more.md#reward-without-accuracy",
        severity="warning",
        check=check_reward_vs_accuracy,
        note="要在训练中评估：TRL 设 eval_strategy 与 eval_dataset；或用 --accuracy-metric 指定指标名",
    ),
    Rule(
        symptom="grad_norm_spike",
        title="梯度范数尖峰",
        kinds=("grpo", "ppo", "dpo", "other"),
        metrics=(("grad_norm",),),
        section="reading-logs-more.md#grad-norm-spike",
        severity="warning",
        check=check_grad_spike,
        note="本书的 GRPO、PPO、DPO 循环不记录 grad_norm",
    ),
    Rule(
        symptom="sampler_mismatch",
        title="采样器与训练器的对数概率不一致",
        kinds=("grpo",),
        metrics=(("sampling/sampling_logp_difference/mean",), ("sampling/importance_sampling_ratio/mean",)),
        section="reading-logs-more.md#sampler-mismatch",
        severity="warning",
        check=check_sampler_mismatch,
        note="只在用 vLLM 生成并开着 vllm_importance_sampling_correction 时记录",
    ),
    Rule(
        symptom="clip_ratio_high",
        title="截断比例高",
        kinds=("grpo", "ppo"),
        metrics=(("clip_ratio/region_mean", "clip_ratio", "policy/clipfrac_avg"),),
        section="reading-logs-more.md#clip-high",
        severity="warning",
        check=check_clip_high,
    ),
)
"""全部规则，按报告里的顺序。"""

BOOK_ALIASES = frozenset(
    {
        "objective/kl", "objective/scores", "policy/entropy_avg", "policy/clipfrac_avg", "clip_ratio",
        "sample_length", "completion_length", "accuracy", "success_prob",
    }
)  # fmt: skip
"""规则读的名字里本书训练循环与评估函数的名字（其余是 TRL 1.16 / transformers 的名字，或 TRL 加了 `eval_` 前缀的评估指标）。"""

# 每条规则里可以缺的量（规则里有替代）：dpo_chosen_down 的 logps/chosen 与 rewards/chosen 二选一，
# sampler_mismatch 的两个指标有一个即可
ONE_OF = {"dpo_chosen_down": (1, 2), "sampler_mismatch": (0, 1)}


def run_rule(rule: Rule, h: History, kind: str) -> Finding:
    """在日志 `h`（种类 `kind`）上运行一条规则，返回 `Finding`。"""
    every = tuple(n for names in rule.metrics for n in names)
    if kind not in rule.kinds:
        return Finding(rule.symptom, rule.title, "not_applicable", rule.severity, None, "", rule.section, every)
    names = [h.first(*candidates) for candidates in rule.metrics]
    either = ONE_OF.get(rule.symptom, ())
    absent = [rule.metrics[i] for i, n in enumerate(names) if n is None and i not in either]
    if either and all(names[i] is None for i in either):
        absent.append(tuple(n for i in either for n in rule.metrics[i]))
    if absent:
        wanted = "；".join(" 或 ".join(c) for c in absent)
        note = f"（{rule.note}）" if rule.note else ""
        missing = tuple(n for c in absent for n in c)
        return Finding(
            rule.symptom, rule.title, "missing", rule.severity, None, f"缺少指标：{wanted}{note}", rule.section, missing
        )
    used = tuple(n for n in names if n is not None)
    result = rule.check(h, names)
    if result is None:
        return Finding(rule.symptom, rule.title, "clean", rule.severity, None, "", rule.section, used)
    step, evidence = result
    return Finding(rule.symptom, rule.title, "detected", rule.severity, step, evidence, rule.section, used)
