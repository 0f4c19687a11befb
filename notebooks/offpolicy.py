# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/offpolicy.ipynb)

# %% [markdown]
# # 第 12 章：异策略、蒸馏与工具
#
# 三种“损失里的 token 不是当前策略亲手采的”情形：样本来自过时或不一致的采样器（重要性权重、TIS、MIS）；
# 回答来自教师或由教师打分（同策略蒸馏与教师样本 SFT）；回答里有一段是工具写的（遮住工具输出）。
# 查表策略上的结果是精确计算；极小 Transformer 的完整版训练读缓存（`docs/data/*.json`，在仓库根目录运行时才有），
# 现场只跑几个快速版。全部在 CPU 上运行，笔记本电脑上一两分钟以内。

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
import json
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from rlhf_toy.demos.distillation import run_distill
from rlhf_toy.demos.offpolicy import bandit_curves, bias_vs_cap, bias_vs_staleness, demo_mismatch
from rlhf_toy.demos.tools import demo_rollout, demo_train  # noqa: F401 - demo_train 见最后一部分的说明
from rlhf_toy.studies.forward_reverse_kl import bimodal_teacher, fit_student, mode_masses
from rlhf_toy.exercises import check_importance_weights
from rlhf_toy.estimators.importance import IS_MODES, importance_weights
from rlhf_toy.tasks.calculator import CalculatorTask, render

# %% [markdown]
# ## 过时与不一致的采样器
#
# 查表策略上，样本来自落后 $k$ 步的策略或与训练器不同的采样器（top-k、top-p、bf16；温度两行模拟的是训练器忘了除以采样温度的情形）时，
# 策略梯度的期望更新与真梯度差多少（精确计算，不采样）；截断重要性采样（TIS）与掩码重要性采样（MIS）能补回多少。
# 最后读出极小 Transformer 完整版的缓存（`docs/data/offpolicy.json`，有的话）画学习曲线。几秒内跑完。

# %% [markdown]
# TRL 的四种模式在两条回答上给出的权重（第 1 条回答第 1 个 token 的 ρ = 0.5 / 0.1 = 5 > 3）：

# %%
logps = torch.log(torch.tensor([[0.5, 0.4, 0.9], [0.2, 0.8, 0.3]]))
sampler_logps = torch.log(torch.tensor([[0.1, 0.4, 0.9], [0.2, 0.4, 0.6]]))
mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
for mode in IS_MODES:
    print(mode, importance_weights(logps, sampler_logps, mask, mode, clip_max=3.0).tolist())

# %% [markdown]
# 偏差随落后步数 k、TIS / MIS 的偏差与方差随上界 C：

# %%
by_k, by_cap = bias_vs_staleness(), bias_vs_cap()
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for c in ("none", "tis", "mis", "is"):
    axes[0].plot(by_k["staleness"], by_k[c], marker="o", label=c)
axes[0].set(xlabel="staleness k", ylabel="relative bias", xscale="symlog")
axes[0].legend()
for c in ("tis", "mis"):
    axes[1].plot(by_cap["cap"], by_cap[c], marker="o", label=f"{c} bias")
    axes[1].plot(by_cap["cap"], by_cap[f"{c}_variance"], ls=":", label=f"{c} variance")
axes[1].set(xlabel="cap C (k = 16)", ylabel="bias / variance", xscale="log")
axes[1].legend()
plt.show()

# %%
print(demo_mismatch())

# %% [markdown]
# 精确期望更新的学习曲线（k = 16，不修正 / TIS / MIS，对照 k = 0）：

# %%
curves = bandit_curves()
for name in ("k=0/none", "k=16/none", "k=16/tis", "k=16/mis"):
    plt.plot(curves[name], label=name)
plt.xlabel("step")
plt.ylabel("expected reward")
plt.legend()
plt.show()

# %% [markdown]
# 极小 Transformer 的完整版（`python scripts/run_offpolicy.py offpolicy`，几分钟）缓存在 `docs/data/offpolicy.json`：

# %%
cache = Path("docs/data/offpolicy.json")
if cache.exists():
    runs = json.loads(cache.read_text(encoding="utf-8"))["results"]["transformer"]
    for name, history in runs.items():
        rows = [r for r in history if "accuracy" in r]
        plt.plot([r["step"] for r in rows], [r["accuracy"] for r in rows], label=name)
    plt.xlabel("GRPO step")
    plt.ylabel("held-out accuracy")
    plt.legend(fontsize=7)
    plt.show()
else:
    print("no cache here (Colab): see the chapter page for the figure")

# %% [markdown]
# ## 同策略蒸馏与教师样本 SFT
#
# 先看精确实验台：61 个回答上的双峰教师，学生只能是一个离散高斯，分别在精确的正向 KL（众数覆盖）与精确的反向 KL
# （众数寻求）上拟合。然后在极小 Transformer 上把几种方法各跑一个快速版。

# %%
teacher = bimodal_teacher()
fits = {d: fit_student(teacher, d) for d in ("forward", "reverse")}
for d, f in fits.items():
    left, right = mode_masses(f.logps, 30)
    print(
        f"{d:<8} mu={f.mu:6.2f} sigma={f.sigma:5.2f} mass {left:.3f}/{right:.3f} "
        f"KL(T||S)={f.forward_kl:.3f} KL(S||T)={f.reverse_kl:.3f}"
    )

x = range(teacher.numel())
plt.bar(x, teacher.exp(), color="0.75", width=1.0, label="teacher")
plt.plot(x, fits["forward"].logps.exp(), label="forward KL (mode covering)")
plt.plot(x, fits["reverse"].logps.exp(), "--", label="reverse KL (mode seeking)")
plt.xlabel("answer x")
plt.ylabel("probability")
plt.legend()
plt.show()

# %% [markdown]
# 一位数加法上的快速版（10 步；章节页读的是 300 步完整版的缓存）。横轴是**采样的** token 数：
# 同策略蒸馏数学生采的，教师样本 SFT 数教师采的。

# %%
res = run_distill(seed=0, steps=10, eval_every=5)
for method, history in res.items():
    plt.plot([r["sampled_tokens"] for r in history], [r["train_accuracy"] for r in history], marker="o", label=method)
plt.xlabel("sampled tokens")
plt.ylabel("accuracy on training problems")
plt.legend()
plt.show()

# %% [markdown]
# ## 工具调用：遮住工具输出
#
# 策略写 `<call>a+b<res>`，环境把计算器的结果接在后面，策略再写最终答案。下面先看一条示范与它的 `tool_mask`，
# 再从缓存 `docs/data/tools.json` 画出三种设置（遮、不遮、不遮但打乱工具 token 的优势）的训练曲线，最后现场跑一个快速版。

# %%
task = CalculatorTask(seed=0)
ids, tool_mask = task.demonstration(347, 588, call=True)
print(render(ids, tool_mask))
print("tool_mask", "".join(str(m) for m in tool_mask))

# %% [markdown]
# 完整版的曲线（三个采样种子的平均；缓存由 `scripts/run_offpolicy.py tools` 生成）。

# %%
cache_path = Path("docs/data/tools.json")
if cache_path.exists():
    results = json.loads(cache_path.read_text(encoding="utf-8"))["results"]

    def mean_curve(runs, key):
        steps = [row["step"] for row in runs[0] if key in row]
        return steps, [sum(next(r[key] for r in run if r["step"] == s) for run in runs) / len(runs) for s in steps]

    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    for name, runs in results["runs"].items():
        axes[0].plot(*mean_curve(runs, "accuracy"), marker="o", label=f"{name}: accuracy")
        axes[0].plot(*mean_curve(runs, "accuracy/no_tool"), ls=":", marker="o", label=f"{name}: no tool")
        axes[1].plot(*mean_curve(runs, "tool_logp"), label=name)
    axes[0].set(xlabel="RL step", ylabel="held-out accuracy (greedy)")
    axes[1].set(xlabel="RL step", ylabel="mean log π(tool-output token)")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    plt.show()
else:
    print("没有找到 docs/data/tools.json（在 Colab 里请克隆仓库后再读，或自己运行 scripts/run_offpolicy.py tools）")

# %% [markdown]
# 现场跑一个快速版：60 步 SFT 之后的几条多轮回答（方括号里是计算器写的 token），以及 `tool_mask` 与遮住工具输出后的损失掩码。
# 想看遮与不遮的训练对比，可以再运行 `print(demo_train(quick=True))`（多几秒）。

# %%
print(demo_rollout(quick=True))

# %% [markdown]
# ## 动手写：重要性权重
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_importance_weights` 把几组固定的输入
# （四种模式、双侧界、一个极端的比率、填充位置上随意的对数概率、掩码全为 0 的行）同时交给你的函数和本书的实现，
# 比较返回的权重，第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；
# 全部通过时说明检查了哪些情形。还没动手时它只提醒你函数还没有实现。


# %%
def my_importance_weights(logps, sampler_logps, mask, mode="sequence_mask", clip_max=3.0, clip_min=None):
    raise NotImplementedError  # 换成你的实现：逐 token 模式返回 (B, T)，序列模式返回 (B, 1)，不带梯度


# %%
result = check_importance_weights(my_importance_weights)
