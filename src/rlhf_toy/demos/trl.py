r"""第 10 章：第 9 章的加法任务交给 TRL 的 `SFTTrainer`、`GRPOTrainer`、`DPOTrainer`，一个进程或两个进程。

    python -m rlhf_toy trl sft|grpo|dpo [--quick] [--processes N]

`--processes 2` 用 `accelerate launch` 启动两个进程（CPU 上的 gloo 后端）；子进程看到 `WORLD_SIZE` 就直接训练。
需要 TRL 1.16（`make test` 会装；`pip install trl==1.16.0`）。
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

import torch

from rlhf_toy.demos.tiny_lm import grpo_config
from rlhf_toy.tasks.addition import AdditionTask

PHASES = ("sft", "grpo", "dpo")

# SFT 热启动与第 9 章的 `warm_start` 同一规则：每步 128 题、学习率 5e-3，每 50 步在 200 道训练题上看贪心正确率，
# 到 0.5 就停（最多 800 步）。快速版只跑几步，只为确认整条链路能走通。
SFT_FULL = dict(max_steps=800, per_device_train_batch_size=128, check_every=50, target=0.5)
SFT_QUICK = dict(max_steps=4, per_device_train_batch_size=32, check_every=2, target=0.5)
GRPO_QUICK_PROMPTS = 8  # 快速版每步 8 个提示词 × G = 4，3 步
DPO_FULL = dict(n_prompts=512, max_steps=100, beta=0.1, learning_rate=5e-4)
DPO_QUICK = dict(n_prompts=32, max_steps=3, beta=0.1, learning_rate=5e-4)
# 速度对照（`speed_control`）：每种设置跑 `rounds` 轮、每轮 `steps` 步，各轮交替进行，每轮的第一步不计
SPEED_CONTROL = dict(rounds=6, steps=4)


# TRL 1.16 自己调用 transformers 5.24 时触发的弃用警告（`gradient_checkpointing*` 改名），与读者的代码无关
warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing", category=FutureWarning)


def _quiet(trainer):
    """去掉 `disable_tqdm=True` 时逐条打印日志字典的 `PrinterCallback`（日志仍在 `trainer.state.log_history`）。"""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


def world() -> tuple[int, int]:
    """`(rank, world_size)`：由 `accelerate launch` / `torchrun` 设的环境变量给出；单进程时是 `(0, 1)`。"""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _say(*args: Any) -> None:
    if world()[0] == 0:
        print(*args, flush=True)


class _StopAtAccuracy:
    """第 9 章 `warm_start` 的停止规则，写成 transformers 的回调（构造时才导入 transformers）。"""

    def __new__(cls, model, tokenizer, task, every, target):
        from transformers import TrainerCallback

        from rlhf_toy.integrations.trl import greedy_accuracy

        probe = task.train[:200]

        class StopAtAccuracy(TrainerCallback):
            def __init__(self):
                self.history: list[tuple[int, float]] = []

            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step % every == 0:
                    accuracy = greedy_accuracy(model, tokenizer, task, probe)
                    self.history.append((state.global_step, accuracy))
                    if accuracy >= target:
                        control.should_training_stop = True

        return StopAtAccuracy()


def sft_warm_start(
    task: AdditionTask, quick: bool = False, seed: int = 0, init_from: str | None = None
) -> tuple[Any, Any, dict]:
    """用 `trl.SFTTrainer` 做第 9 章同样规则的热启动。

    Args:
        task: 加法任务（训练题按它的抽法抽：第 9 章默认按题型均衡）。
        quick: 只跑几步。
        seed: 模型初始化与 TRL 的随机种子。
        init_from: 本地目录：不训练，直接载入之前 `save_pretrained` 的热启动模型（完整运行里几次训练共用一个热启动）。

    Returns:
        `(model, tokenizer, info)`：`info` 有 `steps`、`seconds`、`train_accuracy`（每次检查的 `(步数, 正确率)`）。
    """
    from datasets.utils.logging import disable_progress_bar
    from transformers import Qwen2ForCausalLM
    from trl import SFTConfig, SFTTrainer

    from rlhf_toy.integrations.trl import make_model, make_tokenizer, sft_dataset

    disable_progress_bar()
    if init_from is not None:
        return Qwen2ForCausalLM.from_pretrained(init_from), make_tokenizer(), {"steps": None, "init_from": init_from}

    spec = SFT_QUICK if quick else SFT_FULL
    _, world_size = world()
    tokenizer, model = make_tokenizer(), make_model(seed=seed)
    stopper = _StopAtAccuracy(model, tokenizer, task, spec["check_every"], spec["target"])
    args = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="rlhf_toy_sft_"),
        max_steps=spec["max_steps"],
        per_device_train_batch_size=spec["per_device_train_batch_size"] // world_size,
        learning_rate=5e-3,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        use_cpu=True,
        bf16=False,  # TRL 1.16 默认 True：CPU 上每次前向都包进 bf16 autocast；本书全程 float32
        gradient_checkpointing=False,  # TRL 1.16 默认 True
        report_to="none",
        save_strategy="no",
        logging_steps=50,
        disable_tqdm=True,
        seed=seed,
    )
    data = sft_dataset(task.draw(spec["max_steps"] * spec["per_device_train_batch_size"]))
    trainer = _quiet(
        SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer, callbacks=[stopper])
    )
    start = time.perf_counter()
    trainer.train()
    info = {
        "steps": trainer.state.global_step,
        "seconds": time.perf_counter() - start,
        "train_accuracy": stopper.history,
    }
    return trainer.model, tokenizer, info


def parameter_digest(model: torch.nn.Module) -> str:
    """全部参数的 SHA-256 前 16 位：两个进程训练后各算一次；训练结束时相同，与 DDP 每步同步梯度一致（只在结束时核对）。"""
    blob = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
    return hashlib.sha256(blob).hexdigest()[:16]


def _gather(obj: Any) -> list[Any]:
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return [obj]
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def run_trl_grpo(seed: int = 0, quick: bool = False, init_from: str | None = None, steps: int | None = None) -> dict:
    """SFT 热启动（`SFTTrainer`）之后用 `trl.GRPOTrainer` 跑第 9 章的 GRPO 配置，打印正确率与每步耗时。

    配置由 `rlhf_toy.integrations.trl.trl_grpo_config` 从第 9 章的 `grpo_config` 换算：每步 32 个提示词 × G = 8、
    `loss_type="dapo"`、`beta=0`、`epsilon_high=0.28`、学习率 5e-4。多进程时每个进程分到 1/N 的回答。

    Args:
        seed: 随机种子。
        quick: 只跑几步（CI 用）：4 步 SFT、每步 8 个提示词 × G = 4 的 3 步 GRPO。
        init_from: 见 `sft_warm_start`。
        steps: GRPO 的步数；`None` 表示第 9 章配置的步数（完整版 300，快速版 3）。

    Returns:
        指标：`accuracy_before`、`accuracy_after`（留出集贪心正确率）、`rewards`（每步的平均奖励）、
        `grad_norms`（每步按上限缩放之前的梯度全局范数，取自 TRL 的日志）、
        `seconds_per_step`（中位数）、`step_seconds`（每步的秒数）、`seconds_by_part`（一步的时间花在哪，见 `step_breakdown`）、
        `num_processes`、`parameter_digests`（每个进程一个）、`sft`（热启动信息）。
    """
    from trl import GRPOTrainer

    from rlhf_toy.integrations.trl import greedy_accuracy, prompt_dataset, reward_function, trl_grpo_config

    rank, world_size = world()
    task = AdditionTask(seed=seed, balanced=True, batch_size=GRPO_QUICK_PROMPTS if quick else 32)
    model, tokenizer, sft = sft_warm_start(task, quick=quick, seed=seed, init_from=init_from)
    before = greedy_accuracy(model, tokenizer, task)
    overrides = dict(num_generations=4, steps=3) if quick else {}
    if steps is not None:
        overrides["steps"] = steps
    config = grpo_config(quick=quick, **overrides)
    args = trl_grpo_config(
        config,
        task,
        output_dir=tempfile.mkdtemp(prefix="rlhf_toy_grpo_"),
        per_device_train_batch_size=task.batch_size * config.num_generations // world_size,
        seed=seed,
    )
    _say(
        f"TRL GRPO：{task.batch_size} 个提示词 × G={config.num_generations}，loss_type={args.loss_type}，"
        f"{world_size} 个进程；" + (f"SFT 热启动 {sft['steps']} 步" if sft["steps"] else "热启动模型从目录载入")
    )

    timer, step_seconds = _step_timer()
    trainer = _quiet(
        GRPOTrainer(
            model=model,
            reward_funcs=reward_function(task),
            args=args,
            train_dataset=prompt_dataset(task.draw(config.steps * task.batch_size)),
            processing_class=tokenizer,
            callbacks=[timer],
        )
    )
    parts = time_grpo_parts(trainer)
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    result = {
        "num_processes": trainer.accelerator.num_processes,
        "seconds_by_part": step_breakdown(parts, sum(step_seconds), len(step_seconds)),
        "accuracy_before": before,
        "accuracy_after": greedy_accuracy(trainer.model, tokenizer, task),
        "rewards": rewards,
        # 每步的梯度范数（按上限缩放之前；logging_steps=1，所以每步都有）
        "grad_norms": [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h],
        "seconds_per_step": _median(step_seconds),
        "step_seconds": step_seconds,
        "parameter_digests": _gather(parameter_digest(trainer.model)),
        "sft": sft,
    }
    _say(
        f"留出集贪心正确率：SFT 之后 {result['accuracy_before']:.3f} → GRPO {len(rewards)} 步之后 "
        f"{result['accuracy_after']:.3f}"
    )
    _say(f"每步 {result['seconds_per_step']:.3f} 秒（中位数）；各进程参数摘要 {result['parameter_digests']}")
    return result


def _step_timer():
    """`(回调, 秒数列表)`：回调在每步的 `on_step_begin` 到 `on_step_end` 之间计时，把秒数追加到列表里。"""
    from transformers import TrainerCallback

    seconds: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            seconds.append(time.perf_counter() - self.start)

    return StepTimer(), seconds


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def speed_control(init_from: str, rounds: int, steps: int, seed: int = 0) -> dict:
    """速度对照：同样大小的批（32 个提示词 × G = 8）上，TRL 1.16 的默认设置、逐项关掉 bf16 与梯度检查点、本书的循环，交替计时。

    五个完整循环（四种 TRL 情形与 `ours`）各自抽提示词、各自生成回答，每一步的批只是大小相同；
    其余五种只算模型的情形都用开头建好的同一个固定批。

    各情形轮流跑 `rounds` 轮（机器的负载随时间变化，交替进行让它对各情形的影响相近），全部单线程：

    - `trl_defaults`：`GRPOTrainer`，`trl_grpo_config` 再改回 TRL 1.16 的默认 `bf16=True`、`gradient_checkpointing=True`；
    - `trl_bf16_only`、`trl_checkpointing_only`：只改回其中一项；
    - `trl_float32`：`GRPOTrainer`，`trl_grpo_config` 本身（`bf16=False`、`gradient_checkpointing=False`）；
    - `ours`：第 9 章的 `train_grpo`，一次一步；
    - `qwen2_forward_backward`、`ours_forward_backward`：两个模型本身（不经训练器、float32）在同一批提示词与回答上
      算回答 token 的对数概率之和并反向传播一次；
    - `qwen2_fused_head_forward_backward`：同上，但模型像 `GRPOTrainer` 那样装上 TRL 的融合输出头
      （`add_fused_lm_head`，同时算对数概率与熵）；
    - `qwen2_generate`、`ours_sample`：两个模型在同一批提示词上各采样 G 个回答（温度 1，不算梯度）。

    TRL 情形每轮从 `init_from` 重新载入同一个热启动模型、新建训练器，在新抽的 `steps` 批提示词上训练 `steps` 步；
    本书的模型是第 9 章的热启动，`train_grpo` 每步自己抽提示词。
    每轮的第一步不计（包含惰性初始化），其余各步的秒数合在一起取中位数与平均数。

    Args:
        init_from: `sft_warm_start` 的模型存放的目录。
        rounds: 轮数。
        steps: 每轮每种情形的步数（≥ 2）。
        seed: 随机种子。

    Returns:
        `seconds`（每种情形每步秒数的中位数）、`means`（平均数）、`samples`（计入的步数）、`loadavg_before`、
        `loadavg_after`（`os.getloadavg()` 的三个数：过去 1、5、15 分钟的平均负载）。
    """
    from transformers import Qwen2ForCausalLM
    from trl import GRPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    from rlhf_toy._threads import single_thread
    from rlhf_toy.demos.tiny_lm import warm_start
    from rlhf_toy.integrations.trl import make_tokenizer, prompt_dataset, prompt_texts, reward_function, trl_grpo_config
    from rlhf_toy.train.grpo import train_grpo

    if steps < 2:
        raise ValueError(f"steps 应 ≥ 2（每轮第一步不计），实际是 {steps}")
    loadavg_before = list(os.getloadavg())
    with single_thread():
        task, policy = warm_start(seed)
        tokenizer = make_tokenizer()
        config = grpo_config(steps=steps, max_completion_length=task.max_completion_length)
        ours_config = grpo_config(quick=True, steps=1, max_completion_length=task.max_completion_length)
        G = config.num_generations

        problems = task.draw(task.batch_size).repeat_interleave(G, dim=0)
        prompts = task.encode_prompts(problems)
        group_prompts = task.encode_prompts(problems[::G])
        completions, _ = policy.sample(group_prompts, G)
        batch = tokenizer(prompt_texts(problems), return_tensors="pt", padding=True, add_special_tokens=False)
        group_batch = tokenizer(
            prompt_texts(problems[::G]), return_tensors="pt", padding=True, add_special_tokens=False
        )
        prompt_length = batch["input_ids"].shape[1]
        input_ids = torch.cat([batch["input_ids"], completions], dim=1)
        attention_mask = torch.cat([batch["attention_mask"], torch.ones_like(completions)], dim=1)
        labels = input_ids.clone()
        labels[:, :prompt_length] = -100
        qwen2 = Qwen2ForCausalLM.from_pretrained(init_from)
        qwen2.train()
        fused = Qwen2ForCausalLM.from_pretrained(init_from)
        fused.train()
        add_fused_lm_head(fused, outputs=("log_probs", "entropy"))  # 与 GRPOTrainer.__init__ 相同的调用

        def trl_steps(**flags) -> list[float]:
            args = trl_grpo_config(
                config, task, output_dir=tempfile.mkdtemp(prefix="rlhf_toy_speed_"), seed=seed, **flags
            )
            timer, seconds = _step_timer()
            trainer = _quiet(
                GRPOTrainer(
                    model=Qwen2ForCausalLM.from_pretrained(init_from),
                    reward_funcs=reward_function(task),
                    args=args,
                    train_dataset=prompt_dataset(task.draw(steps * task.batch_size)),
                    processing_class=tokenizer,
                    callbacks=[timer],
                )
            )
            trainer.train()
            return seconds

        def timed(step) -> list[float]:
            seconds = []
            for _ in range(steps):
                start = time.perf_counter()
                step()
                seconds.append(time.perf_counter() - start)
            return seconds

        def qwen2_step():
            logits = qwen2(input_ids=input_ids, attention_mask=attention_mask).logits[:, prompt_length - 1 : -1]
            logits.log_softmax(-1).gather(-1, completions.unsqueeze(-1)).sum().backward()
            qwen2.zero_grad()

        def fused_step():
            out = fused(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
            out.log_probs.sum().backward()
            fused.zero_grad()

        def ours_model_step():
            policy.logps(prompts, completions).sum().backward()
            policy.zero_grad()

        @torch.no_grad()
        def qwen2_generate():
            qwen2.generate(
                **group_batch,
                max_new_tokens=task.max_completion_length,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                num_return_sequences=G,
            )

        @torch.no_grad()
        def ours_sample():
            policy.sample(group_prompts, G)

        cases = {
            "trl_defaults": lambda: trl_steps(bf16=True, gradient_checkpointing=True),
            "trl_bf16_only": lambda: trl_steps(bf16=True),
            "trl_checkpointing_only": lambda: trl_steps(gradient_checkpointing=True),
            "trl_float32": lambda: trl_steps(),
            "ours": lambda: timed(lambda: train_grpo(policy, task, ours_config)),
            "qwen2_forward_backward": lambda: timed(qwen2_step),
            "qwen2_fused_head_forward_backward": lambda: timed(fused_step),
            "ours_forward_backward": lambda: timed(ours_model_step),
            "qwen2_generate": lambda: timed(qwen2_generate),
            "ours_sample": lambda: timed(ours_sample),
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, run in cases.items():
                samples[name] += run()[1:]
    return {
        "seconds": {name: _median(values) for name, values in samples.items()},
        "means": {name: sum(values) / len(values) for name, values in samples.items()},
        "samples": {name: len(values) for name, values in samples.items()},
        "loadavg_before": loadavg_before,
        "loadavg_after": list(os.getloadavg()),
    }


def bf16_instruction_set_control(rounds: int = 8) -> dict:
    """bf16 自动类型转换与 float32 的前向加反向传播，在本进程的指令集设置下交替计时（单线程）。

    `scripts/run_trl.py` 在两个子进程里调用它：一个用本书的设置（`numerics.env`：ATen 与 oneDNN 限于 AVX2，
    MKL 在 COMPATIBLE 分支上），一个只放开 ATen 与 oneDNN（`UNPINNED_ISA`；`MKL_CBWR` 仍是 COMPATIBLE，
    float32 的矩阵乘法因此没有放开）。模型是随机初始化的 `make_model()`，批是 32 个提示词 × 8 个长 4 的随机回答（形状与 GRPO 的一步相同）。

    Args:
        rounds: 轮数；每轮 float32 与 bf16 各一次，第一轮不计。

    Returns:
        `capability`（`torch.backends.cpu.get_cpu_capability()`）、`float32`、`bf16`（每次秒数的平均数）、`samples`。
    """
    from rlhf_toy._threads import single_thread
    from rlhf_toy.integrations.trl import make_model, make_tokenizer, prompt_texts

    with single_thread():
        task, tokenizer, model = AdditionTask(seed=0, balanced=True), make_tokenizer(), make_model(seed=0)
        model.train()
        problems = task.draw(32).repeat_interleave(8, dim=0)
        batch = tokenizer(prompt_texts(problems), return_tensors="pt", padding=True, add_special_tokens=False)
        completions = torch.randint(3, 16, (len(problems), task.max_completion_length), generator=task.generator)
        prompt_length = batch["input_ids"].shape[1]
        input_ids = torch.cat([batch["input_ids"], completions], dim=1)
        attention_mask = torch.cat([batch["attention_mask"], torch.ones_like(completions)], dim=1)

        def step(bf16: bool) -> float:
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, prompt_length - 1 : -1]
                logps = logits.float().log_softmax(-1).gather(-1, completions.unsqueeze(-1)).sum()
            logps.backward()
            model.zero_grad()
            return time.perf_counter() - start

        seconds: dict[str, list[float]] = {"float32": [], "bf16": []}
        for r in range(rounds):
            for name in seconds:
                elapsed = step(name == "bf16")
                if r:
                    seconds[name].append(elapsed)
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        **{name: sum(values) / len(values) for name, values in seconds.items()},
        "samples": rounds - 1,
    }


@torch.no_grad()
def sampling_and_balance(model, tokenizer, task: AdditionTask, n_draws: int = 2048, num_generations: int = 8) -> dict:
    """GRPO 开始时的正确率，分开两个差别：温度 1 采样对贪心解码，按题型均衡抽的训练题对留出集。

    Args:
        model: SFT 热启动之后的模型（GRPO 的起点）。
        tokenizer: `make_tokenizer()`。
        task: 任务（`balanced=True`）；从它抽 `n_draws` 道训练题（推进它的随机数生成器）。
        n_draws: 均衡抽的训练题数。
        num_generations: 采样时每道题几个回答（温度 1，与 GRPO 相同）。

    Returns:
        `heldout_greedy`、`heldout_sampled`、`balanced_greedy`、`balanced_sampled`：正确率（采样时是所有回答的平均奖励）。
    """
    from rlhf_toy.integrations.trl import greedy_accuracy, prompt_texts, reward_function

    reward = reward_function(task)

    def sampled(problems) -> float:
        batch = tokenizer(prompt_texts(problems), return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(
            **batch,
            max_new_tokens=task.max_completion_length,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            num_return_sequences=num_generations,
        )
        a, b = problems.repeat_interleave(num_generations, dim=0).T.tolist()
        rewards = reward(completion_ids=out[:, batch["input_ids"].shape[1] :].tolist(), a=a, b=b)
        return sum(rewards) / len(rewards)

    was_training = model.training
    model.eval()
    balanced = task.draw(n_draws)
    result = {
        "heldout_greedy": greedy_accuracy(model, tokenizer, task),
        "heldout_sampled": sampled(task.heldout),
        "balanced_greedy": greedy_accuracy(model, tokenizer, task, balanced),
        "balanced_sampled": sampled(balanced),
    }
    model.train(was_training)
    return result


def time_grpo_parts(trainer) -> dict[str, float]:
    """给 `GRPOTrainer` 的几个方法各包一层计时，训练中累加秒数；训练后交给 `step_breakdown`。

    Args:
        trainer: 还没开始训练的 `trl.GRPOTrainer`。

    Returns:
        `{方法名: 累计秒数}`，方法是 `_generate`、`_calculate_rewards`、`_generate_and_score_completions`、
        `compute_loss`、`training_step`（训练过程中不断增长）。
    """
    seconds = dict.fromkeys(
        ["_generate", "_calculate_rewards", "_generate_and_score_completions", "compute_loss", "training_step"], 0.0
    )
    for name in seconds:
        method = getattr(trainer, name)

        def timed(*args, _method=method, _name=name, **kwargs):
            start = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                seconds[_name] += time.perf_counter() - start

        setattr(trainer, name, timed)
    return seconds


# --8<-- [start:step_breakdown]
def step_breakdown(seconds: dict[str, float], total: float, steps: int) -> dict[str, float]:
    """一步的时间花在哪（每步平均秒数）。

    一步（`on_step_begin` 到 `on_step_end`）= `training_step`（生成、打分、算优势；再前向算损失、反向传播）+ 梯度范数
    上限的缩放与优化器一步。取批次在 `on_step_begin` 之前，日志（连同其中损失的 `gather`）在 `on_step_end` 之后
    （transformers 5.24.0 `Trainer` 的内循环），都不在计时之内，所以按它算的每步耗时是下限。多进程时，进程间的同步几乎都落在前面几部分里：DDP 对梯度的 all-reduce 发生在 `loss.backward()` 里，
    计入`反向传播`；奖励的 `gather` 在 `_calculate_rewards` 里，计入`打分`；回答长度的 `gather` 计入`生成`，
    `num_items_in_batch` 的 `gather` 计入`其余准备`，指标的 `gather` 计入`前向与损失`。

    Args:
        seconds: `time_grpo_parts` 累加的秒数。
        total: 全部步的总秒数（`on_step_begin` 到 `on_step_end`）。
        steps: 步数。

    Returns:
        `生成`（含提示词的分词与回答的解码）、`打分`、`其余准备`（拼接、优势）、`前向与损失`、`反向传播`、
        `其余`（梯度范数上限的缩放、优化器一步）。
    """
    scoring = seconds["_generate_and_score_completions"]
    parts = {
        "生成": seconds["_generate"],
        "打分": seconds["_calculate_rewards"],
        "其余准备": scoring - seconds["_generate"] - seconds["_calculate_rewards"],
        "前向与损失": seconds["compute_loss"],
        "反向传播": seconds["training_step"] - scoring - seconds["compute_loss"],
        "其余": total - seconds["training_step"],
    }
    return {k: v / steps for k, v in parts.items()}


# --8<-- [end:step_breakdown]


def run_trl_sft(seed: int = 0, quick: bool = False) -> dict:
    """只跑 `SFTTrainer` 热启动，打印每次检查时训练题上的贪心正确率与留出集正确率。

    Args:
        seed: 随机种子。
        quick: 只跑几步。

    Returns:
        `sft_warm_start` 的信息，另有 `accuracy`（留出集贪心正确率）。
    """
    from rlhf_toy.integrations.trl import greedy_accuracy

    task = AdditionTask(seed=seed, balanced=True)
    model, tokenizer, info = sft_warm_start(task, quick=quick, seed=seed)
    info["accuracy"] = greedy_accuracy(model, tokenizer, task)
    for step, accuracy in info["train_accuracy"]:
        _say(f"step {step:4d}  训练题贪心正确率 {accuracy:.3f}")
    _say(f"SFT {info['steps']} 步，{info['seconds']:.1f} 秒；留出集贪心正确率 {info['accuracy']:.3f}")
    return info


@torch.no_grad()
def preference_dataset(
    model, tokenizer, task: AdditionTask, n_prompts: int, num_generations: int = 8, answer_if_none: bool = False
):
    """用模型自己的样本造偏好对（第 9 章 `preference_pairs_from_samples` 的同一规则）：答对的 ≻ 答错的，各取第一个。

    Args:
        model: 采样用的模型（SFT 之后，也是 DPO 的参考模型）。
        tokenizer: `make_tokenizer()`。
        task: 任务。
        n_prompts: 抽多少个训练提示词；组内全对或全错的被跳过。
        num_generations: 每个提示词采样几个回答（温度 1）。
        answer_if_none: 组内一个都没答对时，用正确答案当 `chosen`（只给快速版用：几步 SFT 的模型还答不对题）。

    Returns:
        `datasets.Dataset`，列 `prompt`、`chosen`、`rejected`（回答文本，含 `<eos>`）。
    """
    from datasets import Dataset

    from rlhf_toy.integrations.trl import prompt_texts, reward_function

    problems = task.draw(n_prompts)
    batch = tokenizer(prompt_texts(problems), return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(
        **batch,
        max_new_tokens=task.max_completion_length,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        num_return_sequences=num_generations,
    )
    completions = out[:, batch["input_ids"].shape[1] :]
    a, b = problems.repeat_interleave(num_generations, dim=0).T.tolist()
    correct = torch.tensor(reward_function(task)(completion_ids=completions.tolist(), a=a, b=b)).view(n_prompts, -1)
    texts = tokenizer.batch_decode(completions, skip_special_tokens=False)
    rows = {"prompt": [], "chosen": [], "rejected": []}
    texts = [t.replace(tokenizer.pad_token, "") for t in texts]
    for i, (prompt, (x, y)) in enumerate(zip(prompt_texts(problems), problems.tolist(), strict=True)):
        group = texts[i * num_generations : (i + 1) * num_generations]
        n_right = int(correct[i].sum())
        if n_right == num_generations or (n_right == 0 and not answer_if_none):
            continue
        chosen = group[int(correct[i].argmax())] if n_right else f"{x + y}{tokenizer.eos_token}"
        rows["prompt"].append(prompt)
        rows["chosen"].append(chosen)
        rows["rejected"].append(group[int((1 - correct[i]).argmax())])
    return Dataset.from_dict(rows)


def run_trl_dpo(seed: int = 0, quick: bool = False, init_from: str | None = None) -> dict:
    """SFT 热启动之后，用模型自己的样本造偏好对，跑 `trl.DPOTrainer`（`loss_type=["sigmoid"]`、`beta=0.1`）。

    Args:
        seed: 随机种子。
        quick: 只跑几步。
        init_from: 见 `sft_warm_start`。

    Returns:
        `accuracy_before`、`accuracy_after`、`pairs`（偏好对数）、`logs`（TRL 的日志：`rewards/margins` 等）。
    """
    from trl import DPOConfig, DPOTrainer

    from rlhf_toy.integrations.trl import greedy_accuracy

    spec = DPO_QUICK if quick else DPO_FULL
    task = AdditionTask(seed=seed, balanced=True)
    model, tokenizer, sft = sft_warm_start(task, quick=quick, seed=seed, init_from=init_from)
    if not model.config._name_or_path:  # DPOTrainer reloads its reference model from this path (TRL 1.16)
        from transformers import Qwen2ForCausalLM

        path = tempfile.mkdtemp(prefix="rlhf_toy_ref_")
        model.save_pretrained(path)
        model = Qwen2ForCausalLM.from_pretrained(path)
    before = greedy_accuracy(model, tokenizer, task)
    pairs = preference_dataset(model, tokenizer, task, spec["n_prompts"], answer_if_none=quick)
    args = DPOConfig(
        output_dir=tempfile.mkdtemp(prefix="rlhf_toy_dpo_"),
        beta=spec["beta"],
        loss_type=["sigmoid"],
        learning_rate=spec["learning_rate"],
        max_steps=spec["max_steps"],
        per_device_train_batch_size=32,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        use_cpu=True,
        bf16=False,  # TRL 1.16 默认 True：CPU 上每次前向都包进 bf16 autocast；本书全程 float32
        gradient_checkpointing=False,  # TRL 1.16 默认 True
        report_to="none",
        save_strategy="no",
        logging_steps=10 if not quick else 1,
        disable_tqdm=True,
        seed=seed,
    )
    trainer = _quiet(DPOTrainer(model=model, args=args, train_dataset=pairs, processing_class=tokenizer))
    trainer.train()
    result = {
        "accuracy_before": before,
        "accuracy_after": greedy_accuracy(trainer.model, tokenizer, task),
        "pairs": len(pairs),
        "logs": [h for h in trainer.state.log_history if "loss" in h],
        "sft": sft,
    }
    _say(f"TRL DPO：{result['pairs']} 个偏好对（答对 ≻ 答错），beta={spec['beta']}，{spec['max_steps']} 步")
    _say(f"留出集贪心正确率：SFT 之后 {before:.3f} → DPO 之后 {result['accuracy_after']:.3f}")
    return result


RUNS = {"sft": run_trl_sft, "grpo": run_trl_grpo, "dpo": run_trl_dpo}


def launch(phase: str, quick: bool, processes: int, seed: int = 0, init_from: str | None = None) -> int:
    """用 `accelerate launch` 在 CPU 上启动 `processes` 个进程跑 `python -m rlhf_toy trl PHASE`。

    必须写 `--multi_gpu`：`accelerate launch --num_processes 2 --cpu` 只会启动一个进程，也不报错。
    配置里的 `use_cpu=True` 让多进程落到 CPU 上（`DistributedType.MULTI_CPU`，gloo 后端）。

    Args:
        phase: `"sft"`、`"grpo"` 或 `"dpo"`。
        quick: 是否只跑几步。
        processes: 进程数。
        seed: 随机种子。
        init_from: 见 `sft_warm_start`。

    Returns:
        子进程的退出码。
    """
    accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or "accelerate"
    command = [
        accelerate,
        "launch",
        "--multi_gpu",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "rlhf_toy",
        "trl",
        phase,
        "--seed",
        str(seed),
        *(["--quick"] if quick else []),
        *(["--init-from", init_from] if init_from else []),
    ]
    return subprocess.run(command, check=False).returncode


def run_trl(
    seed: int = 0, quick: bool = False, phase: str = "grpo", processes: int = 1, init_from: str | None = None
) -> dict | None:
    """命令行 `python -m rlhf_toy trl {sft,grpo,dpo} [--quick] [--processes N]` 的入口。

    Args:
        seed: 随机种子。
        quick: 是否只跑几步。
        phase: 阶段。
        processes: 进程数；大于 1 且本进程不是由启动器启动的时，用 `launch` 重新启动自己。
        init_from: 只用于 `grpo`、`dpo`，见 `sft_warm_start`。

    Returns:
        单进程时是所选阶段的指标；由本函数启动多进程时返回 `None`（结果由子进程打印）。

    Raises:
        ValueError: `phase` 未知或 `processes < 1`。
        RuntimeError: 多进程启动失败。
    """
    if phase not in RUNS:
        raise ValueError(f"未知的 phase={phase!r}；可选：{', '.join(RUNS)}")
    if processes < 1:
        raise ValueError(f"processes 应 ≥ 1，实际是 {processes}")
    if processes > 1 and "WORLD_SIZE" not in os.environ:
        code = launch(phase, quick, processes, seed, init_from)
        if code:
            raise RuntimeError(f"accelerate launch 退出码 {code}")
        return None
    extra = {"init_from": init_from} if init_from else {}
    return RUNS[phase](seed=seed, quick=quick, **extra)
