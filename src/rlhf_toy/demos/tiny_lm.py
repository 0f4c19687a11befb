r"""第 9 章的演示：极小 Transformer 在两位数加法上的 SFT 热启动、GRPO、DPO 与 PPO。

`python -m rlhf_toy tiny-lm {sft,grpo,dpo,ppo} [--quick]`。`quick=True` 只跑很短的版本（CI 与页面用）：
热启动相同，之后的 GRPO、DPO、PPO 步数少得多，数字因此比完整版差，但流程一模一样。所有函数在单线程下运行（这些小矩阵在单线程下
最快，且结果与机器的核数无关），结束时恢复原来的线程数。
"""

# --8<-- [start:imports]
from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor, nn

from rlhf_toy._threads import single_thread
from rlhf_toy.policies.transformer import TinyTransformerPolicy, completion_mask
from rlhf_toy.tasks.addition import AdditionTask, shapes
from rlhf_toy.train.dpo import DPOConfig, train_dpo
from rlhf_toy.train.grpo import GRPOConfig, train_grpo
from rlhf_toy.train.sft import SFTConfig, train_sft

# --8<-- [end:imports]


# --8<-- [start:configs]
def sft_config(quick: bool = False) -> SFTConfig:
    """SFT 的配置：最多 800 步 × 128 题（热启动达到目标正确率就停，见 `warm_start`）；`run_sft` 的快速版 200 步 × 64 题。

    Args:
        quick: 是否只跑短版本（只有 `run_sft` 用；热启动总用完整配置）。

    Returns:
        配置。
    """
    return SFTConfig(learning_rate=5e-3, steps=200 if quick else 800, batch_size=64 if quick else 128)


def grpo_config(quick: bool = False, **overrides: Any) -> GRPOConfig:
    """极小 Transformer 的 GRPO 配置（每步 32 个提示词 × G = 8）：TRL 1.16.0 的默认 `beta=0`、`loss_type="dapo"`，
    加上 DAPO 的非对称截断（clip-higher，`epsilon_high=0.28`）。`num_iterations=1` 时比率恒为 1，
    `epsilon` 与 `epsilon_high` 其实不起作用，保留它只是为了与 DAPO 的配置一致。

    Args:
        quick: 是否只跑第 9 章的快速版（100 步）；否则 300 步（命令行不带 `--quick` 时）。
        **overrides: 覆盖任意字段，例如 `loss_type="grpo"`。

    Returns:
        配置。
    """
    fields = dict(
        num_generations=8,
        beta=0.0,
        learning_rate=5e-4,
        steps=100 if quick else 300,
        num_iterations=1,
        loss_type="dapo",
        epsilon_high=0.28,
    )
    return GRPOConfig(**{**fields, **overrides})


# --8<-- [end:configs]


# --8<-- [start:warm_start]
def warm_start(
    seed: int = 0,
    target_accuracy: float = 0.5,
    check_every: int = 50,
    balanced: bool = True,
    **task_kwargs: Any,
) -> tuple[AdditionTask, TinyTransformerPolicy]:
    """建任务与模型，并做一段短的 SFT：让模型学会格式、答对一部分题，给强化学习留出提升空间。

    学会进位的时刻因种子而异（损失先停在平台上，然后突然下降），固定步数的热启动答对的比例因种子而差得很远。
    所以每 `check_every` 步在 200 道**训练**题上看一次贪心正确率，达到 `target_accuracy` 就停
    （留出集不参与这个决定）。快速版与完整版用同一个热启动，只是之后的强化学习短一些。

    Args:
        seed: 随机种子（模型初始化、任务的题目划分与抽样都由它决定）。
        target_accuracy: 停止条件（训练题上的贪心正确率）。
        check_every: 每隔几步检查一次。
        balanced: 训练题是否按题型均衡地抽（见 `AdditionTask` 的 `balanced`；本章默认均衡，原因见 `errors_by_shape`）。
        **task_kwargs: 传给 `AdditionTask`，例如 `scratch=4`、`max_completion_length=12`。

    Returns:
        `(task, policy)`：`policy` 已经过 SFT。
    """
    torch.manual_seed(seed)
    task = AdditionTask(seed=seed, balanced=balanced, **task_kwargs)
    policy = task.make_policy()
    config = sft_config()
    optimizer = torch.optim.AdamW(
        policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay, fused=True
    )
    chunk = SFTConfig(**{**config.__dict__, "steps": check_every})
    probe = task.encode_prompts(task.train[:200])
    for _ in range(0, config.steps, check_every):
        train_sft(policy, task, chunk, optimizer=optimizer)
        completions, _, _ = policy.generate(probe, greedy=True)
        if task.reward(probe, completions).mean().item() >= target_accuracy:
            break
    return task, policy


# --8<-- [end:warm_start]


# --8<-- [start:errors_by_shape]
@torch.no_grad()
def errors_by_shape(
    policy: TinyTransformerPolicy, task: AdditionTask, num_generations: int = 8
) -> dict[str, dict[str, int]]:
    """按题型（两个操作数各几位，见 `shapes`）统计留出集上的错误，以及“组内全错”的题。

    组内相对优势的方法（GRPO、RLOO）里，只有采样到、又有对有错的提示词给出自己的梯度；其余的题只能靠别的题泛化过来。
    一道题的 $G$ 个回答全错时，组内优势全为 0，这道题给不出梯度；
    模型在某种题型上很有把握地答错时，这种题就大多是这样。所以这里除了贪心解码答错的题数，
    还数一数按温度采样 $G$ 个回答、一个也没答对的题数——它们就是 GRPO 里优势全为 0 的组。

    Args:
        policy: 要统计的策略（贪心解码与按温度采样都用它）。
        task: 加法任务；统计整个留出集。
        num_generations: 每道题采样几个回答 $G$（与 GRPO 的组大小相同才有意义）。

    Returns:
        `{题型: {"problems": 题数, "wrong": 贪心解码答错的题数, "all_wrong": G 个采样回答全错的题数}}`，按题型排序。
    """
    prompts = task.heldout_prompts()
    greedy, _, _ = policy.generate(prompts, greedy=True)
    wrong = (task.reward(prompts, greedy) == 0).tolist()
    sampled, _ = policy.sample(prompts, num_generations)
    rewards = task.reward(prompts.repeat_interleave(num_generations, dim=0), sampled)
    all_wrong = (rewards.view(len(prompts), num_generations) == 0).all(dim=1).tolist()
    out: dict[str, dict[str, int]] = {}
    for shape, w, a in zip(shapes(task.heldout), wrong, all_wrong, strict=True):
        row = out.setdefault(shape, {"problems": 0, "wrong": 0, "all_wrong": 0})
        row["problems"] += 1
        row["wrong"] += w
        row["all_wrong"] += a
    return dict(sorted(out.items()))


def format_errors_by_shape(table: dict[str, dict[str, int]]) -> str:
    """把 `errors_by_shape` 的结果写成一行：`题型 答错/题数 (all wrong n)`，n 是 $G$ 个采样回答全错的题数。"""
    return "  ".join(f"{k} {v['wrong']}/{v['problems']} (all wrong {v['all_wrong']})" for k, v in table.items())


# --8<-- [end:errors_by_shape]


def _fmt(h: dict) -> str:
    """指标写成一行：键名保持 TRL / `task.evaluate` 的名字（`accuracy`、`completion_length`、`kl`、`entropy`）。"""
    keys = ("accuracy", "completion_length", "kl", "entropy")
    return "  ".join(f"{k} {h[k]:.3f}" for k in keys if k in h)


def run_sft(seed: int = 0, quick: bool = False) -> list[dict]:
    """只跑 SFT，打印留出集上的贪心正确率随步数的变化。

    Args:
        seed: 随机种子。
        quick: 是否只跑短版本。

    Returns:
        SFT 的指标历史。
    """
    with single_thread():
        torch.manual_seed(seed)
        task = AdditionTask(seed=seed, balanced=True)
        policy = task.make_policy()
        config = sft_config(quick)
        print(f"SFT：{config.steps} 步 × {config.batch_size} 题，lr {config.learning_rate}")
        history = train_sft(policy, task, config, evaluate=task.evaluate, eval_every=50)
        for h in history:
            if "accuracy" in h:
                print(f"第 {h['step']:4d} 步  loss {h['loss']:.3f}  {_fmt(h)}")
    return history


# --8<-- [start:run_grpo]
def run_grpo(seed: int = 0, quick: bool = False, **overrides: Any) -> list[dict]:
    """SFT 热启动后跑 GRPO，打印留出集正确率、回答长度、到参考模型的 KL 与熵。

    Args:
        seed: 随机种子。
        quick: 是否只跑短版本。
        **overrides: 覆盖 `grpo_config` 的字段。

    Returns:
        GRPO 的指标历史（评估步含 `accuracy`、`completion_length`、`kl`、`entropy`）。
    """
    with single_thread():
        task, policy = warm_start(seed)
        ref = policy.frozen_copy()
        config = grpo_config(quick, max_completion_length=task.max_completion_length, **overrides)
        print(f"GRPO：{task.batch_size} 个提示词 × G={config.num_generations}，loss_type={config.loss_type}")
        print(f"SFT 之后    {_fmt(task.evaluate(policy, ref))}")

        def evaluate(p):
            return task.evaluate(p, ref)

        every = 25 if quick else 50
        history = train_grpo(policy, task, config, ref_policy=ref, evaluate=evaluate, eval_every=every)
        for h in history:
            if "accuracy" in h:
                print(f"第 {h['step']:3d} 步  reward {h['reward']:.3f}  {_fmt(h)}")
    return history


# --8<-- [end:run_grpo]


# --8<-- [start:preference_pairs]
@torch.no_grad()
def preference_pairs_from_samples(
    policy: TinyTransformerPolicy, task: AdditionTask, n_prompts: int, num_generations: int = 8
) -> tuple[tuple[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]:
    """用模型自己的样本造偏好对：每个提示词采 `num_generations` 个回答，答对的 ≻ 答错的（各取第一个）。

    组内全对或全错的提示词造不出偏好对，被跳过（这与 GRPO 里优势全为 0 的组是同一件事）。

    Args:
        policy: 采样用的策略（通常是 SFT 之后的模型，也是 DPO 的参考模型）。
        task: 加法任务。
        n_prompts: 从训练集抽多少个提示词（与 `task.prompts()` 同一个抽法，见 `AdditionTask.draw`）。
        num_generations: 每个提示词采样几个回答。

    Returns:
        `((prompts, chosen, rejected), (chosen_mask, rejected_mask))`，行数是造出的偏好对数。
        `policy.logps` 在 EOS 之后为 0，所以第一项可以直接传给 `train_dpo`（它对 `(B, T)` 求和）；掩码供检查与统计。
    """
    prompts = task.encode_prompts(task.draw(n_prompts))
    completions, _ = policy.sample(prompts, num_generations)
    correct = task.reward(prompts.repeat_interleave(num_generations, dim=0), completions).view(n_prompts, -1).bool()
    keep = correct.any(1) & ~correct.all(1)
    first_right = correct.float().argmax(1)  # 第一个答对的回答在组内的下标
    first_wrong = (~correct).float().argmax(1)
    rows = torch.arange(n_prompts) * num_generations
    chosen, rejected = completions[(rows + first_right)[keep]], completions[(rows + first_wrong)[keep]]
    masks = (completion_mask(chosen, policy.eos_id), completion_mask(rejected, policy.eos_id))
    return (prompts[keep], chosen, rejected), masks


# --8<-- [end:preference_pairs]


def run_dpo(seed: int = 0, quick: bool = False) -> list[dict]:
    """SFT 热启动后，用模型自己的样本造偏好对（答对 ≻ 答错），跑离线 DPO。

    Args:
        seed: 随机种子。
        quick: 是否只跑短版本。

    Returns:
        DPO 的指标历史（键名同 TRL：`rewards/chosen`、`rewards/margins` 等，评估步另含 `accuracy` 等）。
    """
    with single_thread():
        task, policy = warm_start(seed)
        ref = policy.frozen_copy()
        pairs, _ = preference_pairs_from_samples(policy, task, n_prompts=128 if quick else 512)
        config = DPOConfig(beta=0.5, learning_rate=1e-4, steps=20 if quick else 100)
        print(f"DPO：{len(pairs[0])} 个偏好对（模型自己的样本：答对 ≻ 答错），beta={config.beta}")
        print(f"SFT 之后  {_fmt(task.evaluate(policy, ref))}")

        calls = []

        def evaluate(p):  # train_dpo 每步都调用；只在每 10 步真正评估
            calls.append(1)
            return task.evaluate(p, ref) if len(calls) % 10 == 0 else {}

        history = train_dpo(policy, pairs, config, ref_policy=ref, evaluate=evaluate)
        for h in history:
            if "accuracy" in h:
                print(
                    f"第 {h['step']:4d} 步  loss {h['loss']:.3f}  rewards/margins {h['rewards/margins']:.3f}  {_fmt(h)}"
                )
        print("偏好对上的 margin 变大不等于生成变好：留出集正确率可能下降（似然位移，见第 9 章“常见错误”）。")
    return history


# --8<-- [start:timed_grpo]
def grpo_for_seconds(
    policy: TinyTransformerPolicy,
    task: AdditionTask,
    config: GRPOConfig,
    marks: tuple[float, ...] = (10.0, 30.0, 60.0),
    chunk: int = 5,
) -> list[dict]:
    """按墙钟时间跑 GRPO：每 `chunk` 步看一次表，越过 `marks` 中的时刻时评估一次（评估时间不计入）。

    共用一个 Adam 优化器与参考模型，分段调用 `train_grpo`。各段之间的评估也从全局随机状态里采样，所以评估落在哪几步
    （随机器负载而变）会改变之后的训练样本：同样的步数，结果未必与一口气跑完相同。

    Args:
        policy: 已热启动的策略（会被原地更新）。
        task: 加法任务。
        config: GRPO 配置（`steps` 不用，由时间决定）。
        marks: 评估时刻（秒），升序；最后一个就是总预算。
        chunk: 每段的步数。

    Returns:
        每个时刻一项：`seconds`（实际用时）、`step`、`reward` 与 `task.evaluate(policy, ref)` 的键；
        第 0 项是开始前（`seconds = 0`）。
    """
    ref = policy.frozen_copy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
    part = GRPOConfig(**{**config.__dict__, "steps": chunk})
    out = [{"seconds": 0.0, "step": 0, "reward": float("nan"), **task.evaluate(policy, ref)}]
    elapsed, step, pending = 0.0, 0, list(marks)
    while pending:
        start = time.perf_counter()
        history = train_grpo(policy, task, part, ref_policy=ref, optimizer=optimizer)
        elapsed += time.perf_counter() - start
        step += chunk
        if elapsed >= pending[0]:
            pending.pop(0)
            out.append(
                {"seconds": elapsed, "step": step, "reward": history[-1]["reward"], **task.evaluate(policy, ref)}
            )
    return out


# --8<-- [end:timed_grpo]


# --8<-- [start:length_stats]
@torch.no_grad()
def length_stats(policy: TinyTransformerPolicy, task: AdditionTask, num_generations: int = 4) -> dict[str, float]:
    """按温度采样留出集，分答对 / 答错统计回答长度（掩码内 token 数，含 EOS）。

    Args:
        policy: 策略。
        task: 加法任务。
        num_generations: 每个留出提示词采几个回答。

    Returns:
        `{"accuracy_sampled", "length_correct", "length_wrong", "truncated"}`：采样正确率、答对 / 答错回答的平均长度、
        没写出 EOS（写满最大长度被超长截停）的比例。某一类为空时其长度为 NaN。
    """
    prompts = task.heldout_prompts()
    completions, mask = policy.sample(prompts, num_generations)
    rewards = task.reward(prompts.repeat_interleave(num_generations, dim=0), completions).bool()
    lengths = mask.sum(1)
    truncated = ~(completions == policy.eos_id).any(1)
    nan = float("nan")
    return {
        "accuracy_sampled": rewards.float().mean().item(),
        "length_correct": lengths[rewards].mean().item() if rewards.any() else nan,
        "length_wrong": lengths[~rewards].mean().item() if (~rewards).any() else nan,
        "truncated": truncated.float().mean().item(),
    }


# --8<-- [end:length_stats]


# --8<-- [start:length_lesson]
def length_lesson(
    seed: int = 0,
    quick: bool = False,
    loss_types: tuple[str, ...] = ("grpo", "dr_grpo", "dapo"),
    steps: int | None = None,
    every: int = 10,
    scratch: int = 4,
    max_completion_length: int = 12,
    ramble: float = 0.0,
) -> dict[str, list[dict]]:
    """长度一课：同一个热启动模型、同样的随机数，只换 `loss_type`，看答错的回答长度怎样变化。

    任务带草稿区（回答可以先写 `scratch` 个以内的 `.` 再写答案），最大长度放宽到 `max_completion_length`，
    回答的长度因此有变化的余地。

    Args:
        seed: 随机种子（热启动与每个 `loss_type` 的 GRPO 都用它）。
        quick: 是否只跑短版本（GRPO 默认 30 步）。
        loss_types: 要比较的汇总方式。
        steps: GRPO 步数；`None` 表示快速版 30、完整版 150。
        every: 每隔几步统计一次 `length_stats`。
        scratch: 草稿区最多几个 `.`。
        max_completion_length: 回答的最大长度 $L$（`dr_grpo` 的分母也是它）。
        ramble: 热启动的 SFT 数据里“只写 `.` 写到最大长度”的回答比例（见 `AdditionTask`）。

    Returns:
        `{loss_type: [每次统计的 {"step", **length_stats, "accuracy"}]}`，第 0 项是 GRPO 之前。
    """
    import copy

    steps = (30 if quick else 150) if steps is None else steps
    with single_thread():
        task, start = warm_start(seed, scratch=scratch, max_completion_length=max_completion_length, ramble=ramble)
        runs = {}
        for loss_type in loss_types:
            policy, run_task = copy.deepcopy(start), copy.deepcopy(task)
            torch.manual_seed(seed)
            ref = policy.frozen_copy()
            config = grpo_config(quick, loss_type=loss_type, steps=every, max_completion_length=max_completion_length)
            optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
            rows = [{"step": 0, **length_stats(policy, run_task), **run_task.evaluate(policy)}]
            for done in range(every, steps + 1, every):
                train_grpo(policy, run_task, config, ref_policy=ref, optimizer=optimizer)
                rows.append({"step": done, **length_stats(policy, run_task), **run_task.evaluate(policy)})
            runs[loss_type] = rows
    return runs


# --8<-- [end:length_lesson]


class TinyValueModel(nn.Module):
    """PPO 的价值模型 $V_\\psi$：一个同样大小的极小 Transformer 躯干加一个标量输出头（与策略不共享参数，同 TRL）。

    Args:
        policy: 用它的结构与参数初始化躯干（TRL 用奖励模型初始化价值模型；这里没有奖励模型，用 SFT 之后的策略）。
    """

    def __init__(self, policy: TinyTransformerPolicy):
        super().__init__()
        self.body = policy.frozen_copy().requires_grad_(True)
        self.value_head = nn.Linear(policy.head.in_features, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def values(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """每个回答位置的价值 $V(x, y_{<t})$（生成第 $t$ 个 token 之前的状态），形状 `(B, T)`，带梯度。

        Args:
            prompts: 提示词，形状 `(B, Lp)`。
            completions: 回答，形状 `(B, T)`。

        Returns:
            形状 `(B, T)` 的浮点张量。
        """
        return self.value_head(self.body.completion_hidden(prompts, completions)).squeeze(-1)


def run_ppo(seed: int = 0, quick: bool = False) -> list[dict]:
    """SFT 热启动后跑 PPO（价值模型 + GAE + 逐 token KL 奖励），用第 4 章的 `train_ppo`。

    Args:
        seed: 随机种子。
        quick: 是否只跑短版本。

    Returns:
        PPO 的指标历史（键名同 TRL `PPOTrainer`，评估步另含 `accuracy` 等）。
    """
    from rlhf_toy.train.ppo import PPOConfig, train_ppo

    with single_thread():
        task, policy = warm_start(seed)
        ref = policy.frozen_copy()
        value_model = TinyValueModel(policy)
        config = PPOConfig(
            num_generations=8,
            kl_coef=0.01,
            learning_rate=3e-4,
            num_ppo_epochs=1,
            num_mini_batches=1,
            steps=15 if quick else 150,
        )
        print(
            f"PPO：{task.batch_size} 个提示词 × {config.num_generations}，kl_coef={config.kl_coef}，价值模型与策略同样大小"
        )
        print(f"SFT 之后  {_fmt(task.evaluate(policy, ref))}")
        every, calls = (5 if quick else 25), []

        def evaluate(p):  # train_ppo 每步都调用；只在每 `every` 步真正评估
            calls.append(1)
            return task.evaluate(p, ref) if len(calls) % every == 0 else {}

        history = train_ppo(policy, value_model, task, config, ref_policy=ref, evaluate=evaluate)
        for h in history:
            if "accuracy" in h:
                print(
                    f"第 {h['step']:4d} 步  objective/scores {h['objective/scores']:.3f}  "
                    f"val/explained_variance {h['val/explained_variance']:.3f}  {_fmt(h)}"
                )
    return history


PHASES = {"sft": run_sft, "grpo": run_grpo, "dpo": run_dpo, "ppo": run_ppo}


def run_tiny_lm(seed: int = 0, quick: bool = False, phase: str = "grpo") -> list[dict]:
    """命令行 `python -m rlhf_toy tiny-lm {sft,grpo,dpo,ppo}` 的入口。

    Args:
        seed: 随机种子。
        quick: 是否只跑短版本。
        phase: `"sft"`、`"grpo"`（默认）、`"dpo"` 或 `"ppo"`。

    Returns:
        所选阶段的指标历史。

    Raises:
        ValueError: `phase` 未知。
    """
    if phase not in PHASES:
        raise ValueError(f"未知的 phase={phase!r}；可选：{', '.join(PHASES)}")
    return PHASES[phase](seed=seed, quick=quick)
