r"""训练一个 Qwen2 结构的模型要多少内存、一步 GRPO 要多少计算：按模型形状逐项数字节与浮点运算。

四项内存（Rajbhandari et al. 2020，ZeRO，[arXiv 1910.02054](https://arxiv.org/abs/1910.02054) §3.1 的记账法）：
权重、梯度、优化器状态（AdamW 的一阶、二阶矩；混合精度下另有 fp32 主权重），以及一个微批次的激活
（反向传播要用、前向时存下的张量）。前三项只看参数个数 $\Psi$；激活看批大小、序列长度与模型的每一层。

`activation_bytes` 数的是本仓库固定版本的 transformers 里 `Qwen2ForCausalLM` 在 CPU 上（SDPA 注意力，
不开梯度检查点）前向一次、再算逐 token 对数概率时 autograd 存下的张量；`tests/test_your_run_settings.py`
用 `torch.autograd.graph.saved_tensors_hooks` 逐字节核对。GPU 上的融合算子（FlashAttention、融合的 RMSNorm）
存的东西不同，通常更少。
"""

# --8<-- [start:imports]
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

# --8<-- [end:imports]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
# PyTorch FSDP 的分片策略与 ZeRO 的对应（torch.distributed.fsdp.ShardingStrategy 的文档）
FSDP_EQUIVALENT = {"NO_SHARD": "ddp", "SHARD_GRAD_OP": "zero2", "FULL_SHARD": "zero3"}


# --8<-- [start:model_shape]
@dataclass(frozen=True)
class ModelShape:
    """Qwen2 结构的形状，字段名同 transformers 的 `Qwen2Config`。

    Attributes:
        vocab_size: 词表大小 $V$。
        hidden_size: 隐藏维度 $h$。
        intermediate_size: MLP 中间维度 $i$（SwiGLU：gate、up、down 三个矩阵）。
        num_hidden_layers: 层数 $L$。
        num_attention_heads: 查询头数 $a$。
        num_key_value_heads: 键值头数 $a_{kv}$（分组查询注意力，GQA）。
        tie_word_embeddings: 输出层是否与词嵌入共用一个矩阵。
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    tie_word_embeddings: bool

    @property
    def head_dim(self) -> int:
        """每个头的维度 $h / a$。"""
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self) -> int:
        """键（或值）投影的输出维度 $a_{kv} \\cdot h / a$。"""
        return self.num_key_value_heads * self.head_dim


# --8<-- [end:model_shape]

# Qwen2.5 基座模型的 config.json（Hugging Face 上 Qwen/Qwen2.5-{0.5B,1.5B,7B,32B}，2024-09 发布的版本）
QWEN25_SOURCE = "config.json of Qwen/Qwen2.5-{0.5B,1.5B,7B,32B} on the Hugging Face Hub (Qwen2.5 release, 2024-09)"
QWEN25 = {
    "0.5B": ModelShape(151936, 896, 4864, 24, 14, 2, True),
    "1.5B": ModelShape(151936, 1536, 8960, 28, 12, 2, True),
    "7B": ModelShape(152064, 3584, 18944, 28, 28, 4, False),
    "32B": ModelShape(152064, 5120, 27648, 64, 40, 8, False),
}


# --8<-- [start:parameter_count]
def parameter_count(shape: ModelShape) -> int:
    r"""参数个数 $\Psi$：每层注意力（q、k、v 带偏置，o 不带）、SwiGLU MLP、两个 RMSNorm，加词嵌入、末层 RMSNorm 与输出层。

    Args:
        shape: 模型形状。

    Returns:
        参数个数（整数）。

    Examples:
        >>> parameter_count(QWEN25["0.5B"])
        494032768
    """
    h, i, kv = shape.hidden_size, shape.intermediate_size, shape.kv_dim
    attention = (h * h + h) + 2 * (h * kv + kv) + h * h  # q、k、v（带偏置）与 o
    mlp = 3 * h * i  # gate、up、down
    layer = attention + mlp + 2 * h  # 两个 RMSNorm 的权重
    embeddings = shape.vocab_size * h * (1 if shape.tie_word_embeddings else 2)
    return shape.num_hidden_layers * layer + embeddings + h


def parameter_tensors(shape: ModelShape) -> int:
    """参数张量的个数（融合的 AdamW 给每个参数张量存一个 fp32 的步数标量）。"""
    return shape.num_hidden_layers * 12 + 2 + (0 if shape.tie_word_embeddings else 1)


def lora_parameter_count(shape: ModelShape, rank: int) -> int:
    r"""LoRA 加在每层七个线性层（q、k、v、o、gate、up、down）上时的可训练参数个数 $\sum r\,(d_\text{in} + d_\text{out})$。

    Args:
        shape: 模型形状。
        rank: LoRA 的秩 $r$，正整数。

    Returns:
        可训练参数个数。

    Raises:
        ValueError: `rank` 不是正整数。
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank 应是正整数，实际是 {rank!r}")
    h, i, kv = shape.hidden_size, shape.intermediate_size, shape.kv_dim
    per_layer = (h + h) + 2 * (h + kv) + (h + h) + 2 * (h + i) + (i + h)
    return shape.num_hidden_layers * rank * per_layer


# --8<-- [end:parameter_count]


# --8<-- [start:activation_bytes]
def activation_bytes(shape: ModelShape, batch_size: int, seq_len: int, dtype: str = "bfloat16") -> int:
    r"""一个微批次（`batch_size` 条、每条 `seq_len` 个 token）前向时 autograd 存下的字节数。

    每层：两个 RMSNorm 各存一份 fp32 的输入、fp32 的 $1/\text{rms}$、归一化的结果与乘过权重的结果（后两个为 `dtype`）；
    注意力存旋转后的 q、k，v，输出与 fp32 的 logsumexp；MLP 存 gate、up 的输出、SiLU 的输出与送进 down 的乘积。
    全模型另有末层 RMSNorm、fp32 的 `log_softmax` 输出 $(B, S, V)$、int64 的输入 token 与各层共用的 cos、sin。
    `dtype="float32"` 时 RMSNorm 的 fp32 输入就是残差流本身，不另占空间，公式自动成立。

    Args:
        shape: 模型形状。
        batch_size: 微批次的序列数 $B$。
        seq_len: 每条序列的 token 数 $S$（提示词加回答）。
        dtype: 权重与计算的精度，`"float32"`、`"bfloat16"` 或 `"float16"`。

    Returns:
        字节数。

    Raises:
        ValueError: `dtype` 未知，或 `batch_size`、`seq_len` 不是正整数。
    """
    b = _dtype_bytes(dtype)
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} 应是正整数，实际是 {value!r}")
    tokens = batch_size * seq_len
    h, i, kv, a = shape.hidden_size, shape.intermediate_size, shape.kv_dim, shape.num_attention_heads
    rms_norm = tokens * h * (4 + 2 * b) + 4 * tokens
    attention = tokens * (2 * h + 2 * kv) * b + 4 * tokens * a  # q、输出、k、v；logsumexp
    mlp = 4 * tokens * i * b
    layer = 2 * rms_norm + attention + mlp
    head = rms_norm + 4 * tokens * shape.vocab_size + 8 * tokens  # 末层 RMSNorm、log_softmax、输入 token
    rotary = 2 * seq_len * shape.head_dim * b
    return shape.num_hidden_layers * layer + head + rotary


# --8<-- [end:activation_bytes]


# --8<-- [start:training_memory]
def training_memory(
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    dtype: str = "bfloat16",
    mixed_precision: bool = True,
    lora_rank: int | None = None,
) -> dict[str, int]:
    r"""用 AdamW 训练一个模型时单卡上的四项内存（字节），不分片。

    * 全参数、`mixed_precision=True`（ZeRO 论文 §3.1）：`dtype` 的权重与梯度各 $2\Psi$ 字节，fp32 主权重 $4\Psi$，
      fp32 的一阶、二阶矩 $8\Psi$；合计 $16\Psi$。
    * 全参数、`mixed_precision=False`：权重、梯度、两个矩都是 `dtype`（PyTorch 的 AdamW 按参数的 dtype 存矩）。
    * LoRA（`lora_rank=r`）：冻结的基座权重按 `dtype` 存，不要梯度与优化器状态；适配器的 $\Psi_\text{LoRA}$ 个参数
      按 fp32 训练（权重、梯度、两个矩），这是本函数的假设。
    * 优化器状态另含融合 AdamW 给每个可训练参数张量存的 fp32 步数（4 字节）。
    * 激活见 `activation_bytes`，LoRA 时取全参数的值（LoRA 不减少激活；适配器的 $(B, S, r)$ 中间量未计入）。

    Args:
        shape: 模型形状。
        batch_size: 微批次的序列数。
        seq_len: 每条序列的 token 数。
        dtype: `"float32"`、`"bfloat16"` 或 `"float16"`。
        mixed_precision: 是否另存 fp32 主权重并用 fp32 的优化器状态。
        lora_rank: `None` 表示全参数训练；正整数表示 LoRA 的秩。

    Returns:
        `weights`、`gradients`、`master_weights`、`optimizer_states`、`activations` 与 `total`（字节）。

    Raises:
        ValueError: `dtype` 未知、`lora_rank` 不是正整数，或 `activation_bytes` 的报错。
    """
    b = _dtype_bytes(dtype)
    n = parameter_count(shape)
    if lora_rank is None:
        trained, tensors, state_bytes = n, parameter_tensors(shape), 4 if mixed_precision else b
        out = {"weights": n * b, "gradients": n * b, "master_weights": n * 4 if mixed_precision else 0}
    else:
        trained, tensors, state_bytes = lora_parameter_count(shape, lora_rank), 14 * shape.num_hidden_layers, 4
        out = {"weights": n * b + trained * 4, "gradients": trained * 4, "master_weights": 0}
    out["optimizer_states"] = 2 * trained * state_bytes + 4 * tensors
    out["activations"] = activation_bytes(shape, batch_size, seq_len, dtype)
    out["total"] = sum(out.values())
    return out


# --8<-- [end:training_memory]


# --8<-- [start:measured_memory]
def measured_memory(model: nn.Module, logps_fn: Callable[[], Tensor]) -> dict[str, int]:
    """量真实张量的字节数：前向时 autograd 存下的激活，再做一步融合 AdamW 之后的权重、梯度与优化器状态。

    激活用 `torch.autograd.graph.saved_tensors_hooks` 收集，按底层存储去重（同一块内存被几个算子存下只算一次），
    不算参数本身的存储。

    Args:
        model: 要量的模型（会被原地更新一步，学习率 1e-3）。
        logps_fn: 无参函数，做一次前向并返回逐 token 对数概率 `(B, T)`。

    Returns:
        `weights`、`gradients`、`optimizer_states`、`activations`（字节）。
    """
    saved: list[Tensor] = []

    def pack(t: Tensor) -> Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logps = logps_fn()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    logps.sum().backward()
    optimizer.step()

    def nbytes(t: Tensor) -> int:
        return t.numel() * t.element_size()

    return {
        "weights": sum(nbytes(p) for p in model.parameters()),
        "gradients": sum(nbytes(p.grad) for p in model.parameters() if p.grad is not None),
        "optimizer_states": sum(nbytes(v) for state in optimizer.state.values() for v in state.values()),
        "activations": sum(v for k, v in storages.items() if k not in params),
    }


# --8<-- [end:measured_memory]


# --8<-- [start:shard]
def shard(memory: dict[str, int], strategy: str, n_gpus: int) -> dict[str, int]:
    """按 ZeRO 的阶段把 `training_memory` 的结果分到 `n_gpus` 张卡上，返回每张卡的字节数。

    ZeRO-1 切优化器状态（含 fp32 主权重），ZeRO-2 再切梯度，ZeRO-3 再切权重（ZeRO 论文 §5）；`"ddp"` 什么也不切。
    激活不被切分：每张卡算自己的微批次。PyTorch FSDP 的 `FULL_SHARD` 相当于 ZeRO-3，`SHARD_GRAD_OP` 相当于 ZeRO-2，
    `NO_SHARD` 相当于 DDP（见 `FSDP_EQUIVALENT`）。不计通信缓冲区与 ZeRO-3 前向时临时聚齐的一层权重。

    Args:
        memory: `training_memory` 的返回值。
        strategy: `"ddp"`、`"zero1"`、`"zero2"` 或 `"zero3"`。
        n_gpus: 卡数，正整数。

    Returns:
        与 `memory` 同键的字典，每项是每张卡上的字节数（向上取整），`total` 重新相加。

    Raises:
        ValueError: `strategy` 未知或 `n_gpus` 不是正整数。
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy 应是 {STRATEGIES} 之一，实际是 {strategy!r}")
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ValueError(f"n_gpus 应是正整数，实际是 {n_gpus!r}")
    stage = STRATEGIES.index(strategy)
    split = {"optimizer_states": 1, "master_weights": 1, "gradients": 2, "weights": 3}
    out = {k: math.ceil(v / n_gpus) if stage >= split.get(k, 99) else v for k, v in memory.items() if k != "total"}
    out["total"] = sum(out.values())
    return out


# --8<-- [end:shard]


# --8<-- [start:grpo_step_cost]
def kv_cache_bytes_per_token(shape: ModelShape, dtype: str = "bfloat16") -> int:
    """生成时每个 token 在 KV 缓存里占的字节数：每层存一个键、一个值，各 `kv_dim` 个数。"""
    return 2 * shape.num_hidden_layers * shape.kv_dim * _dtype_bytes(dtype)


def grpo_step_flops(
    n_params: int,
    prompts: int,
    num_generations: int,
    prompt_length: int,
    completion_length: int,
    beta: float = 0.0,
    num_iterations: int = 1,
) -> dict[str, float]:
    r"""一步 GRPO 的浮点运算数（粗估：每 token 前向 $2N$、前向加反向 $6N$，忽略注意力的 $O(S^2)$ 项）。

    生成：每个回答把提示词与回答都过一遍前向（$2N$ 每 token）。训练：策略在同一批上做 `num_iterations` 次
    前向加反向（$6N$ 每 token）；`beta > 0` 时参考模型前向一次，`num_iterations > 1` 时旧策略前向一次（各 $2N$ 每 token）。

    Args:
        n_params: 参数个数 $N$。
        prompts: 每步的提示词数。
        num_generations: 每个提示词的回答数 $G$。
        prompt_length: 提示词的 token 数。
        completion_length: 回答的 token 数。
        beta: KL 系数（只看是否为 0）。
        num_iterations: 每批的更新次数。

    Returns:
        `generation`、`training`（含参考模型与旧策略的前向）与 `ratio`（生成 / 训练）。
    """
    tokens = prompts * num_generations * (prompt_length + completion_length)
    generation = 2.0 * n_params * tokens
    extra_forwards = (beta > 0) + (num_iterations > 1)
    training = 6.0 * n_params * tokens * num_iterations + 2.0 * n_params * tokens * extra_forwards
    return {"generation": generation, "training": training, "ratio": generation / training}


# --8<-- [end:grpo_step_cost]


def _dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype 应是 {tuple(DTYPE_BYTES)} 之一，实际是 {dtype!r}")
    return DTYPE_BYTES[dtype]
