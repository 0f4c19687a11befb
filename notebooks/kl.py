# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/kl.ipynb)

# %% [markdown]
# # 第 7 章 notebook：KL 散度的估计
#
# 三个单样本 KL 估计量 k1 $= -d$、k2 $= \tfrac12 d^2$、k3 $= e^d - d - 1$，其中 $d = \log\pi_{\text{ref}}(y) - \log\pi_\theta(y)$，
# $y\sim\pi_\theta$。这个 notebook 画出：两对分布上三个估计量的直方图（蒙特卡洛），偏差与标准差随两个分布距离的变化，
# 以及把估计量放进损失或奖励时的期望梯度与两个 KL 梯度的对照。所有函数都来自 `rlhf_toy`，正文见第 7 章。在 CPU 上几秒钟跑完。

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
# 在 x86-64 上，训练过程打印的数字与网页逐位相同；在 ARM 笔记本或换了 torch 版本（例如 Colab 自带的）时可能不同。
import rlhf_toy  # noqa: E402, F401

# %% [markdown]
# ## 两对正态分布：三个估计量的直方图
#
# Schulman 的例子：$x\sim q = \mathcal N(0, 1)$（扮演 $\pi_\theta$），$p = \mathcal N(\mu, 1)$（扮演 $\pi_{\text{ref}}$），
# $d = \mu x - \mu^2/2$，真值 $\mathrm{KL}(q\|p) = \mu^2/2$。$\mu = 0.1$ 是接近的一对，$\mu = 1$ 是较远的一对。

# %%
import math

import matplotlib.pyplot as plt
import torch

from rlhf_toy import BanditTask, TablePolicy, kl_estimate
from rlhf_toy.studies.kl_estimators import (
    categorical_log_ratios,
    estimator_stats,
    exact_kl,
    exact_kl_gradient,
    expected_kl_gradient,
    gaussian_log_ratios,
)

generator = torch.Generator().manual_seed(0)
fig, axes = plt.subplots(2, 3, figsize=(9.5, 5.6))
for row, mu in enumerate((0.1, 1.0)):
    true_kl = mu**2 / 2
    d = gaussian_log_ratios(mu, 100_000, generator)
    for col, name in enumerate(("k1", "k2", "k3")):
        values = kl_estimate(torch.zeros_like(d), d, name)
        ax = axes[row, col]
        ax.hist(values.numpy(), bins=100, color=f"C{col}")
        ax.axvline(true_kl, color="k", ls="--", label=f"true KL = {true_kl:.3f}")
        ax.axvline(values.mean().item(), color="r", lw=1, label=f"mean = {values.mean():.4f}")
        ax.set(title=f"{name}, p = N({mu}, 1)", xlabel="estimate (nats)", ylabel="count")
        ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# $\mu = 0.1$：k1 的值在 0 两侧对称地散开（约一半为负），宽度是真值的几十倍；k2、k3 都非负，集中在 0 附近。
# $\mu = 1$：k2 的均值明显高于真值（偏差 $\mu^4/8$），k1、k3 的均值落在真值上。

# %% [markdown]
# ## 老虎机上的两对分布：一批 160 个样本的平均
#
# 参考模型取第 6 章初始策略在第 0 个提示词上的分布（8 个回答）；策略把正确回答的 logit 抬高 `shift`。
# 抬高 0.5 是“接近的一对”，抬高 8 对应训练后期（正确回答的概率约 0.998）。
# 画 2000 批、每批 160 个样本（第 6 章一步的样本数）的批均值的直方图。这对应于本书训练日志里每一步记录的 `kl`，
# 只是日志里的一步混着 20 个提示词、每个 8 个回答，这里只有一个提示词
# （TRL 每 `logging_steps` 步把各步的值再平均一次，样本多得多，见第 7 章）。

# %%
torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=8)
ref_table = TablePolicy.random(20, 8).logits.detach().double().log_softmax(-1)  # (20, 8)
ref_logps, correct = ref_table[0], task.correct[0]


def shifted(shift):
    """把正确回答的 logit 抬高 shift 之后的策略（对数概率）。"""
    logits = ref_logps.clone()
    logits[correct] += shift
    return logits.log_softmax(-1)


fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
for ax, shift in zip(axes, (0.5, 8.0), strict=True):
    logps = shifted(shift)
    true_kl = exact_kl(logps, ref_logps).item()
    d = categorical_log_ratios(logps, ref_logps, 2000 * 160, generator).view(2000, 160)
    for name in ("k1", "k2", "k3"):
        batch_means = kl_estimate(torch.zeros_like(d), d, name).mean(-1) / true_kl
        ax.hist(batch_means.numpy(), bins=80, histtype="step", lw=1.5, label=name)
    ax.axvline(1.0, color="k", ls="--", label="true KL")
    ax.set(
        title=f"shift = {shift}, true KL = {true_kl:.3f}", xlabel="batch mean / true KL (160 samples)", ylabel="batches"
    )
    ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# 接近的一对（左）：k1 的批均值散得最开，k3 最集中，k2 整体偏右（有偏）。
# 远离的一对（右）：大多数批次里一个错误回答也没有，k3 的批均值堆在真值的 0.58 倍处；
# 采到一个错误回答，批均值就跳到真值以上，平均下来仍是真值。k1 的批均值几乎就是真值。

# %% [markdown]
# ## 偏差与标准差随距离变化
#
# 正态分布（Schulman 的例子，$q = \mathcal N(0,1)$，$p = \mathcal N(\mu,1)$）和老虎机上的类别分布
# （对 8 个回答精确求和）。纵轴是相对于真值的标准差，对数坐标。
#
# 正态分布用闭式：$d\sim\mathcal N(-\mu^2/2, \mu^2)$，所以 $\operatorname{Var}k_1 = \mu^2$，
# $\operatorname{Var}k_2 = (2\mu^4 + \mu^6)/4$，$\operatorname{Var}k_3 = \operatorname{Var}e^d + \operatorname{Var}d - 2\operatorname{Cov}(e^d, d)
# = (e^{\mu^2} - 1) + \mu^2 - 2\mu^2 = e^{\mu^2} - 1 - \mu^2$（$\operatorname{Cov}(e^d, d) = \mu^2\,\mathbb E[e^d] = \mu^2$）。
# 不用蒙特卡洛，是因为 $\mu$ 大时 $e^d$ 是 $\sigma = \mu$ 的对数正态分布，几万个样本采不到它的长尾，
# 样本标准差在典型的一次抽样里明显偏低（下面最后一行打印了 $\mu = 2$ 时的对照），这正是第 7 章讲的现象。

# %%
mus = torch.linspace(0.05, 2.0, 15).tolist()
shifts = torch.linspace(0.1, 10.0, 40).tolist()
cat = {name: [] for name in ("k1", "k2", "k3")}
cat_bias = {name: [] for name in ("k1", "k2", "k3")}
gauss = {  # 闭式标准差 / 真值 μ²/2
    "k1": [mu / (mu**2 / 2) for mu in mus],
    "k2": [math.sqrt((2 * mu**4 + mu**6) / 4) / (mu**2 / 2) for mu in mus],
    "k3": [math.sqrt(math.expm1(mu**2) - mu**2) / (mu**2 / 2) for mu in mus],
}
cat_kl = []
for shift in shifts:
    logps = shifted(shift)
    true_kl = exact_kl(logps, ref_logps).item()
    cat_kl.append(true_kl)
    for name, s in estimator_stats(ref_logps - logps, weights=logps.exp()).items():
        cat[name].append(s.std / true_kl)
        cat_bias[name].append((s.mean - true_kl) / true_kl)

fig, axes = plt.subplots(1, 3, figsize=(9.5, 3.4))
for name in ("k1", "k2", "k3"):
    axes[0].plot([m**2 / 2 for m in mus], gauss[name], label=name)
    axes[1].plot(cat_kl, cat[name], label=name)
    axes[2].plot(cat_kl, cat_bias[name], label=name)
axes[0].set(
    xscale="log",
    yscale="log",
    xlabel="true KL (nats)",
    ylabel="stdev / true KL",
    title="Gaussians N(0,1) vs N(mu,1), closed form",
)
axes[1].set(yscale="log", xlabel="true KL (nats)", ylabel="stdev / true KL", title="bandit prompt 0, exact")
axes[2].set(xlabel="true KL (nats)", ylabel="bias / true KL", title="bandit prompt 0, exact bias")
for ax in axes:
    ax.legend()
fig.tight_layout()
plt.show()
for j in (0, len(mus) - 1):
    print(f"mu = {mus[j]:.2f}（KL = {mus[j] ** 2 / 2:.3f}）：标准差/真值 " + "，".join(f"{n} {gauss[n][j]:.2f}" for n in gauss))
j = next(j for j in range(len(mus)) if gauss["k3"][j] > gauss["k1"][j])
print(f"k3 的相对标准差第一次超过 k1：mu = {mus[j]:.2f}（KL = {mus[j] ** 2 / 2:.3f}）")
mc = estimator_stats(gaussian_log_ratios(2.0, 50_000, torch.Generator().manual_seed(1)))["k3"].std / 2.0
print(f"mu = 2.00 时 k3 的标准差/真值：精确 {gauss['k3'][-1]:.2f}，5 万个样本的蒙特卡洛 {mc:.2f}")

# %% [markdown]
# 两个分布接近时（左端）k1 的相对标准差按 $1/\sqrt{\text{KL}}$ 发散，k2、k3 只有 1.4 左右（上面打印的第一行）。
# 距离变大后 k2、k3 的相对标准差都上升，k1 的一路下降；KL 超过某个值之后 k3 反而比 k1 差（上面打印的交叉点和第二行）：
# 正态分布上也有与老虎机相同的交叉。
# 老虎机上把正确回答抬得越高，k3 的相对标准差先降后升：策略越集中，错误回答上的 $e^d = \pi_{\text{ref}}/\pi_\theta$ 越大。
# 右图：k1、k3 的偏差恒为 0（精确求和），k2 的偏差随距离变化。

# %% [markdown]
# ## 放进损失、放进奖励：期望梯度
#
# 20 个提示词，策略在参考模型上把正确回答抬高 3。对 logits 的期望梯度（每单位 $\beta$）逐分量对着
# 反向 KL 的梯度 $\nabla\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$（横轴）画散点：落在对角线上就是反向 KL。

# %%
logits = ref_table.clone()
logits[task.prompts(), task.correct] += 3.0
reverse = exact_kl_gradient(logits, ref_table, "reverse").flatten()
forward = exact_kl_gradient(logits, ref_table, "forward").flatten()
rules = [("loss", "k1"), ("loss", "k2"), ("loss", "k3"), ("loss", "k3_corrected"), ("reward", "k1"), ("reward", "k3")]
fig, axes = plt.subplots(2, 3, figsize=(9.5, 5.6), sharex=True, sharey=True)
for ax, (placement, estimator) in zip(axes.flat, rules, strict=True):
    g = expected_kl_gradient(logits, ref_table, estimator, placement).flatten()
    ax.scatter(reverse, forward, s=8, color="0.8", label="forward KL grad")
    ax.scatter(reverse, g, s=8, label="expected grad")
    lim = reverse.abs().max().item() * 1.1
    ax.plot([-lim, lim], [-lim, lim], "k--", lw=0.8)
    ax.set(title=f"{estimator} in {placement}")
for ax in axes[1]:
    ax.set_xlabel("reverse-KL grad")
for ax in axes[:, 0]:
    ax.set_ylabel("gradient component")
axes[0, 0].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# k1 进损失：全部为 0。k2 进损失、修正 k3 进损失、k1 进奖励：落在对角线上（反向 KL）。
# k3 进损失：与灰点（正向 KL 的梯度）重合。k3 进奖励：两者都不是。

# %% [markdown]
# ## 动手写：三个估计量与限幅
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_kl_estimate` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_kl_estimate


def my_kl_estimate(logps, ref_logps, estimator="k3", *, log_ratio_clamp=None, value_clamp=None):
    raise NotImplementedError  # 换成你的实现：返回形状同 logps


# %%
result = check_kl_estimate(my_kl_estimate)
