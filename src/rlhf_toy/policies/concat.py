r"""逐 token 对数概率的最简写法：把提示词与回答拼成一行，整段前向，右移一位，取下一个 token 的对数概率。

给 Hugging Face 因果语言模型写的也是这几行（TRL `GRPOTrainer._get_per_token_logps_and_entropies` 同样先拼好
`input_ids` 再前向）。[`TinyTransformerPolicy.logps`][rlhf_toy.policies.transformer.TinyTransformerPolicy.logps]
给出相同的数，只是让同一提示词的回答共用提示词的 K、V，省了计算（`tests/test_tiny_lm.py` 比对两者）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf_toy._checks import check_ndim
from rlhf_toy.policies.transformer import TinyTransformerPolicy, completion_mask, left_pad

# --8<-- [end:imports]


def causal_lm_logits(policy: TinyTransformerPolicy, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """整段因果前向，同 HF 因果语言模型的 `model(input_ids, attention_mask=...).logits`。

    位置编号从每行第一个真实 token 数起（同 HF `generate`），所以左填充不占位置编号。

    Args:
        policy: 极小 Transformer 策略。
        input_ids: token 编号，形状 `(B, S)`，整数，左填充。
        attention_mask: 形状 `(B, S)`，真实 token 为 1（或 True），填充为 0。

    Returns:
        形状 `(B, S, V)` 的浮点 logits（未除以温度），带梯度；位置 $s$ 的 logits 预测第 $s+1$ 个 token。

    Raises:
        ValueError: `input_ids` 不是二维，`attention_mask` 的形状与它不同，或 `S` 超过位置嵌入的长度。
    """
    check_ndim("input_ids", input_ids, 2, "(B, S)")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask 的形状是 {tuple(attention_mask.shape)}，期望 {tuple(input_ids.shape)}（与 input_ids 相同）"
        )
    S = input_ids.shape[1]
    if S > policy.pos_emb.num_embeddings:
        raise ValueError(
            f"input_ids 的形状是 {tuple(input_ids.shape)}，期望第 1 维不超过 "
            f"max_prompt_length + max_completion_length = {policy.pos_emb.num_embeddings}"
        )
    valid = attention_mask.bool()
    positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)  # 左填充不占位置编号（同 HF generate）
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    attn_mask = (causal & valid[:, None, :]) | torch.eye(S, dtype=torch.bool)  # 填充位置只看自己，避免 NaN
    hidden, _ = policy._run(input_ids, positions, attn_mask[:, None])
    return policy.head(hidden)


# --8<-- [start:concat_logps]
def concat_logps(policy: TinyTransformerPolicy, prompts: Tensor, completions: Tensor) -> Tensor:
    r"""逐 token 对数概率 $\log\pi_\theta(y_t\mid x, y_{<t})$ 的最简写法：拼接、整段前向、右移一位、`gather`。

    与 `policy.logps` 给出相同的数（差在 $10^{-5}$ 以内），对应第 9 章式 (tiny-logp) 与 TRL
    `GRPOTrainer._get_per_token_logps_and_entropies` 的做法：logits 除以采样温度后取 `log_softmax`，只留回答部分。

    Args:
        policy: 极小 Transformer 策略；用它的 `temperature`、`pad_id` 与 `eos_id`。
        prompts: 提示词，形状 `(B, Lp)`，整数，左填充或右填充（先转成左填充）。
        completions: 回答，形状 `(B, T)`，整数，右填充。

    Returns:
        形状 `(B, T)` 的浮点 `logps`，带梯度；第一个 EOS 之后的位置为 0（同 `policy.logps`）。

    Raises:
        ValueError: `prompts` 或 `completions` 不是二维，两者行数不同，或合起来超过位置嵌入的长度。
    """
    check_ndim("prompts", prompts, 2, "(B, Lp)")
    check_ndim("completions", completions, 2, "(B, T)")
    if completions.shape[0] != prompts.shape[0]:
        raise ValueError(f"completions 的形状是 {tuple(completions.shape)}，期望第 0 维为 {prompts.shape[0]}")
    prompts = left_pad(prompts, policy.pad_id)  # (B, Lp)：回答紧接在提示词最后一个 token 之后
    T = completions.shape[1]
    input_ids = torch.cat([prompts, completions], dim=1)  # (B, Lp + T)
    attention_mask = torch.cat([prompts != policy.pad_id, torch.ones_like(completions, dtype=torch.bool)], dim=1)
    logits = causal_lm_logits(policy, input_ids, attention_mask)  # (B, Lp + T, V)
    logits = logits[:, :-1] / policy.temperature  # 右移一位：位置 s 预测第 s+1 个 token
    log_probs = F.log_softmax(logits, dim=-1)  # (B, Lp + T - 1, V)
    logps = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # 每个位置取下一个 token 的：(B, Lp + T - 1)
    logps = logps[:, -T:]  # 只留回答部分：(B, T)
    return logps * completion_mask(completions, policy.eos_id)  # EOS 之后置 0，同 policy.logps


# --8<-- [end:concat_logps]
