# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/your_run_settings.ipynb)

# %% [markdown]
# # 第 13 章（续）：内存、超参数与难度筛选
#
# 先在第 10 章的极小 Qwen2 上逐字节核对内存公式（权重、梯度、AdamW 状态与激活），
# 再把它放大到 Qwen2.5 的四个尺寸，看 ZeRO 的三个阶段各省下多少。
# 然后打印配方表，读出难度筛选实验的缓存并画图。最后是两道练习。不训练，CPU 上半分钟以内。

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

from rlhf_toy.models.memory import (
    QWEN25,
    STRATEGIES,
    ModelShape,
    lora_parameter_count,
    measured_memory,
    parameter_count,
    shard,
    training_memory,
)
from rlhf_toy.studies.recipes import RECIPES, SETTING_NAMES, SETTINGS, format_cell

# %% [markdown]
# ## 公式对真实张量
#
# 第 10 章的模型由 transformers 的 `Qwen2ForCausalLM` 建成（Colab 自带 transformers）。

# %%
try:
    from rlhf_toy.integrations.trl import make_model
except ImportError:
    make_model = None
    print("没有 transformers / datasets：跳过这一格")
if make_model is not None:
    for dtype in ("float32", "bfloat16"):
        model = make_model().to(getattr(torch, dtype))
        shape = ModelShape(16, 48, 192, 2, 4, 4, False)
        ids = torch.randint(0, 16, (8, 12), generator=torch.Generator().manual_seed(0))

        def logps_fn(model=model, ids=ids):  # 位置 t 的 logits 预测第 t+1 个 token，所以右移一位
            return torch.log_softmax(model(ids).logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)

        got = measured_memory(model, logps_fn)
        want = training_memory(shape, 8, 12, dtype, mixed_precision=False)
        print(dtype, {k: (got[k], want[k]) for k in got})

# %% [markdown]
# ## Qwen2.5：单卡与 8 张卡
#
# bf16 混合精度、AdamW、一个微批次 1 条 × 2048 个 token。改 `SEQ_LEN` 或 `N_GPUS` 再运行，看哪一项先撑不住。

# %%
SEQ_LEN, N_GPUS = 2048, 8
GiB = 2**30
for name, shape in QWEN25.items():
    m = training_memory(shape, batch_size=1, seq_len=SEQ_LEN)
    per_gpu = {s: shard(m, s, N_GPUS)["total"] / GiB for s in STRATEGIES}
    print(f"{name:5s} {parameter_count(shape):14,d} 参数  单卡 {m['total'] / GiB:7.1f} GiB  "
          + "  ".join(f"{s} {v:6.1f}" for s, v in per_gpu.items()))  # fmt: skip

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
names = list(QWEN25)
keys = ("weights", "gradients", "master_weights", "optimizer_states", "activations")
bottom = [0.0] * len(names)
for key in keys:
    values = [training_memory(QWEN25[n], 1, SEQ_LEN)[key] / GiB for n in names]
    ax.bar(names, values, bottom=bottom, label=key)
    bottom = [b + v for b, v in zip(bottom, values, strict=True)]
ax.set(ylabel="GiB (one GPU, no sharding)", title=f"Qwen2.5, bf16 model + fp32 master (ZeRO layout), 1 x {SEQ_LEN} tokens")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
shape = QWEN25["7B"]
print(f"7B 的 LoRA（r=16）可训练参数 {lora_parameter_count(shape, 16):,d}")
full, lora = training_memory(shape, 1, SEQ_LEN), training_memory(shape, 1, SEQ_LEN, lora_rank=16)
print(f"全参数 {full['total'] / GiB:.1f} GiB，LoRA {lora['total'] / GiB:.1f} GiB（激活都是 {lora['activations'] / GiB:.1f}）")

# %% [markdown]
# ## 配方表
#
# 列依次是 DeepSeekMath、DeepSeek-R1-Zero、DAPO、Dr. GRPO、TRL 1.16 默认、verl 0.9.1 默认；“未报告”表示出处没有写。

# %%
for setting in SETTINGS:
    print(f"{SETTING_NAMES[setting]}：" + " | ".join(format_cell(RECIPES[name][setting]) for name in RECIPES))

# %% [markdown]
# ## 难度筛选：缓存里的结果
#
# 四臂（筛选、不筛选、随机子集、只去掉容易的题）每步同样 32 个提示词 × 8 个回答、同样 40 步；由 `scripts/run_settings.py` 跑。

# %%
cache_path = Path("docs/data/your_run_settings.json")
if cache_path.exists():
    cache = json.loads(cache_path.read_text(encoding="utf-8"))
    arms = ("filtered", "unfiltered", "random_subset", "no_easy")
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for i, (seed, run) in enumerate(cache["runs"].items()):
        ax.plot(range(len(arms)), [run[a]["accuracy"] for a in arms], "o-", label=f"seed {seed}")
        print(seed, {a: round(run[a]["accuracy"], 3) for a in arms})
    ax.set_xticks(range(len(arms)), arms)
    ax.set(ylabel="held-out greedy accuracy", title="difficulty filtering, same budget")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()
else:
    print("没有找到 docs/data/your_run_settings.json（在 Colab 里请克隆仓库后再读，或自己运行 scripts/run_settings.py）")

# %% [markdown]
# ## 动手写：AdamW 要存多少字节
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。

# %%
from rlhf_toy.exercises import check_pass_rate_window, check_training_state_bytes


def my_training_state_bytes(n_params, dtype_bytes=2, mixed_precision=True):
    raise NotImplementedError  # 换成你的实现：返回整数字节数


# %%
result = check_training_state_bytes(my_training_state_bytes)

# %% [markdown]
# ## 动手写：按通过率挑题

# %%
def my_pass_rate_window(correct, n, low=0.2, high=0.8):
    raise NotImplementedError  # 换成你的实现：返回 (P,) 的布尔张量


# %%
result = check_pass_rate_window(my_pass_rate_window)
