# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/reading_logs_more.ipynb)

# %% [markdown]
# # 第 14 章（续）：读懂训练日志——DPO、奖励与数值
#
# 五个症状，每个一次症状运行与一次健康运行，都在第 8 章的老虎机上：DPO 被选回答的对数概率下降、训练奖励上升而正确率不升、
# 梯度范数尖峰、采样器与训练器不一致、截断比例高。每次运行几秒钟（CPU），画出两者的曲线，再用 `diagnose` 读它们的日志。

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
import matplotlib.pyplot as plt

from rlhf_toy.diagnose import diagnose
from rlhf_toy.exercises import check_grad_spike_ratios
from rlhf_toy.studies import symptoms_more as S


def compare(runs, keys, title):
    """每个指标一个面板，症状运行与健康运行画在一起；再打印 diagnose 的结论。"""
    fig, axes = plt.subplots(len(keys), 1, figsize=(6, 2.2 * len(keys)), sharex=True)
    for ax, key in zip(axes, keys, strict=True):
        for name, history in runs.items():
            ax.plot([r["step"] for r in history], [r[key] for r in history], label=name)
        ax.set_ylabel(key, fontsize=8)
    axes[0].set_title(title)
    axes[0].legend(fontsize=7)
    axes[-1].set_xlabel("step")
    plt.show()
    for name, history in runs.items():
        found = [f"{f.symptom}（第 {f.step} 步）" for f in diagnose(history).problems]
        print(f"{name}: {'、'.join(found) or '没有检出症状'}")


# %% [markdown]
# ## DPO：被选回答的对数概率下降
#
# 症状运行保留两条都错的“平局对”（标注员抛硬币），健康运行丢掉它们。两者的间隔都在变大；只有症状运行的 `logps/chosen` 下降，
# 而它的真实答对概率 `success_prob` 同样在上升。

# %%
compare(
    {"coin flip ties": S.run_dpo_ties("coin_flip"), "ties dropped": S.run_dpo_ties("dropped")},
    ["logps/chosen", "rewards/margins", "success_prob"],
    "DPO: chosen log-probs vs margins",
)

# %% [markdown]
# ## 训练奖励上升，正确率不升
#
# GRPO 优化有偏的奖励模型（代理奖励）与真实奖励。训练日志的 `reward` 都在涨；真实正确率只在后者里一直上升。

# %%
compare(
    {"proxy reward": S.run_reward_hacking("proxy"), "true reward": S.run_reward_hacking("true")},
    ["reward", "success_prob", "kl_to_ref"],
    "reward hacking: training reward vs true accuracy",
)

# %% [markdown]
# ## 梯度范数尖峰
#
# 奖励函数的 bug：提示词 0 的一个错误回答得 50 分。优势不缩放时，抽到它的步留下尖峰；按组缩放后尖峰消失，
# 但那个回答的概率 `bug_prob` 照样被推高。

# %%
compare(
    {
        "outlier, scale none": S.run_grad_spike(50.0),
        "no bug": S.run_grad_spike(None),
        "outlier, scale group": S.run_grad_spike(50.0, "group"),
    },
    ["grad_norm", "reward", "bug_prob"],
    "grad_norm spikes from an outlier reward",
)

# %% [markdown]
# ## 采样器与训练器不一致
#
# 采样器只在 top-4 里采样，训练器在全部 8 个回答上算概率。`sampling/*` 指标从第 1 步起越界；正确回答不在 top-4 里的提示词学不会。

# %%
compare(
    {"top-4 sampler": S.run_sampler_mismatch(4), "same sampler": S.run_sampler_mismatch(None)},
    ["sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean", "success_prob"],
    "sampler-trainer mismatch",
)

# %% [markdown]
# ## 截断比例高
#
# 同一批样本上更新 8 步与 2 步（学习率 0.1）。

# %%
compare(
    {"num_iterations=8": S.run_clip_high(num_iterations=8), "num_iterations=2": S.run_clip_high(num_iterations=2)},
    ["clip_ratio", "success_prob", "entropy"],
    "clip ratio",
)

# %% [markdown]
# ## 诊断器读不了的日志
#
# 空日志与含 NaN 的日志：诊断器不猜，直接报错。

# %%
for log in ([], [{"step": 1, "loss": 0.7}, {"step": 2, "loss": float("nan")}]):
    try:
        diagnose(log)
    except ValueError as e:
        print(e)

# %% [markdown]
# ## 动手写：梯度范数的尖峰倍数
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。输入形状 `(N,)` 的 `grad_norm` 序列，返回形状 `(N,)` 的倍数：
# 第 i 条除以此前至多 20 条的中位数（偶数条时取中间两个的平均）；此前不到 5 条时记 0。
# `check_grad_spike_ratios` 比较你的结果与本书的实现，第一处不一致时说出是哪个输入、期望什么、得到了什么。


# %%
def my_grad_spike_ratios(grad_norms):
    raise NotImplementedError  # 换成你的实现：返回与 grad_norms 形状相同的张量


# %%
result = check_grad_spike_ratios(my_grad_spike_ratios)
