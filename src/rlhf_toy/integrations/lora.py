r"""LoRA（低秩适配）与 TRL 的 `GRPOTrainer`（第 13 章）：只训练加在线性层旁边的两个小矩阵。

LoRA 把一个冻结的线性层 $W \in \mathbb{R}^{d_\text{out} \times d_\text{in}}$ 换成
$W + \frac{\alpha}{r} B A$，其中 $A \in \mathbb{R}^{r \times d_\text{in}}$、$B \in \mathbb{R}^{d_\text{out} \times r}$，
秩 $r$ 远小于 $d_\text{in}$、$d_\text{out}$；训练时只更新 $A$、$B$（Hu et al., 2021, 式 (3)）。
$B$ 初始化为 0，所以刚装上适配器时模型与原模型完全相同。

这里用 `peft` 的 `LoraConfig`，交给 TRL 1.16 的 `GRPOTrainer(peft_config=...)`，模型是第 10 章的极小 `Qwen2ForCausalLM`。
需要 peft（本书钉住 0.21.2）、TRL；只在装了它们时导入本模块。
"""

from __future__ import annotations

# --8<-- [start:imports]
import tempfile
import time
from typing import Any

import torch
from peft import LoraConfig

from rlhf_toy.integrations.trl import greedy_accuracy, prompt_dataset, reward_function, trl_grpo_config
from rlhf_toy.tasks.addition import AdditionTask
from rlhf_toy.train.grpo import GRPOConfig

# --8<-- [end:imports]

# --8<-- [start:lora_config]
# Qwen2 每层的七个线性层：注意力的四个投影与 MLP 的三个
LINEAR_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_config(r: int = 8, lora_alpha: int = 16, target_modules: tuple[str, ...] = LINEAR_LAYERS) -> LoraConfig:
    r"""本章的 `peft.LoraConfig`：每个目标线性层旁加秩为 `r` 的 $BA$，缩放 $\alpha / r$，不加 dropout、不训练偏置。

    Args:
        r: 秩。
        lora_alpha: 缩放分子 $\alpha$（有效缩放是 `lora_alpha / r`）。
        target_modules: 要加适配器的线性层名字（按名字结尾匹配）。

    Returns:
        `LoraConfig(task_type="CAUSAL_LM", ...)`。

    Raises:
        ValueError: `r < 1`。
    """
    if r < 1:
        raise ValueError(f"r 应 ≥ 1，实际是 {r}")
    return LoraConfig(
        task_type="CAUSAL_LM",
        r=r,
        lora_alpha=lora_alpha,
        target_modules=list(target_modules),
        lora_dropout=0.0,
        bias="none",
    )


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """`(要训练的参数个数, 参数总数)`：按 `requires_grad` 数，直接从模型读。

    Args:
        model: 任意 `torch.nn.Module`（装了适配器的 `PeftModel` 也一样）。

    Returns:
        两个整数。
    """
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


# --8<-- [end:lora_config]


# --8<-- [start:run_grpo]
def run_grpo(
    model: torch.nn.Module,
    tokenizer: Any,
    task: AdditionTask,
    config: GRPOConfig,
    peft_config: LoraConfig | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """用 TRL 的 `GRPOTrainer` 训练 `model`（`peft_config` 为 `None` 时全参数微调，否则只训练 LoRA 适配器）。

    配置由第 10 章的 `trl_grpo_config` 换算（同样的提示词、同样的步数、同样的种子）；两种训练只差 `peft_config`
    与 `config.learning_rate`。

    Args:
        model: 热启动之后的模型（会被原地训练；LoRA 时被包成 `PeftModel`）。
        tokenizer: 第 10 章的 `make_tokenizer()`。
        task: 加法任务（`task.batch_size` 是每步的提示词数）。
        config: 本书的 GRPO 配置。
        peft_config: LoRA 配置，或 `None`。
        seed: TRL 的随机种子。

    Returns:
        `accuracy_before`、`accuracy_after`（留出集贪心正确率）、`rewards`（每步平均奖励）、`trainable`、`total`
        （训练时数出的参数个数）、`seconds`，以及训练后的 `model`（LoRA 时是 `PeftModel`）。
    """
    from trl import GRPOTrainer

    before = greedy_accuracy(model, tokenizer, task)
    args = trl_grpo_config(config, task, output_dir=tempfile.mkdtemp(prefix="rlhf_toy_lora_"), seed=seed)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_function(task),
        args=args,
        train_dataset=prompt_dataset(task.draw(config.steps * task.batch_size)),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainable, total = count_parameters(trainer.model)
    start = time.perf_counter()
    trainer.train()
    return {
        "accuracy_before": before,
        "accuracy_after": greedy_accuracy(trainer.model, tokenizer, task),
        "rewards": [h["reward"] for h in trainer.state.log_history if "reward" in h],
        "trainable": trainable,
        "total": total,
        "seconds": time.perf_counter() - start,
        "model": trainer.model,
    }


# --8<-- [end:run_grpo]
