r"""从一个目录载入模型与分词器，交给 TRL 的 `GRPOTrainer`（第 13 章“把它们放在一起”）。

读者自己的第一行代码是 `from_pretrained(path)`。本书的运行从不下载模型，所以这里先把一个极小模型存成目录：

* `make_chat_model`：随机初始化的极小 `Qwen2ForCausalLM`，词表是第 13 章字节级 BPE 分词器的词表；
* `save_tiny_checkpoint`：训练分词器、建模型、在几道题的写好的回答上做几十步 SFT（让奖励不全是 0），
  再把模型与分词器（连同对话模板）`save_pretrained` 到同一个目录；
* `build_grpo_trainer`：`AutoModelForCausalLM.from_pretrained(path)`、`AutoTokenizer.from_pretrained(path)`，
  对话格式的数据集、`chat_reward`、`lora_config()`，组装成 `GRPOTrainer`。
  它只适合演示：`cpu=False` 只是不强制 CPU 与 float32，仍不存检查点；真实运行从第 6 章清单的起步配置写自己的 `GRPOConfig`。

需要 TRL 1.16、transformers、peft；只在装了它们时导入本模块。
"""

from __future__ import annotations

# --8<-- [start:imports]
import tempfile
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    PrinterCallback,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from trl import GRPOConfig, GRPOTrainer

from rlhf_toy.integrations.chat import (
    chat_prompt_dataset,
    chat_reward,
    conversation,
    prompt_completion_ids,
    train_chat_tokenizer,
    worked_answer,
)
from rlhf_toy.integrations.lora import lora_config
from rlhf_toy.tasks.addition import AdditionTask

# --8<-- [end:imports]


def _check_inputs(problems: torch.Tensor, num_generations: int = 2) -> None:
    """`problems` 要是 `(P, 2)`，`num_generations` 要 ≥ 2；否则抛 `ValueError`，写出参数名与形状。"""
    if problems.ndim != 2 or problems.shape[1] != 2:
        raise ValueError(f"problems 的形状是 {tuple(problems.shape)}，期望 (P, 2)")
    if num_generations < 2:
        raise ValueError(f"num_generations 应 ≥ 2（组内至少两个回答才有相对优势），实际是 {num_generations}")


def make_chat_model(
    tokenizer: PreTrainedTokenizerFast, d_model: int = 48, n_layers: int = 2, n_heads: int = 4, seed: int = 0
) -> Qwen2ForCausalLM:
    """随机初始化的极小 `Qwen2ForCausalLM`，词表与 `tokenizer` 相同（结构同第 10 章的 `make_model`）。

    Args:
        tokenizer: `train_chat_tokenizer` 的分词器（决定词表大小与 `pad`/`eos` 的编号）。
        d_model: 隐藏维度。
        n_layers: 层数。
        n_heads: 注意力头数（键值头数相同）。
        seed: 初始化用的随机种子（设置全局随机数生成器）。

    Returns:
        模型；`generation_config` 已设好 `pad`/`eos` 的编号（EOS 是回合结束符 `<|im_end|>`）。
    """
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=d_model,
        intermediate_size=4 * d_model,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        max_position_embeddings=tokenizer.model_max_length,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


def sft_on_worked_answers(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    problems: torch.Tensor,
    steps: int,
    learning_rate: float = 3e-3,
) -> list[float]:
    """在 `problems` 的写好的回答（`worked_answer`）上做 `steps` 步全批 SFT，损失只算回答与回合结束符。

    掩码与 `prompt_completion_ids` 相同：提示词（含生成提示）不计入，回答和结束它的 `<|im_end|>` 计入。
    优化器是 `AdamW(fused=True)`，不做权重衰减。

    Args:
        model: 要训练的模型（原地训练）。
        tokenizer: 带对话模板的分词器。
        problems: 形状 `(P, 2)` 的整数张量。
        steps: 优化步数（≥ 0）。
        learning_rate: 学习率。

    Returns:
        每步的平均 token 交叉熵（nat），长 `steps`。

    Raises:
        ValueError: `problems` 不是 `(P, 2)`，或 `steps < 0`。
    """
    _check_inputs(problems)
    if steps < 0:
        raise ValueError(f"steps 应 ≥ 0，实际是 {steps}")
    rows = [prompt_completion_ids(tokenizer, conversation(a, b, worked_answer(a, b))) for a, b in problems.tolist()]
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows])  # 右填充
    mask = torch.tensor([m + [0] * (width - len(m)) for _, m in rows], dtype=torch.float32)
    attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0, fused=True)
    model.train()
    losses = []
    for _ in range(steps):
        logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), input_ids[:, 1:], reduction="none")
        loss = (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def save_tiny_checkpoint(path: str, task: AdditionTask, problems: torch.Tensor, sft_steps: int = 60) -> str:
    """建一个极小的对话模型，在 `problems` 上 SFT `sft_steps` 步，把模型与分词器存进目录 `path`。

    分词器在 `task.train[:2000]` 的对话上训练（同第 13 章），对话模板随分词器一起存下
    （`AutoTokenizer.from_pretrained(path)` 载入后仍有 `chat_template`）。
    模型的 `model_type` 是 `qwen2`，transformers 5.24 的 `AutoTokenizer` 对这样的目录总是载入 `Qwen2Tokenizer`：
    词表与合并规则不变，预分词换成 Qwen2 的规则（数字一位一个 token）。所以 SFT 用的是存下再载入的分词器，
    与 `build_grpo_trainer` 载入的相同。

    Args:
        path: 目录（不存在时创建）。
        task: 加法任务。
        problems: 形状 `(P, 2)` 的 SFT 题目（通常就是随后 GRPO 的题目）。
        sft_steps: SFT 步数；0 表示存下随机初始化的模型。

    Returns:
        `path`，可直接交给 `from_pretrained`。
    """
    tokenizer = train_chat_tokenizer(task.train[:2000])
    model = make_chat_model(tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    # 目录里的 config.json 写着 qwen2：transformers 5.24 的 AutoTokenizer 于是载入 Qwen2Tokenizer，
    # 按 Qwen2 的规则重新预分词（数字一位一个 token）。SFT 用载入后的分词器，与随后的 GRPO 切法相同。
    tokenizer = AutoTokenizer.from_pretrained(path)
    sft_on_worked_answers(model, tokenizer, problems, sft_steps)
    model.save_pretrained(path)
    return path


# --8<-- [start:build_grpo_trainer]
# 与第 10 章 `trl_grpo_config` 相同的 CPU 设置：全程 float32、不写检查点、不向任何服务报告、每步记一次日志
CPU_SETTINGS: dict[str, Any] = dict(
    use_cpu=True,
    bf16=False,
    gradient_checkpointing=False,
    report_to="none",
    save_strategy="no",
    logging_steps=1,
    disable_tqdm=True,
    seed=0,
)


def run_settings(cpu: bool = True) -> dict[str, Any]:
    """`GRPOConfig` 的运行设置：`cpu=True` 时是 `CPU_SETTINGS` 全部各项，False 时去掉 `use_cpu` 与 `bf16`。

    Args:
        cpu: 是否在 CPU 上用 float32 运行。

    Returns:
        一份新的字典，可用 `**` 展开交给 `GRPOConfig`。

    Raises:
        ValueError: `cpu` 不是 bool。
    """
    if not isinstance(cpu, bool):
        raise ValueError(f"cpu 应是 bool，实际是 {type(cpu).__name__}")
    if cpu:
        return dict(CPU_SETTINGS)
    return {k: v for k, v in CPU_SETTINGS.items() if k not in ("use_cpu", "bf16")}


def build_grpo_trainer(
    path: str,
    problems: torch.Tensor,
    num_generations: int = 4,
    max_steps: int = 2,  # 只为 CPU 演示；真实运行按任务定
    beta: float = 0.0,  # 第 6 章的建议：起步不加 KL 项
    learning_rate: float = 1e-3,  # 只为 CPU 演示的极小模型；真实模型见配方表
    max_completion_length: int = 24,  # 只为 CPU 演示；按任务的回答长度定
    cpu: bool = True,
) -> Any:
    """从目录 `path` 载入模型与分词器，组装只训练 LoRA 适配器的 `GRPOTrainer`（第 13 章的各部分放在一起）。

    每步 `P = len(problems)` 个提示词、每个生成 `G = num_generations` 个回答：TRL 1.16 的
    `per_device_train_batch_size` 按回答数计，所以是 `P * G`（单进程）。其余 GRPO 设置用 TRL 的默认值
    （`loss_type="dapo"`、`epsilon=0.2`、`num_iterations=1`、线性衰减的学习率），CPU 设置见 `CPU_SETTINGS`。
    β 默认取 0（第 6 章的建议）；学习率、回答长度、步数的默认值与 `chat_reward` 只为本书的 CPU 演示，真实运行要换掉。

    Args:
        path: 本地目录或模型中心的名字（例如 `"Qwen/Qwen2.5-1.5B-Instruct"`）；目录里要有模型与带对话模板的分词器。
        problems: 形状 `(P, 2)` 的整数张量：训练集的题目（数据集有 `prompt`、`a`、`b` 三列）。
        num_generations: 每个提示词的回答数 $G$（≥ 2）。
        max_steps: 优化步数。
        beta: KL 惩罚系数 $\beta$；默认 0，大于 0 时 TRL 才记录 `kl`。
        learning_rate: 学习率。
        max_completion_length: 回答的最大 token 数（写满就是超长截停）。
        cpu: True 时用 `CPU_SETTINGS` 全部各项（CPU、float32）；False 时去掉其中的 `use_cpu` 与 `bf16`，
            设备与精度用 TRL 的默认值（有 GPU 就用 GPU）。本书只跑 True。

    Returns:
        `trl.GRPOTrainer`；`trainer.model` 是装好 LoRA 适配器的 `PeftModel`，只有适配器的参数要训练。

    Raises:
        ValueError: `problems` 不是 `(P, 2)`，`num_generations < 2`，或 `cpu` 不是 bool。
    """
    _check_inputs(problems, num_generations)
    settings = run_settings(cpu)
    # 这一屏是 CPU 演示。真实运行（例如 `Qwen/Qwen2.5-1.5B-Instruct`）从第 6 章清单的起步配置写自己的 GRPOConfig：
    # cpu=False 只是不强制 CPU 与 float32，这里仍不存检查点、不开梯度检查点；奖励函数与数据集换成你的任务
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)  # 带着对话模板；EOS 应是回合结束符
    P, G = len(problems), num_generations  # 每步 P 个提示词，每个生成 G 个回答
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="rlhf_toy_run_"),
        per_device_train_batch_size=P * G,  # TRL 按回答数计批大小，不按提示词数
        num_generations=G,
        max_steps=max_steps,
        max_completion_length=max_completion_length,
        beta=beta,
        learning_rate=learning_rate,
        **settings,  # cpu=True 时与第 10 章相同：CPU、float32、不存检查点
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[chat_reward],  # 从 \boxed{} 里取答案，等于 a + b 时为 1
        train_dataset=chat_prompt_dataset(problems),  # prompt 列是消息列表，另有 a、b 两列
        peft_config=lora_config(),  # 只训练 LoRA；参考模型 = 关掉适配器的原模型
        processing_class=tokenizer,
        args=args,
    )
    trainer.remove_callback(PrinterCallback)  # 不逐条打印日志字典；日志都在 trainer.state.log_history 里
    return trainer


# --8<-- [end:build_grpo_trainer]
