r"""多轮生成（multi-turn rollout）：策略写到调用结束符就暂停，环境运行工具、把输出 token 接在后面，策略再接着写。

每一行独立地在“策略写”与“环境写”两种状态之间切换，所有行按位置同步推进：每个位置做一次完整前向
（`TinyTransformerPolicy.completion_logits`，不用 KV 缓存；回答只有十几个 token），策略状态的行按温度采样，
环境状态的行写工具输出的下一个 token。返回的 `tool_mask` 在环境写的 token 上为 0，采样对数概率在那里为 0，
同 TRL 1.16 `GRPOTrainer._tool_call_loop`（`tool_mask += [0] * tool_length`、`logprobs += [0.0] * tool_length`）。
"""

# --8<-- [start:imports]
from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhf_toy._checks import check_ndim
from rlhf_toy.policies.transformer import TinyTransformerPolicy, completion_mask

# --8<-- [end:imports]


class ToolEnvironment(Protocol):
    """多轮生成需要的环境接口：调用开始、调用结束的 token 编号，以及工具本身。"""

    call_id: int
    res_id: int

    def tool(self, call: list[int]) -> list[int]:
        """`call` 是 `call_id` 与 `res_id` 之间的 token，返回工具输出的 token。"""
        ...


class ToolRollout(NamedTuple):
    """一批多轮回答，全部形状 `(B, T)`。

    Attributes:
        completions: 回答 token（含环境插入的工具输出），EOS 之后是填充。
        mask: 回答掩码（第一个 EOS 及之前为 1，见 `completion_mask`）。
        tool_mask: 环境插入的 token 为 0，其余（含填充）为 1，同 TRL 的 `tool_mask`。
        logps: 采样时策略给的对数概率；工具 token 与填充处为 0（同 TRL）。
    """

    completions: Tensor
    mask: Tensor
    tool_mask: Tensor
    logps: Tensor


# --8<-- [start:tool_rollout]
@torch.no_grad()
def tool_rollout(
    policy: TinyTransformerPolicy,
    prompts: Tensor,
    env: ToolEnvironment,
    num_generations: int = 1,
    *,
    greedy: bool = False,
    allow_calls: bool = True,
    generator: torch.Generator | None = None,
) -> ToolRollout:
    r"""带工具调用的自回归生成：策略写出 `env.res_id` 时暂停，环境把 `env.tool(调用内容)` 逐个写进回答，再交还策略。

    调用内容是最近一个 `env.call_id` 与这个 `env.res_id` 之间的 token；没有打开的调用时，`env.res_id` 只是一个普通 token。

    Args:
        policy: 策略（只调用它的 `completion_logits`，按 `policy.temperature` 采样）。
        prompts: 提示词，形状 `(P, Lp)`。
        env: 提供 `call_id`、`res_id`、`tool` 的环境（例如 `CalculatorTask`）。
        num_generations: 每个提示词的回答数 $G$；同一提示词的回答相邻，`B = P * G`。
        greedy: `True` 时每步取概率最大的 token。
        allow_calls: `False` 时禁止策略写 `env.call_id`（logit 置为 $-\infty$），即“不给工具”的对照。
        generator: 可选的 `torch.Generator`。

    Returns:
        `ToolRollout`，宽 `T = policy.max_completion_length`；工具输出放不下时只写到最大长度为止（TRL 1.16 则把放不下的工具结果整段撤回）。

    Raises:
        ValueError: `prompts` 不是二维，或 `num_generations` 不是正整数。
    """
    check_ndim("prompts", prompts, 2, "(P, Lp)")
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations 应是正整数，实际是 {num_generations!r}")
    prompts = prompts.repeat_interleave(num_generations, dim=0)
    B, L = prompts.shape[0], policy.max_completion_length
    completions = torch.full((B, L), policy.pad_id)
    tool_mask, logps = torch.ones(B, L), torch.zeros(B, L)
    pending: list[list[int]] = [[] for _ in range(B)]  # 每行还没写出的工具输出
    call_start: list[int | None] = [None] * B  # 每行正在进行的调用从哪个位置开始（None：没有打开的调用）
    done = [False] * B
    for t in range(L):
        if all(done):
            break
        log_probs = _next_token_log_probs(policy, prompts, completions[:, :t], allow_calls, env.call_id)
        sampled = log_probs.argmax(-1) if greedy else torch.multinomial(log_probs.exp(), 1, generator=generator)[:, 0]
        for i in range(B):
            if done[i]:
                continue
            if pending[i]:  # 环境在写：这个 token 不是策略采样的
                completions[i, t], tool_mask[i, t] = pending[i].pop(0), 0.0
                continue
            token = int(sampled[i])
            completions[i, t], logps[i, t] = token, log_probs[i, token]
            if token == env.call_id:
                call_start[i] = t + 1
            elif token == env.res_id and call_start[i] is not None:  # 调用结束：运行工具，输出排队等着写进回答
                pending[i] = list(env.tool(completions[i, call_start[i] : t].tolist()))
                call_start[i] = None
            done[i] = token == policy.eos_id
    return ToolRollout(completions, completion_mask(completions, policy.eos_id), tool_mask, logps)


def _next_token_log_probs(
    policy: TinyTransformerPolicy, prompts: Tensor, prefix: Tensor, allow_calls: bool, call_id: int
) -> Tensor:
    """下一个 token 的对数概率 `(B, V)`（温度缩放后）：在前缀后补一个占位 token，取最后一个位置的 logits。"""
    placeholder = torch.full((prefix.shape[0], 1), policy.pad_id)
    logits = policy.completion_logits(prompts, torch.cat([prefix, placeholder], dim=1))[:, -1]
    if not allow_calls:
        logits[:, call_id] = float("-inf")
    return F.log_softmax(logits / policy.temperature, dim=-1)


# --8<-- [end:tool_rollout]
