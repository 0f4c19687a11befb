# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/overview.ipynb)

# %% [markdown]
# # 种子演示：查表“语言模型”上的 GRPO 与 DPO
#
# 20 个问题，每题 8 个候选回答，恰有一个正确；回答正确得 1 分，否则得 0 分。
# 这个 notebook 调用 `rlhf_toy` 包里的函数，打印与最初的种子演示逐行相同的结果。
# 在 CPU 上几秒钟跑完。

# %%
# 在 Colab 里安装 rlhf_toy；本地已经安装时什么也不做。
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("rlhf_toy") is None:
    source = os.environ.get("RLHF_TOY_SOURCE", "git+https://github.com/rlhf-toy/rlhf-toy")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)

# %%
from rlhf_toy.demos import run_seed

grpo_history, dpo_history = run_seed(seed=0)
