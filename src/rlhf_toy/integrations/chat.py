r"""真正的分词器与对话模板（第 13 章）：第 9、10 章的加法题写成对话，用字节级 BPE 分词。

第 10 章的分词器一个字符一个 token，提示词是 `"<bos>23+58="`。真实的对话模型不是这样：

* 分词器是字节级 BPE（byte-level BPE），从语料里学出合并规则，一个 token 常是好几个字符；
* 提示词是一段对话（`system`、`user` 两条消息），由分词器里的对话模板（Jinja）渲染成文本，
  末尾加上“生成提示”（`<|im_start|>assistant\n`），模型从这里接着写；
* 回答是一句话，答案写在 `\boxed{}` 里，以回合结束符 `<|im_end|>` 结束。

这里的分词器用 `tokenizers` 在本地、从任务自己的文本上训练（不下载任何东西），再包成 transformers 的
`PreTrainedTokenizerFast`。模板的格式照 ChatML（Qwen 系列用的格式）。
需要 transformers 与 tokenizers（第 10 章的对照库）；只在装了它们时导入本模块。
"""

from __future__ import annotations

# --8<-- [start:imports]
from collections.abc import Sequence

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rlhf_toy.tasks.answers import parse_answer

# --8<-- [end:imports]

# --8<-- [start:template]
PAD_TOKEN = "<|endoftext|>"  # 填充；也是基座模型常用的“文档结束”符
IM_START, IM_END = "<|im_start|>", "<|im_end|>"  # 一条消息的开头与结尾（回合结束符）
SYSTEM_PROMPT = "You add two numbers. Put the final answer in \\boxed{}."

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def conversation(a: int, b: int, answer: str | None = None) -> list[dict[str, str]]:
    r"""一道加法题写成对话：`system` 与 `user` 两条消息；给了 `answer` 时再加一条 `assistant` 消息。

    Args:
        a: 第一个加数。
        b: 第二个加数。
        answer: 助手的回答文本（例如 `"23 + 58 = 81. The answer is \\boxed{81}."`）；`None` 表示只有提示词。

    Returns:
        消息列表，每条是 `{"role": ..., "content": ...}`（TRL 所说的“对话格式”）。
    """
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"What is {a} + {b}?"},
    ]
    if answer is not None:
        messages.append({"role": "assistant", "content": answer})
    return messages


def worked_answer(a: int, b: int) -> str:
    r"""正确回答的一种写法：`"23 + 58 = 81. The answer is \\boxed{81}."`（训练分词器的语料与 SFT 数据用）。"""
    return f"{a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}."


# --8<-- [end:template]


# --8<-- [start:tokenizer]
def train_chat_tokenizer(
    problems: torch.Tensor, vocab_size: int = 400, eos_token: str = IM_END
) -> PreTrainedTokenizerFast:
    """在任务自己的对话文本上训练一个字节级 BPE，包成带对话模板的 `PreTrainedTokenizerFast`。

    语料是 `problems` 里每道题渲染好的完整对话（系统消息、问题、`worked_answer`）。
    字节级：先把文本变成字节，256 个字节各是一个初始 token，任何字符串都能编码，不会有未知 token；
    BPE 再把最常相邻的一对合并成新 token，直到词表有 `vocab_size` 个。

    Args:
        problems: 形状 `(P, 2)` 的整数张量（例如 `task.train[:2000]`）。
        vocab_size: 词表大小（含 256 个字节与 3 个特殊 token）。
        eos_token: 分词器的 EOS。默认是回合结束符 `<|im_end|>`（对话模型的做法）；
            第 13 章用 `"<|endoftext|>"` 演示“EOS 与回合结束符不一致”这个错误。

    Returns:
        分词器：`chat_template` 是 `CHAT_TEMPLATE`，`pad_token` 是 `<|endoftext|>`，左填充，没有 BOS。

    Raises:
        ValueError: `problems` 不是 `(P, 2)`，或 `eos_token` 不是两个特殊 token 之一。
    """
    if problems.ndim != 2 or problems.shape[1] != 2:
        raise ValueError(f"problems 的形状是 {tuple(problems.shape)}，期望 (P, 2)")
    if eos_token not in (IM_END, PAD_TOKEN):
        raise ValueError(f"eos_token 应是 {IM_END!r} 或 {PAD_TOKEN!r}，实际是 {eos_token!r}")
    corpus = [_render(conversation(a, b, worked_answer(a, b))) for a, b in problems.tolist()]  # 语料：完整的对话文本
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, IM_START, IM_END],  # 编号 0、1、2；特殊 token 不会被拆开
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=eos_token,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=128,
    )


# --8<-- [end:tokenizer]


def _render(messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """不经过分词器、直接按 ChatML 拼出模板文本（只用于生成训练语料；与 `CHAT_TEMPLATE` 的输出相同，有测试）。"""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


# --8<-- [start:completion_mask]
def prompt_completion_ids(
    tokenizer: PreTrainedTokenizerFast, messages: Sequence[dict[str, str]]
) -> tuple[list[int], list[int]]:
    """把以 `assistant` 消息结尾的对话切成提示词与回答的 token，回答的损失掩码为 1，其余为 0。

    提示词 = 前面的消息用模板渲染、`add_generation_prompt=True`（所以生成提示 `<|im_start|>assistant\\n` 在提示词里）；
    回答 = 助手消息的内容加上 EOS（回合结束符），与 GRPO 里模型生成、TRL 的 `completion_mask` 覆盖的部分相同。

    Args:
        tokenizer: `train_chat_tokenizer` 的分词器（或任何带对话模板的分词器）。
        messages: 对话，最后一条的 `role` 是 `"assistant"`。

    Returns:
        `(input_ids, mask)`：两个等长列表；`mask[i] = 1` 表示第 `i` 个 token 属于回答、计入损失。

    Raises:
        ValueError: 最后一条消息不是助手消息，或渲染后的提示词不是完整对话的前缀。
    """
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError("messages 的最后一条应是 assistant 消息")
    prompt = tokenizer.apply_chat_template(list(messages[:-1]), add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(list(messages), tokenize=False)
    if not full.startswith(prompt):
        raise ValueError("带生成提示的提示词不是完整对话的前缀：模板与生成提示不一致")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(messages[-1]["content"], add_special_tokens=False)["input_ids"]
    completion_ids = completion_ids + [tokenizer.eos_token_id]
    return prompt_ids + completion_ids, [0] * len(prompt_ids) + [1] * len(completion_ids)


# --8<-- [end:completion_mask]


# --8<-- [start:chat_data]
def chat_prompt_dataset(problems: torch.Tensor):
    """GRPO 的对话格式训练集：`prompt` 列是消息列表（`system`、`user`），另带 `a`、`b` 两列给奖励函数。

    Args:
        problems: 形状 `(P, 2)` 的整数张量。

    Returns:
        `datasets.Dataset`。
    """
    from datasets import Dataset

    a, b = problems.T.tolist()
    return Dataset.from_dict({"prompt": [conversation(x, y) for x, y in zip(a, b, strict=True)], "a": a, "b": b})


def chat_reward(completions: Sequence, a: Sequence[int], b: Sequence[int], **kwargs) -> list[float]:
    r"""TRL 的奖励函数（对话格式）：从助手消息的文本里取出答案（`parse_answer`），等于 `a + b` 时为 1.0。

    对话格式的数据集上，TRL 1.16 交给奖励函数的每条 `completions` 是一个消息列表，不是字符串。
    分词器没有 `response_template`、`response_schema`，也没有给 `tools` 时，它是
    `[{"role": "assistant", "content": 文本}]`（解码时去掉特殊 token）；否则是 `parse_response` 解析出的消息，
    可能还带 `tool_calls` 等字段。这里只读最后一条消息的 `content`，两种情况都适用。

    Args:
        completions: 每条回答的消息列表（或字符串：标准格式的数据集）。
        a: 第一个加数（数据集的 `a` 列）。
        b: 第二个加数。
        **kwargs: TRL 传来的其余参数，不使用。

    Returns:
        长度为 `B` 的浮点列表。
    """
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float(parse_answer(t) == x + y) for t, x, y in zip(texts, a, b, strict=True)]


# --8<-- [end:chat_data]
