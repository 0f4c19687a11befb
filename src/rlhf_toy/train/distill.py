r"""第 12 章的两个蒸馏训练循环：同策略蒸馏（学生采样、教师打分）与教师样本上的 SFT（正向 KL）。

两者用同一个学生初值、同一个优化器与学习率、同样的批大小与步数；唯一的差别是谁来**采样**：

* `train_onpolicy_distillation`：学生采 $y\sim\pi_\theta$，教师给每个 token 打分 $\log\pi_T(y_t)$，
  损失是 [`onpolicy_distillation_loss`][rlhf_toy.losses.distillation.onpolicy_distillation_loss]（逐 token 反向 KL，折扣 0）；
* `train_teacher_sft`：教师采 $y\sim\pi_T$，学生在上面做交叉熵（与 `train/sft.py` 的损失同一行），
  期望上就是正向 KL $\mathrm{KL}(\pi_T\|\pi_\theta)$ 加常数。

每步记录累计的采样 token 数 `sampled_tokens`（回答掩码之和，含 EOS）：(a) 里是学生的 token，(b) 里是教师的。
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.losses.distillation import divergence_loss, onpolicy_distillation_loss
from rlhf_toy.policies.transformer import TinyTransformerPolicy
from rlhf_toy.tasks.addition import AdditionTask
from rlhf_toy.tasks.teachers import ExactAdderTeacher

# --8<-- [end:imports]


@dataclass
class DistillConfig:
    """两个循环共用的超参数。

    Attributes:
        learning_rate: AdamW 学习率。
        steps: 梯度步数。
        batch_size: 每步的题数（每题采一个回答）。
        seed: 采样用的随机种子。
    """

    learning_rate: float = 3e-3
    steps: int = 200
    batch_size: int = 64
    seed: int = 0


# --8<-- [start:train_onpolicy_distillation]
def train_onpolicy_distillation(
    student: TinyTransformerPolicy,
    teacher: ExactAdderTeacher,
    task: AdditionTask,
    config: DistillConfig,
    evaluate: Callable | None = None,
    eval_every: int = 0,
    full_vocabulary: bool = False,
) -> list[dict[str, float]]:
    """同策略蒸馏：学生采样，教师打分，逐 token 反向 KL 的优势喂给 REINFORCE。

    `full_vocabulary=True` 是对照：同样在学生样本上，但每个位置用全词表的精确反向 KL
    （[`divergence_loss`][rlhf_toy.losses.distillation.divergence_loss]，`beta=1`，GKD / TRL `DistillationTrainer` 的做法），
    需要教师在每个位置给出整个分布，而不只是采到的那个 token 的对数概率。

    Args:
        student: 学生（原地更新）。
        teacher: 有 `logps(prompts, completions)` 的教师。
        task: 提供训练题（`draw`、`encode_prompts`）。
        config: 超参数。
        evaluate: 可选，`evaluate(student) -> dict`，每 `eval_every` 步、第 0 步与最后一步调用。
        eval_every: 评估间隔；0 表示只在第 0 步与最后一步评估。
        full_vocabulary: 是否改用全词表的精确反向 KL（见上）。

    Returns:
        每步一项 `{"step", "loss", "reverse_kl", "sampled_tokens", "teacher_tokens_scored"}`，评估步另含 `evaluate` 的键。
    """
    optimizer = torch.optim.AdamW(student.parameters(), lr=config.learning_rate, weight_decay=0.0, fused=True)
    generator = torch.Generator().manual_seed(config.seed)
    history = [{"step": 0, "sampled_tokens": 0, **(evaluate(student) if evaluate else {})}]
    tokens = 0
    for step in range(1, config.steps + 1):
        prompts = task.encode_prompts(task.draw(config.batch_size))
        completions, mask, _ = student.generate(prompts, generator=generator)  # 学生采样
        if full_vocabulary:  # 对照：每个位置整个词表上的精确反向 KL
            logits = student.completion_logits(prompts, completions) / student.temperature
            loss = divergence_loss(logits, teacher.log_probs(prompts, completions), mask, beta=1.0)
            metrics = {"reverse_kl": loss.item()}
        else:
            teacher_logps = teacher.logps(prompts, completions)  # 教师打分：一次前向，不生成
            logps = student.logps(prompts, completions)
            loss, metrics = onpolicy_distillation_loss(logps, teacher_logps, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        tokens += int(mask.sum())
        record = {
            "step": step,
            "loss": loss.item(),
            **metrics,
            "sampled_tokens": tokens,
            "teacher_tokens_scored": tokens,
        }
        if evaluate is not None and (step == config.steps or (eval_every and step % eval_every == 0)):
            record.update(evaluate(student))
        history.append(record)
    return history


# --8<-- [end:train_onpolicy_distillation]


# --8<-- [start:train_teacher_sft]
def train_teacher_sft(
    student: TinyTransformerPolicy,
    teacher: ExactAdderTeacher,
    task: AdditionTask,
    config: DistillConfig,
    evaluate: Callable | None = None,
    eval_every: int = 0,
) -> list[dict[str, float]]:
    """教师样本上的 SFT：教师采样，学生做交叉熵（期望上是正向 KL 加常数）。

    Args:
        student: 学生（原地更新）。
        teacher: 有 `generate(prompts, generator)` 的教师。
        task: 提供训练题。
        config: 超参数（与 `train_onpolicy_distillation` 相同）。
        evaluate: 同 `train_onpolicy_distillation`。
        eval_every: 同 `train_onpolicy_distillation`。

    Returns:
        每步一项 `{"step", "loss", "sampled_tokens"}`，评估步另含 `evaluate` 的键。
    """
    optimizer = torch.optim.AdamW(student.parameters(), lr=config.learning_rate, weight_decay=0.0, fused=True)
    generator = torch.Generator().manual_seed(config.seed)
    history = [{"step": 0, "sampled_tokens": 0, **(evaluate(student) if evaluate else {})}]
    tokens = 0
    for step in range(1, config.steps + 1):
        prompts = task.encode_prompts(task.draw(config.batch_size))
        completions, mask = teacher.generate(prompts, generator=generator)  # 教师采样
        logps = student.logps(prompts, completions, temperature=1.0)
        loss = -masked_mean(logps, mask)  # 与 train/sft.py 同一行
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        tokens += int(mask.sum())
        record = {"step": step, "loss": loss.item(), "sampled_tokens": tokens}
        if evaluate is not None and (step == config.steps or (eval_every and step % eval_every == 0)):
            record.update(evaluate(student))
        history.append(record)
    return history


# --8<-- [end:train_teacher_sft]
