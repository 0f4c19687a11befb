r"""把第 9 章的加法任务交给 TRL（第 10 章）：分词器、极小模型、数据集、奖励函数与配置。

本书的任务、题目划分和可验证奖励原样复用（`AdditionTask`），这里只做格式转换：

* 分词器：同一套 16 个字符级 token、同样的编号（`tokenizers` 的 `WordLevel`，一个字符一个 token）；
* 模型：transformers 的 `Qwen2ForCausalLM`，按配置随机初始化，参数量与第 9 章的 `TinyTransformerPolicy` 相近但不相等
  （两个数打印在第 10 章“搭桥”一节；两层、隐藏维度 48；结构不同：RMSNorm、SwiGLU、RoPE）；不从模型中心下载任何东西；
* 数据：内存里的 `datasets.Dataset`，提示词是 `"<bos>23+58="` 这样的字符串，另带 `a`、`b` 两列；
* 奖励：`reward_function(task)` 把 TRL 交来的 `completion_ids` 还原成张量，调用第 9 章的 `AdditionTask.reward`，
  同一段代码，不是复制。

需要 TRL 1.16（及 transformers、datasets、tokenizers）；只在装了它们时导入本模块。
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from rlhf_toy.tasks.addition import BOS, EOS, PAD, VOCAB, AdditionTask
from rlhf_toy.train.grpo import GRPOConfig


# --8<-- [start:tokenizer]
def make_tokenizer() -> PreTrainedTokenizerFast:
    """字符级分词器：与 `rlhf_toy.tasks.addition.VOCAB` 同样的 token 与编号，左填充（生成时提示词右对齐）。

    Returns:
        `PreTrainedTokenizerFast`，`pad`/`bos`/`eos` 分别是 `<pad>`、`<bos>`、`<eos>`（编号 0、1、2）。

    Examples:
        >>> tok = make_tokenizer()
        >>> tok("<bos>23+58=", add_special_tokens=False)["input_ids"]
        [1, 5, 6, 13, 8, 11, 14]
    """
    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # 一个字符一个 token
    tokenizer.decoder = decoders.Fuse()  # 解码时 token 之间不加空格
    tokenizer.add_special_tokens([VOCAB[PAD], VOCAB[BOS], VOCAB[EOS]])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=VOCAB[PAD],
        bos_token=VOCAB[BOS],
        eos_token=VOCAB[EOS],
        unk_token=VOCAB[PAD],
        padding_side="left",
        model_max_length=32,
    )


# --8<-- [end:tokenizer]


# --8<-- [start:model]
def make_model(d_model: int = 48, n_layers: int = 2, n_heads: int = 4, seed: int = 0) -> Qwen2ForCausalLM:
    """随机初始化的极小 `Qwen2ForCausalLM`（约 7.6 万个参数），词表与 `make_tokenizer()` 相同。

    Args:
        d_model: 隐藏维度。
        n_layers: 层数。
        n_heads: 注意力头数（键值头数相同）。
        seed: 初始化用的随机种子（设置全局随机数生成器）。

    Returns:
        模型；`generation_config` 已设好 `pad`/`bos`/`eos` 的编号。
    """
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(VOCAB),
        hidden_size=d_model,
        intermediate_size=4 * d_model,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        max_position_embeddings=32,
        tie_word_embeddings=False,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = PAD
    model.generation_config.bos_token_id = BOS
    model.generation_config.eos_token_id = EOS
    return model


# --8<-- [end:model]


# --8<-- [start:data]
def prompt_texts(problems: torch.Tensor) -> list[str]:
    """`(a, b)` → 提示词字符串 `"<bos>a+b="`（与 `AdditionTask.encode_prompts` 的 token 相同）。

    Args:
        problems: 形状 `(P, 2)` 的整数张量。

    Returns:
        长 `P` 的字符串列表。
    """
    return [f"{VOCAB[BOS]}{a}+{b}=" for a, b in problems.tolist()]


def prompt_dataset(problems: torch.Tensor) -> Dataset:
    """GRPO 的训练集：`prompt` 列之外另带 `a`、`b` 两列（TRL 把多出的列原样传给奖励函数）。

    Args:
        problems: 形状 `(P, 2)` 的整数张量，例如 `task.train`。

    Returns:
        `datasets.Dataset`，列 `prompt`、`a`、`b`。
    """
    a, b = problems.T.tolist()
    return Dataset.from_dict({"prompt": prompt_texts(problems), "a": a, "b": b})


def sft_dataset(problems: torch.Tensor) -> Dataset:
    """SFT 的训练集（提示词—回答格式）：`SFTTrainer` 默认只在回答上算损失，与第 9 章的 `train_sft` 相同。

    Args:
        problems: 形状 `(P, 2)` 的整数张量。

    Returns:
        `datasets.Dataset`，列 `prompt`、`completion`（正确的和加 `<eos>`）。
    """
    return Dataset.from_dict(
        {
            "prompt": prompt_texts(problems),
            "completion": [f"{a + b}{VOCAB[EOS]}" for a, b in problems.tolist()],
        }
    )


# --8<-- [end:data]


# --8<-- [start:reward]
def completion_tensor(completion_ids: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """把 TRL 交来的回答 token（每条一个列表，长短不一）右填充成 `(B, width)` 的张量。

    Args:
        completion_ids: 每条回答的 token 编号；长于 `width` 的部分截掉。
        width: 宽度，通常是 `task.max_completion_length`。

    Returns:
        形状 `(B, width)` 的 int64 张量，填充为 `PAD`。
    """
    rows = [list(ids)[:width] + [PAD] * (width - min(len(ids), width)) for ids in completion_ids]
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), width)


def reward_function(task: AdditionTask) -> Callable[..., list[float]]:
    """把第 9 章的可验证奖励 `task.reward` 包成 TRL 的奖励函数。

    TRL 调用 `reward_func(prompts=..., completions=..., completion_ids=..., **数据集的其余列)`，要一个浮点列表。
    这里用数据集的 `a`、`b` 列重建提示词张量，把 `completion_ids` 还原成张量，交给 `task.reward`：
    回答恰好是正确的和、并以 EOS 结束时为 1.0，否则为 0.0。

    Args:
        task: 第 9 章的任务（决定回答的最大长度与是否有草稿区）。

    Returns:
        奖励函数，名字是 `addition_reward`（TRL 记为 `rewards/addition_reward/mean`）。

    Examples:
        >>> reward = reward_function(AdditionTask())
        >>> reward(prompts=None, completions=None, completion_ids=[[11, 4, 2], [11, 4]], a=[23, 23], b=[58, 58])
        [1.0, 0.0]
    """

    def addition_reward(completion_ids: Sequence[Sequence[int]], a: Sequence[int], b: Sequence[int], **kwargs: Any):
        prompts = task.encode_prompts(torch.tensor(list(zip(a, b, strict=True))).reshape(-1, 2))
        completions = completion_tensor(completion_ids, task.max_completion_length)
        return task.reward(prompts, completions).tolist()

    return addition_reward


# --8<-- [end:reward]


@torch.no_grad()
def greedy_accuracy(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    task: AdditionTask,
    problems: torch.Tensor | None = None,
) -> float:
    """贪心解码的正确率（默认在留出集上），奖励同 `reward_function`。

    Args:
        model: 要评估的模型（评估时切到 `eval()`，之后恢复原状态）。
        tokenizer: `make_tokenizer()`。
        task: 任务。
        problems: 形状 `(P, 2)` 的题目；`None` 表示 `task.heldout`。

    Returns:
        正确率，`[0, 1]` 内。
    """
    problems = task.heldout if problems is None else problems
    was_training = model.training
    model.eval()
    batch = tokenizer(prompt_texts(problems), return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**batch, max_new_tokens=task.max_completion_length, do_sample=False)
    completions = out[:, batch["input_ids"].shape[1] :]
    a, b = problems.T.tolist()
    rewards = reward_function(task)(completion_ids=completions.tolist(), a=a, b=b)
    model.train(was_training)
    return sum(rewards) / len(rewards)


# --8<-- [start:grpo_config]
def trl_grpo_config(config: GRPOConfig, task: AdditionTask, output_dir: str, **overrides: Any):
    """本书的 `GRPOConfig` → `trl.GRPOConfig`：同名字段一一对应，其余（温度、学习率调度、权重衰减）设成与第 9 章的循环相同；
    `max_grad_norm` 保留 transformers 的默认 1.0（第 9 章的循环不限制梯度范数）。

    对应关系：`num_generations`、`epsilon`、`epsilon_high`、`beta`、`learning_rate`、`num_iterations`、
    `scale_rewards`、`loss_type`、`importance_sampling_level` 同名同义；`steps` → `max_steps`；
    `max_completion_length` 为 `None` 时取 `task.max_completion_length`。另外固定：
    `per_device_train_batch_size = task.batch_size × num_generations`（每步 `task.batch_size` 个提示词，单进程），
    `use_bias_correction_kl=False`（本书的 `grpo_loss` 把未修正的 $k_3$ 放进损失；TRL 1.16 的默认是 `True`），
    `temperature=1.0`、常数学习率（`lr_scheduler_type="constant"`；transformers 的默认 `"linear"` 会在 `max_steps`
    步内把学习率线性降到 0）、不做权重衰减、在 CPU 上运行、不写检查点、不向任何服务报告。TRL 1.16 的配置改了 transformers
    的几个默认值（学习率、`logging_steps`、`bf16`、`gradient_checkpointing`，GRPO 还有 `remove_unused_columns`）：
    学习率与日志间隔在这里显式设定；`bf16=True`（CPU 上 accelerate 会把每次前向包进 bf16 autocast）和
    `gradient_checkpointing=True` 关掉，让 TRL 与第 9 章的循环一样全程 float32。没有改的：`max_grad_norm`
    （transformers 默认 1.0，更新前把梯度的全局范数限制在 1.0 以内），第 9 章的循环没有这一步。

    Args:
        config: 本书的配置（`dynamic_sampling` 在 TRL 里没有对应选项，必须为 `False`）。
        task: 任务（提示词数与回答长度）。
        output_dir: TRL 要求的输出目录（不写检查点，只是必填）。
        **overrides: 覆盖任意 `trl.GRPOConfig` 字段，例如两进程时的 `per_device_train_batch_size`。

    Returns:
        `trl.GRPOConfig`。

    Raises:
        ValueError: `config.dynamic_sampling` 为 `True`。
    """
    from trl import GRPOConfig as TRLGRPOConfig

    if config.dynamic_sampling:
        raise ValueError("dynamic_sampling=True 在 TRL 1.16 的 GRPOConfig 里没有对应选项")
    fields = dict(
        num_generations=config.num_generations,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        beta=config.beta,
        learning_rate=config.learning_rate,
        num_iterations=config.num_iterations,
        scale_rewards=config.scale_rewards,
        loss_type=config.loss_type,
        importance_sampling_level=config.importance_sampling_level,
        max_steps=config.steps,
        max_completion_length=config.max_completion_length or task.max_completion_length,
        per_device_train_batch_size=task.batch_size * config.num_generations,
        use_bias_correction_kl=False,
        temperature=1.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    return TRLGRPOConfig(**{**fields, **overrides})


# --8<-- [end:grpo_config]
