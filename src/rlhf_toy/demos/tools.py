r"""第 12 章的工具一节：计算器工具、多轮生成、遮住工具输出的 GRPO 与不遮的反例。

`python -m rlhf_toy tools {rollout,train} [--quick]`。

* 热启动：SFT 在一部分示范调用工具（`p_call`）、其余直接写答案的示范上；SFT 的损失也不含工具输出。
* 强化学习：同一个热启动出发，`mask_tool_outputs=True`（损失掩码 `mask * tool_mask`）与 `False`
  （工具输出也进入损失）各跑几个采样种子；损失用 `dr_grpo`，两者的分母相同，差别只在工具 token 的梯度。
* 完整版由 `scripts/run_offpolicy.py tools` 跑，结果缓存在 `docs/data/tools.json`；`quick=True` 只跑几步（CI 与页面用）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy

import torch

from rlhf_toy._threads import single_thread
from rlhf_toy.policies.transformer import TinyTransformerPolicy, completion_mask
from rlhf_toy.rollout.multi_turn import tool_rollout
from rlhf_toy.tasks.addition import EOS, PAD
from rlhf_toy.tasks.calculator import CalculatorTask, render
from rlhf_toy.train.sft import SFTConfig, train_sft
from rlhf_toy.train.tool_grpo import ToolGRPOConfig, tool_loss_mask, train_tool_grpo

# --8<-- [end:imports]

SOURCES = (
    "demos/tools.py",
    "tasks/calculator.py",
    "tasks/addition.py",
    "rollout/multi_turn.py",
    "train/tool_grpo.py",
    "train/sft.py",
    "policies/transformer.py",
    "losses/aggregate.py",
    "losses/grpo.py",
    "estimators/advantages.py",
    "estimators/kl.py",
)
P_CALL = 0.25  # SFT 示范里调用工具的比例：热启动后策略有时调用、有时直接答，强化学习才有得选
SEEDS = (0, 1, 2)
N_EVAL = 200  # 评估用的留出题数
# 三种设置：遮住工具输出；不遮（反例）；不遮但工具 token 用打乱的优势（对照：同样大小的额外梯度，内容与奖励无关）
ARMS = (("masked", True, False), ("unmasked", False, False), ("shuffled", False, True))


# --8<-- [start:warm_start]
def warm_start(seed: int = 0, quick: bool = False) -> tuple[CalculatorTask, TinyTransformerPolicy]:
    """建任务与模型并做 SFT。

    完整版：150 步 × 64 题、学习率 5e-3，四分之一的示范调用工具（`P_CALL`），热启动后策略多半直接答、偶尔调用。
    快速版：60 步 × 32 题、学习率 1e-2，一半的示范调用工具——只有这样，几秒钟的 SFT 才学得会抄写，快速版的强化学习才有非零的奖励。

    Args:
        seed: 模型初始化与任务的随机种子。
        quick: 是否只跑短版本。

    Returns:
        `(task, policy)`。
    """
    torch.manual_seed(seed)
    task = CalculatorTask(p_call=0.5 if quick else P_CALL, seed=seed, batch_size=4 if quick else 8)
    policy = task.make_policy()
    config = SFTConfig(learning_rate=1e-2, steps=60, batch_size=32) if quick else SFTConfig(5e-3, 150, 64)
    with single_thread():
        train_sft(policy, task, config)
    return task, policy


# --8<-- [end:warm_start]


def evaluate(policy: TinyTransformerPolicy, task: CalculatorTask, n: int = N_EVAL) -> dict[str, float]:
    """留出集前 `n` 题上的贪心评估：可用工具时的正确率与调用率，以及禁止调用时（直接写答案）的正确率。

    Args:
        policy: 策略。
        task: 任务。
        n: 题数。

    Returns:
        `{"accuracy", "call_rate_greedy", "accuracy/no_tool"}`。
    """
    prompts = task.heldout_prompts(n)
    with_tool = tool_rollout(policy, prompts, task, greedy=True)
    without = tool_rollout(policy, prompts, task, greedy=True, allow_calls=False)
    return {
        "accuracy": task.reward(prompts, with_tool.completions).mean().item(),
        "call_rate_greedy": task.called(with_tool.completions).mean().item(),
        "accuracy/no_tool": task.reward(prompts, without.completions).mean().item(),
    }


def rl_run(
    task: CalculatorTask,
    init: TinyTransformerPolicy,
    mask_tool_outputs: bool,
    seed: int,
    quick: bool = False,
    shuffle_tool_advantages: bool = False,
) -> list[dict[str, float]]:
    """从热启动 `init` 的副本出发跑一次带工具的 GRPO（完整版 30 步 × 8 题 × G=8，快速版 4 步 × 4 题 × G=4），返回逐步指标。

    Args:
        task: 任务（它的抽题生成器按 `seed` 重置，两种掩码看到同一串提示词）。
        init: 热启动后的策略（不修改）。
        mask_tool_outputs: 是否遮住工具输出。
        seed: 采样种子。
        quick: 是否只跑短版本。
        shuffle_tool_advantages: 对照：工具 token 的损失用打乱的优势（见 `ToolGRPOConfig`）。

    Returns:
        每步的指标字典列表（见 `train_tool_grpo`）。
    """
    policy = copy.deepcopy(init)
    task.generator.manual_seed(1000 + seed)
    config = ToolGRPOConfig(
        steps=4 if quick else 30,
        num_generations=4 if quick else 8,
        learning_rate=1e-3,
        mask_tool_outputs=mask_tool_outputs,
        seed=seed,
        shuffle_tool_advantages=shuffle_tool_advantages,
    )
    with single_thread():
        return train_tool_grpo(
            policy, task, config, evaluate=lambda p: evaluate(p, task, 50 if quick else N_EVAL), eval_every=10
        )


def examples(policy: TinyTransformerPolicy, task: CalculatorTask, n: int = 4) -> list[dict]:
    """留出集前 `n` 题的贪心多轮回答：token 字符串、`tool_mask` 与奖励（画 token 条带用）。

    Args:
        policy: 策略。
        task: 任务。
        n: 题数。

    Returns:
        每题一个 `{"prompt", "tokens", "tool_mask", "reward"}`（只含回答掩码内的 token）。
    """
    prompts = task.heldout_prompts(n)
    rollout = tool_rollout(policy, prompts, task, greedy=True)
    rewards = task.reward(prompts, rollout.completions)
    out = []
    for i in range(n):
        k = int(rollout.mask[i].sum())
        out.append(
            {
                "prompt": render(prompts[i]).replace("<bos>", ""),
                "tokens": [render([t]) for t in rollout.completions[i, :k].tolist()],
                "tool_mask": [int(m) for m in rollout.tool_mask[i, :k]],
                "reward": _r(rewards[i]),
            }
        )
    return out


def _r(x: float) -> float:
    return round(float(x), 4)


def full_run(quick: bool = False) -> dict:
    """完整实验：热启动的评估，以及遮 / 不遮工具输出各 `len(SEEDS)` 个采样种子的训练曲线（浮点保留 4 位）。

    Args:
        quick: 快速模式（只有一个种子、几步）。

    Returns:
        `{"warm_start": {...}, "examples": [...], "runs": {"masked": [...], "unmasked": [...], "shuffled": [...]}}`；
        每个 run 是逐步指标的列表。
    """
    task, init = warm_start(0, quick)
    out = {
        "warm_start": {k: _r(v) for k, v in evaluate(init, task, 50 if quick else N_EVAL).items()},
        "examples": examples(init, task),
        "runs": {},
    }
    for name, masked, shuffled in ARMS:
        runs = []
        for seed in SEEDS[:1] if quick else SEEDS:
            history = rl_run(task, init, masked, seed, quick, shuffled)
            runs.append([{k: (v if k == "step" else _r(v)) for k, v in row.items()} for row in history])
        out["runs"][name] = runs
    return out


# --8<-- [start:demo_rollout]
def demo_rollout(quick: bool = True) -> str:
    """一条示范与几条策略自己的多轮回答：方括号里是环境写的工具输出，下面两行是 `tool_mask` 与遮住工具输出后的损失掩码。

    Args:
        quick: 快速热启动（60 步 SFT）；`False` 时用完整热启动（150 步）。

    Returns:
        打印用的文本。
    """
    task, policy = warm_start(0, quick)
    prompts = task.heldout_prompts(4)
    a, b = task.base.heldout[0].tolist()
    ids, tool_mask = task.demonstration(a, b, call=True)
    demo = torch.tensor([ids + [PAD] * (task.max_completion_length - len(ids))])
    demo_mask = torch.tensor([tool_mask + [1] * (task.max_completion_length - len(ids))], dtype=torch.float)
    rollout = tool_rollout(policy, prompts, task, greedy=True)
    rows = [("示范", demo, completion_mask(demo, EOS), demo_mask, task.reward(prompts[:1], demo))]
    rows.append(
        ("策略", rollout.completions, rollout.mask, rollout.tool_mask, task.reward(prompts, rollout.completions))
    )
    lines = []
    for who, completions, mask, tool, rewards in rows:
        loss_mask = tool_loss_mask(mask, tool, True)
        for i in range(len(completions)):
            n = int(mask[i].sum())
            lines.append(f"{who} {render(completions[i], tool[i])}  reward={rewards[i]:.0f}")
            lines.append("  tool_mask  " + "".join(str(int(m)) for m in tool[i, :n]))
            lines.append("  loss_mask  " + "".join(str(int(m)) for m in loss_mask[i, :n]))
    return "\n".join(lines)


# --8<-- [end:demo_rollout]


def demo_train(quick: bool = True) -> str:
    """三种设置的对比：第一步与最后一步的训练批指标（快速版 4 步，完整版 30 步；种子 0）。

    Args:
        quick: 快速模式。

    Returns:
        打印用的文本表格。
    """
    task, init = warm_start(0, quick)
    header = f"{'mask':>8} {'step':>4} {'reward':>6} {'calls':>5} {'tool_logp':>9} {'ent/tool':>8} {'grad/tool':>9}"
    lines = [header]
    for name, masked, shuffled in ARMS:
        history = rl_run(task, init, masked, 0, quick, shuffled)
        for r in (history[0], history[-1]):
            lines.append(
                f"{name:>8} {r['step']:>4} {r['reward']:>6.3f} {r['call_rate']:>5.2f} {r['tool_logp']:>9.3f} "
                f"{r['entropy/tool']:>8.3f} {r['grad_norm/tool']:>9.3f}"
            )
    return "\n".join(lines)
