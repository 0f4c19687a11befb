# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/reading_logs.ipynb)

# %% [markdown]
# # 第 14 章 读懂训练日志：GRPO 的曲线
#
# 读第 14 章的缓存（第 9 章的加法任务上，一次健康的 GRPO 运行和六种症状的运行，每次 40 步），
# 画出每次运行的七条曲线，对每次运行调用 `diagnose`，再检查练习里“持续”规则的写法。几秒钟跑完。

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
import urllib.request
from pathlib import Path

import matplotlib.pyplot as plt

from rlhf_toy.diagnose import diagnose
from rlhf_toy.exercises import check_first_sustained

# %% [markdown]
# 缓存在仓库的 `docs/data/symptoms.json`（`python scripts/run_symptoms.py`，约 1.5 分钟 CPU）。
# 在 Colab 里没有仓库，就从 GitHub 下载同一个文件。

# %%
cache = Path("docs/data/symptoms.json")
URL = "https://raw.githubusercontent.com/rlhf-toy/rlhf-toy/main/docs/data/symptoms.json"
if cache.exists():
    runs = json.loads(cache.read_text(encoding="utf-8"))["runs"]
else:
    try:
        with urllib.request.urlopen(URL, timeout=30) as response:
            runs = json.loads(response.read().decode("utf-8"))["runs"]
    except OSError as error:
        runs = {}
        print(f"没有缓存，也下载不到（{error}）：请在仓库根目录运行")
print(sorted(runs))

# %% [markdown]
# ## 七条曲线
#
# 每个面板一个指标（TRL 的名字），每次运行一条线。健康的两次运行画成粗线。

# %%
KEYS = (
    "reward",
    "kl",
    "entropy",
    "frac_reward_zero_std",
    "completions/mean_length",
    "completions/clipped_ratio",
    "grad_norm",
)
if runs:
    fig, axes = plt.subplots(len(KEYS), 1, figsize=(7, 12), sharex=True)
    for ax, key in zip(axes, KEYS, strict=True):
        for name, history in runs.items():
            rows = [r for r in history if r.get(key) is not None]
            if rows:
                lw = 2.0 if "healthy" in name else 0.9
                ax.plot([r["step"] for r in rows], [r[key] for r in rows], lw=lw, label=name)
        ax.set_ylabel(key.split("/")[-1], fontsize=8)
        if key == "kl":
            ax.set_yscale("symlog", linthresh=0.01)
    axes[0].legend(fontsize=6, ncol=3)
    axes[-1].set_xlabel("GRPO step")
    plt.show()

# %% [markdown]
# ## `diagnose` 读每一次运行
#
# 检出的症状与它开始的步；`info` 级的“loss 恰为 0 或为负”是提示，不是故障。

# %%
for name, history in runs.items():
    d = diagnose(history)
    print(f"{name:<17}", [(f.symptom, f.step, f.severity) for f in d.detected])

# %% [markdown]
# 一份完整的报告：

# %%
if runs:
    print(diagnose(runs["truncation"]))

# %% [markdown]
# ## 练习：写一条“持续”的规则
#
# 返回第一段连续 `sustain` 个不低于 `limit` 的值的起始下标，没有时返回 -1；值不足 `sustain` 个时要求全部满足。
# 改下面的函数，再运行检查器。


# %%
def first_sustained(values, limit, sustain=3):
    need = min(sustain, len(values))
    run = 0
    for i, v in enumerate(values.tolist()):
        run = run + 1 if v >= limit else 0
        if need and run >= need:
            return i - need + 1
    return -1


check_first_sustained(first_sustained)
