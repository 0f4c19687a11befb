# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/trl.ipynb)

# %% [markdown]
# # 第 10 章：把第 9 章的任务交给 TRL
#
# 同一个两位数加法任务、同一套 token 编号、同一段奖励代码，这次由 TRL 1.16 的 `SFTTrainer` 和 `GRPOTrainer` 训练
# 一个随机初始化的极小 `Qwen2ForCausalLM`：先一个进程，再两个进程。最后画出完整运行（`scripts/run_trl.py`）的奖励曲线
# 和一步训练的时间分解。全部在 CPU 上运行。

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
if importlib.util.find_spec("trl") is None:  # 本章还需要 TRL（本书按 1.16.0 写）
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "trl==1.16.0"], check=True)
    importlib.invalidate_caches()

# 导入 rlhf_toy 时，它在任何张量计算之前固定 CPU 指令集与线程数（见 rlhf_toy.numerics），所以这一格要最先运行。
# 在 x86-64 上，训练过程打印的数字与网页逐位相同；在 ARM 笔记本或换了 torch 版本（例如 Colab 自带的）时可能不同。
# %%
import json
import tempfile
import warnings
from pathlib import Path

# 没装 ipywidgets 的 Jupyter 里，tqdm 在导入时警告“IProgress not found”；进度条下面整个关掉，这条警告也不必看。
warnings.filterwarnings("ignore", message="IProgress not found")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import rlhf_toy  # noqa: E402, F401
from rlhf_toy.demos.trl import run_trl_grpo, sft_warm_start  # noqa: E402
from rlhf_toy.integrations.trl import greedy_accuracy  # noqa: E402
from rlhf_toy.tasks.addition import AdditionTask  # noqa: E402

torch.set_num_threads(1)
# 存取模型时 transformers 的进度条（“Writing model shards”“Loading weights”）夹在结果中间，关掉；
# 这一句同时关掉 huggingface_hub 的进度条。
transformers.utils.logging.disable_progress_bar()

# %% [markdown]
# 本 notebook 的预算都在下面这一格。完整版：SFT 热启动（到训练题正确率 0.5 为止）之后 GRPO 30 步，CPU 上要跑很久（每格打印了用时）；
# 环境变量 `DQN_QUICK=1` 时（CI 重新执行 notebook 时会设）SFT 与 GRPO 都只跑几步，只确认流程能走通。

# %%
QUICK = os.environ.get("DQN_QUICK", "") not in ("", "0")
GRPO_STEPS = None if QUICK else 30  # None：快速版的 3 步

# %% [markdown]
# ## 一个进程：SFTTrainer 热启动，然后 GRPOTrainer
#
# 热启动与第 9 章同一规则，同样全程 float32（桥关掉了 TRL 默认的 bf16 混合精度与梯度检查点），只差在 TRL 默认的梯度范数上限 1.0；
# GRPO 用第 9 章的配置（每步 32 个提示词 × G = 8，`loss_type="dapo"`，`beta=0`）。
# 热启动的模型存到一个临时目录，下面两个进程的运行从它开始。

# %%
task = AdditionTask(seed=0, balanced=True)
model, tokenizer, sft = sft_warm_start(task, quick=QUICK)
warm = tempfile.mkdtemp(prefix="rlhf_toy_warm_")
model.save_pretrained(warm)
print(f"SFTTrainer {sft['steps']} 步，{sft['seconds']:.0f} 秒；留出集贪心正确率 {greedy_accuracy(model, tokenizer, task):.3f}")

one = run_trl_grpo(quick=QUICK, init_from=warm, steps=GRPO_STEPS)

# %% [markdown]
# ## 两个进程
#
# 同一个命令加上 `--processes 2`，`rlhf_toy` 用 `accelerate launch --multi_gpu --num_processes 2` 重新启动自己
# （`use_cpu=True`，gloo 后端）。每个进程生成、打分一半的回答，梯度求平均；最后一行是两个进程各自的参数摘要：
# 训练结束时相同，与 DDP 每步同步梯度一致（只在结束时核对，中间各步没有逐步核对）。
# 这里只跑快速版的 3 步：两个进程各自还要导入一遍 TRL，光启动就要十几秒。

# %%
out = subprocess.run([sys.executable, "-m", "rlhf_toy", "trl", "grpo", "--quick", "--processes", "2", "--init-from", warm],
                     capture_output=True, text=True, check=True)
print(out.stdout)

# %% [markdown]
# ## 完整运行：奖励曲线与一步的时间分解
#
# 下面读 `scripts/run_trl.py` 写的缓存：同一个热启动模型，GRPO 300 步，一个进程与两个进程。
# 右图分成两组，组与组之间不要比较。左边两根柱子是这两次完整运行每步的平均秒数，按部分堆叠；两次运行先后进行，负载不同。
# 右边一组全部来自交替计时的速度对照（同样大小的批、同样的负载起伏）：TRL 的默认设置、只开 bf16、只开梯度检查点、
# 本章的设置（两者都关掉）和本书的循环，每根是每步的平均秒数。跨实现的比较只看这一组。
# bf16 的柱子是在本书的数值设置下测的，oneDNN 限于 AVX2 时 bf16 很慢；缓存之外的一次测量里，三项限制都放开后，
# bf16 与 float32 差不多快（见正文）。
# 机器上同时有别的任务，秒数有噪声（缓存里记了 `os.getloadavg()`）。图里的标签用英文：Colab 默认没有中文字体。

# %%
PART_NAMES = {"生成": "generate", "打分": "reward", "其余准备": "other prep", "前向与损失": "forward + loss",
              "反向传播": "backward", "其余": "optimizer, clipping"}
CONTROL_NAMES = {"trl_defaults": "TRL\ndefaults", "trl_bf16_only": "TRL\nbf16 only",
                 "trl_checkpointing_only": "TRL\ngrad ckpt\nonly", "trl_float32": "TRL\nfloat32",
                 "ours": "rlhf_toy\nloop"}
cache_path = Path("docs/data/trl.json")
if cache_path.exists():
    cache = json.loads(cache_path.read_text(encoding="utf-8"))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1, 1.5]})
    for n, run in cache["grpo"].items():
        rewards = torch.tensor(run["rewards"])
        smooth = torch.nn.functional.avg_pool1d(rewards[None, None], 10, stride=1)[0, 0]
        left.plot(range(10, len(rewards) + 1), smooth, label=f"{n} process(es)")
    left.set(xlabel="step", ylabel="mean reward (10-step moving average)", title="TRL GRPOTrainer")
    left.legend()
    for i, run in enumerate(cache["grpo"].values()):
        bottom = 0.0
        for j, (part, seconds) in enumerate(run["seconds_by_part"].items()):
            right.bar(i, seconds, bottom=bottom, color=f"C{j}", label=PART_NAMES[part] if i == 0 else None)
            bottom += seconds
    means = cache["speed_control"]["means"]
    positions = [3 + k for k in range(len(CONTROL_NAMES))]
    right.bar(positions, [means[key] for key in CONTROL_NAMES], color="gray", label="interleaved control")
    right.axvline(2, color="black", linewidth=0.8, linestyle=":")
    right.set_xticks([0, 1, *positions], ["full run\n1 proc", "full run\n2 procs", *CONTROL_NAMES.values()],
                     fontsize=7)
    right.set(ylabel="seconds per step (mean)", title="where a step goes  |  interleaved control")
    right.legend(fontsize=7)
    fig.tight_layout()
    plt.show()
else:
    print("没有找到 docs/data/trl.json（在 Colab 里请克隆仓库后再读，或自己运行 scripts/run_trl.py）")

# %% [markdown]
# ## 动手写：TRL 的奖励函数
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_addition_reward` 把几组固定的输入（含边界情形）同时交给你的函数和本书的实现，
# 比较返回的奖励，第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.tasks.addition import EOS, decode, encode
from rlhf_toy.exercises import check_addition_reward


def my_addition_reward(completion_ids, a, b, **kwargs):
    raise NotImplementedError  # 换成你的实现：返回 list[float]


# %%
result = check_addition_reward(my_addition_reward)
