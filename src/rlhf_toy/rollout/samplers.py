r"""采样器的分布 $\mu$：由训练器的 logits 派生（第 12 章）。

推理引擎与训练器常常不是同一个分布：引擎的数值（例如 bf16）不同、top-k / top-p 过滤掉了尾部。温度不算：
TRL、verl 在训练器里除以同一个温度，`temperature_logps` 只用来模拟训练器忘了除温度的情形。这里每种采样器都是
`(..., V)` 的 logits 到 `(..., V)` 的对数概率的纯函数。top-k 与 top-p 把保留集以外的 token 设为
$\mu = 0$（对数概率 $-\infty$），在保留集内重新归一化：那些 token 永远采不到，$\pi/\mu$ 在那里没有定义，
任何重要性权重都补不回训练器在它们上面的概率（支撑集不一致）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from rlhf_toy._checks import check_nonnegative, check_tensor

# --8<-- [end:imports]


def _check_temperature(temperature: float) -> None:
    check_nonnegative("temperature", temperature)
    if temperature == 0:
        raise ValueError("temperature 应 > 0，实际是 0")


# --8<-- [start:samplers]
def temperature_logps(logits: Tensor, temperature: float = 1.0) -> Tensor:
    r"""温度采样：$\log\mu = \log\mathrm{softmax}(z/\tau)$。

    Args:
        logits: 训练器的 logits $z$，形状 `(..., V)`，浮点。
        temperature: $\tau > 0$。

    Returns:
        形状 `(..., V)` 的对数概率。

    Raises:
        ValueError: `logits` 不是张量，或 `temperature` 不是正的有限数。
    """
    check_tensor("logits", logits)
    _check_temperature(temperature)
    return torch.log_softmax(logits / temperature, dim=-1)


def top_k_logps(logits: Tensor, top_k: int, temperature: float = 1.0) -> Tensor:
    r"""top-k 采样：只保留 $z/\tau$ 最大的 $k$ 个 token，在其中重新归一化，其余 $\log\mu = -\infty$。

    同 transformers 的 `TopKLogitsWarper`：与第 $k$ 大的值相等的 token 也保留。

    Args:
        logits: 形状 `(..., V)`。
        top_k: 保留几个 token，$1 \le k$；$k \ge V$ 时等于温度采样。
        temperature: $\tau > 0$（先除温度再过滤，同 transformers 与 vLLM 的顺序）。

    Returns:
        形状 `(..., V)` 的对数概率，保留集外为 $-\infty$。

    Raises:
        ValueError: `top_k` 不是正整数，或 `temperature` 不合法。
    """
    check_tensor("logits", logits)
    _check_temperature(temperature)
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k 应是正整数，实际是 {top_k!r}")
    z = logits / temperature
    kth = z.topk(min(top_k, z.shape[-1]), dim=-1).values[..., -1:]
    return torch.log_softmax(z.masked_fill(z < kth, -torch.inf), dim=-1)


def top_p_logps(logits: Tensor, top_p: float, temperature: float = 1.0) -> Tensor:
    r"""top-p（nucleus）采样：按概率从大到小保留累计概率刚好达到 $p$ 的最小集合，重新归一化，其余 $-\infty$。

    同 transformers 的 `TopPLogitsWarper`（升序累计，去掉累计概率 $\le 1-p$ 的 token，至少保留一个）。

    Args:
        logits: 形状 `(..., V)`。
        top_p: $0 < p \le 1$；$p = 1$ 时等于温度采样。
        temperature: $\tau > 0$。

    Returns:
        形状 `(..., V)` 的对数概率，保留集外为 $-\infty$。

    Raises:
        ValueError: `top_p` 不在 $(0, 1]$，或 `temperature` 不合法。
    """
    check_tensor("logits", logits)
    _check_temperature(temperature)
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p 应在 (0, 1] 内，实际是 {top_p}")
    z = logits / temperature
    sorted_z, order = z.sort(dim=-1)  # 升序
    cumulative = sorted_z.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= 1 - top_p
    remove_sorted[..., -1] = False  # 至少保留概率最大的一个
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return torch.log_softmax(z.masked_fill(remove, -torch.inf), dim=-1)


def bf16_logps(logits: Tensor, temperature: float = 1.0) -> Tensor:
    r"""低精度的采样器：logits 先舍入到 bfloat16（8 位有效位）再算温度 softmax（在 float32 里算）。

    只模拟最后一层输出的舍入；整个网络用 bf16 的副本见 `bf16_copy`。

    Args:
        logits: 形状 `(..., V)`，浮点。
        temperature: $\tau > 0$。

    Returns:
        形状 `(..., V)` 的对数概率，dtype 同 `logits`。

    Raises:
        ValueError: `temperature` 不合法。
    """
    check_tensor("logits", logits)
    _check_temperature(temperature)
    rounded = logits.to(torch.bfloat16).to(logits.dtype)
    return torch.log_softmax(rounded / temperature, dim=-1)


# --8<-- [end:samplers]


def bf16_copy(module: nn.Module) -> nn.Module:
    """模型的低精度副本：每个参数舍入到 bfloat16 再存回原 dtype（计算仍用 float32，只丢了权重的精度）。

    Args:
        module: 任意 `nn.Module`（例如极小 Transformer）。

    Returns:
        冻结的深拷贝（参数不需要梯度）。
    """
    out = copy.deepcopy(module)
    with torch.no_grad():
        for p in out.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    out.requires_grad_(False)
    return out


SAMPLERS = {"temperature": temperature_logps, "top_k": top_k_logps, "top_p": top_p_logps, "bf16": bf16_logps}
