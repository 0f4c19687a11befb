# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/reasoning.ipynb)

# %% [markdown]
# # 第 11 章：推理型强化学习（RLVR）
#
# 带草稿的两位数加法：`47+88=` → `15.13=135`（个位 7+8=15，十位 4+8+1=13），也可以不写草稿直接写 `=135`。
# 先做 SFT 热启动（一半示范带草稿），再用 GRPO 与拒绝采样微调（RFT）各训练一小段，用同样多的采样回答；
# 然后看 pass@k 在 GRPO 前后的变化、最优 N 选一（best-of-N）在有偏奖励模型上的精确结果，最后读出完整版的缓存并画图。
# 全部在 CPU 上运行（Colab 的 CPU 也可以），笔记本电脑上几分钟以内。

# %%
# 在 Colab 里安装 rlhf_toy；本地已经安装时什么也不做。
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("rlhf_toy") is None:
    source = os.environ.get("RLHF_TOY_SOURCE", "git+https://github.com/rlhf-toy/rlhf-toy")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)
    importlib.invalidate_caches()

# 导入 rlhf_toy 时，它在任何张量计算之前固定 CPU 指令集与线程数（见 rlhf_toy.numerics），所以这一格要最先运行。
import rlhf_toy  # noqa: E402, F401

# %%
import copy
import json
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from rlhf_toy.demos.reasoning import best_of_n_sweep, pass_at_k_curve, rl_from, warm_start
from rlhf_toy.tasks.addition import decode
from rlhf_toy.tasks.scratchpad import accuracy_reward, format_reward, to_completions

torch.set_num_threads(1)  # 这些矩阵很小，单线程反而最快

# %% [markdown]
# 预算都在这一格。环境变量 `DQN_QUICK=1` 时（CI 重新执行 notebook 时会设）只跑几秒钟的短版本：流程相同，数字差得多。

# %%
QUICK = os.environ.get("DQN_QUICK", "") not in ("", "0")
RL_STEPS = 2 if QUICK else 30  # GRPO 与 RFT 各跑几步（每步 32 个提示词 × 8 个回答）
EVERY = RL_STEPS if QUICK else 10  # 每隔几步在留出集上评估一次（评估比训练一步还贵）
PASS_N = 2 if QUICK else 16  # pass@k 每道题采几个回答

# %% [markdown]
# ## SFT 热启动
#
# 300 步 × 128 题（快速版 30 步 × 64 题）。示范一半带正确的草稿、一半直接写 `=答案`，模型两种写法都会。

# %%
t0 = time.perf_counter()
task, start = warm_start("scratchpad", seed=0, quick=QUICK, format_weight=0.2)
print(f"SFT 用时 {time.perf_counter() - t0:.1f} 秒")
print({k: round(v, 3) for k, v in task.evaluate(start).items()})
prompts = task.heldout_prompts()[:6]
completions, _ = start.sample(prompts, 1)
for p, c in zip(prompts, completions, strict=True):
    print(f"{decode(p):>7} → {decode(c):<10}（答案 {task.answers(p[None])[0]}）")

# %% [markdown]
# `accuracy_with_scratchpad` 与 `accuracy_without_scratchpad` 是采样回答里写了 / 没写草稿的那些的正确率。
# 它们只在模型自己选了那种写法的题上算，两种写法面对的题不一样，不能直接相减；
# 页面上另有一个对照：把第一个 token 限定为数字或 `=`，在同一批题上量两种写法的正确率（`forced_mode_accuracy`）。
# 这里只是一次采样，数字随采样而变，与页面上完整版缓存里的数不必相同。写草稿的更准时，写草稿的回答平均拿到更高的优势；
# 页面把“强化学习因此推高写草稿的比例”当作一个解释，并写了它的证据与没有排除的其他原因。
#
# 格式奖励的漏洞不用训练就能看到：一个对每道题都写 `00.00=0` 的“模型”拿满格式分，一道题也没算对。

# %%
heldout = task.heldout_prompts()
constant = to_completions(["00.00=0|"] * len(heldout), width=task.max_completion_length)
print(
    f"常数回答 00.00=0：格式奖励 {format_reward(constant).mean():.3f}，"
    f"答案奖励 {accuracy_reward(task.answers(heldout), constant).mean():.3f}，"
    f"训练奖励（答案 + 0.2 × 格式）{task.reward(heldout, constant).mean():.3f}"
)

# %% [markdown]
# ## GRPO 与拒绝采样微调：同样多的采样回答
#
# 两者从同一个热启动模型的副本出发，每步采同样多的回答（32 × 8），奖励都是“答案 + 0.2 × 格式”。
# GRPO 按组内相对优势更新；RFT 只留下答对的回答，在它们上做一步 SFT。

# %%
runs = {}
for algorithm in ("grpo", "rft"):
    run_task, policy = copy.deepcopy(task), copy.deepcopy(start)
    rows = rl_from(run_task, policy, algorithm, every=EVERY, steps=RL_STEPS)
    runs[algorithm] = (rows, policy)
    for r in rows:
        print(
            f"{algorithm:>4} 采样 {r['samples']:5d}  accuracy {r['accuracy']:.3f}  "
            f"length {r['completion_length']:.2f}  scratchpad_rate {r['scratchpad_rate']:.3f}  entropy {r['entropy']:.3f}"
        )

# %% [markdown]
# 图里的标签用英文：Colab 默认没有中文字体。

# %%
fig, axes = plt.subplots(1, 3, figsize=(9, 3))
for name, (rows, _) in runs.items():
    x = [r["samples"] for r in rows]
    for ax, key in zip(axes, ("accuracy", "scratchpad_rate", "entropy"), strict=True):
        ax.plot(x, [r[key] for r in rows], marker="o", label=name.upper())
        ax.set(xlabel="sampled completions", title=key)
axes[0].legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## pass@k：GRPO 前后
#
# 每道留出题采 `PASS_N` 个回答，用无偏估计量 $1-\binom{n-c}{k}/\binom{n}{k}$ 算 pass@k。

# %%
torch.manual_seed(1)
before = pass_at_k_curve(start, task, PASS_N)
after = pass_at_k_curve(runs["grpo"][1], task, PASS_N)
for k in before:
    print(f"pass@{k:<3} GRPO 前 {before[k]:.3f}   GRPO 后 {after[k]:.3f}")

# %% [markdown]
# ## best-of-N：有偏奖励模型上的精确结果
#
# 第 8 章的设定：奖励模型偏爱每题的诱饵回答。不采样，直接用闭式算出 best-of-N 的分布。

# %%
rows = best_of_n_sweep(0)
for r in rows:
    print(
        f"N={r['n']:4d}  proxy {r['proxy_reward']:+.3f}  true {r['success_prob']:.3f}  KL {r['kl']:.3f} ≤ {r['kl_bound']:.3f}"
    )
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot([r["n"] for r in rows], [r["success_prob"] for r in rows], marker="o", label="true reward")
ax.plot([r["n"] for r in rows], [r["decoy_prob"] for r in rows], marker="o", label="P(decoy)")
ax.set(xscale="log", xlabel="N", title="best-of-N with a biased reward model")
ax.legend()
plt.show()

# %% [markdown]
# ## 完整版的缓存
#
# 完整版（四个运行各 100 步、pass@k 用 64 个样本）由 `scripts/run_reasoning.py` 跑，结果在 `docs/data/reasoning.json`。

# %%
cache_path = Path("docs/data/reasoning.json")
if cache_path.exists():
    cache = json.loads(cache_path.read_text(encoding="utf-8"))
    fig, grid = plt.subplots(2, 2, figsize=(9, 5.6))
    axes = grid.ravel()
    for name, rows in cache["runs"].items():
        x = [r["samples"] for r in rows]
        for ax, key in zip(axes, ("accuracy", "completion_length", "scratchpad_rate", "entropy"), strict=True):
            ax.plot(x, [r[key] for r in rows], label=name)
            ax.set(xlabel="sampled completions", title=key)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    plt.show()
    for name, curve in cache["pass_at_k"].items():
        print(f"{name:<18}" + "  ".join(f"pass@{k} {v:.3f}" for k, v in curve.items()))
else:
    print("没有找到 docs/data/reasoning.json（在 Colab 里请克隆仓库后再读，或自己运行 scripts/run_reasoning.py）")

# %% [markdown]
# ## 动手写：pass@k
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_pass_at_k` 把几组固定的输入（含 $c = 0$、$n - c < k$ 与
# $n = 200$、$k = 64$）同时交给你的函数和本书的实现，比较返回的数，第一处不一致时说出是哪个输入、期望什么、得到了什么，
# 以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。还没动手时它只提醒你函数还没有实现。

# %%
from rlhf_toy.exercises import check_pass_at_k


def my_pass_at_k(n, c, k):
    raise NotImplementedError  # 换成你的实现：返回 [0, 1] 内的浮点数


# %%
result = check_pass_at_k(my_pass_at_k)
