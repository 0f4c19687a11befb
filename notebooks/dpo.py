# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/dpo.ipynb)

# %% [markdown]
# # 第 5 章 notebook：DPO
#
# 在老虎机任务上跑一次 DPO：20 个提示词，每题 8 个候选回答，每个提示词一个偏好对“正确回答 ≻ 随机一个错误回答”。
# 我们看 TRL 同名的隐式奖励指标 `rewards/chosen`、`rewards/rejected`、`rewards/margins` 怎么变化，
# 看被选回答、被拒回答和从没出现在偏好对里的回答各自的概率质量，最后画出损失 $-\log\sigma(\beta\Delta)$
# 与梯度权重 $\sigma(-\beta\Delta)$ 随 $\beta\Delta$ 的曲线。在 CPU 上几秒钟跑完。

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
# ## 在老虎机任务上训练 DPO
#
# 与第 5 章“运行结果”一节相同：$\beta = 0.1$，Adam，学习率 0.5，全批训练 50 步。
# `evaluate` 在每步更新之后记录三类回答的平均概率质量；`loss` 与 `rewards/*` 是用更新之前的策略算的。

# %%
import torch

from rlhf_toy import BanditTask, DPOConfig, TablePolicy, train_dpo

torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=8)
policy = TablePolicy.random(20, 8)
ref = policy.frozen_copy()
prompts, chosen, rejected = pairs = task.preference_pairs()
y_w, y_l = chosen[:, 0], rejected[:, 0]
unseen = torch.ones(20, 8, dtype=torch.bool)  # 从没出现在偏好对里的回答：每题 6 个
unseen[prompts, y_w] = False
unseen[prompts, y_l] = False


def mass(p):
    probs = p.probs().detach()
    return {
        "p_chosen": probs[prompts, y_w].mean().item(),
        "p_rejected": probs[prompts, y_l].mean().item(),
        "p_unseen": (probs * unseen).sum(-1).mean().item(),
    }


start = mass(policy)
history = train_dpo(policy, pairs, DPOConfig(beta=0.1, steps=50), ref_policy=ref, evaluate=mass)
for h in history:
    if h["step"] not in (1, 2, 5, 10, 20, 50):  # 与第 5 章“运行结果”的表格相同的几步
        continue
    print(
        f"step {h['step']:2d}  loss {h['loss']:.4f}  margins {h['rewards/margins']:.3f}  "
        f"p_chosen {h['p_chosen']:.3f}  p_unseen {h['p_unseen']:.3f}"
    )

# %% [markdown]
# ## 画图
#
# 左：隐式奖励。`rewards/chosen` 很快到顶（被选回答的概率最多到 1），间隔的增长几乎全靠压低被拒回答。
# 中：概率质量。没出现过的回答，logit 一点没动，它们的份额是被上涨的被选回答挤掉的。
# 右：损失与梯度权重。排对了的偏好对（$\beta\Delta > 0$）权重迅速趋于 0，排反了的趋于 1；
# 权重用 autograd 从 `dpo_loss` 的梯度反推：$\partial\mathcal L/\partial\log\pi_\theta(y_w) = -\beta\,\sigma(-\beta\Delta)$（$B = 1$）。

# %%
import matplotlib.pyplot as plt

from rlhf_toy import dpo_loss

# 横轴统一为“已做的更新次数”：第 k 步记录的 rewards/* 属于做了 k − 1 次更新的策略，p_* 属于做了 k 次更新的策略。
updates_before = [h["step"] - 1 for h in history]
updates_after = [0] + [h["step"] for h in history]
fig, axes = plt.subplots(1, 3, figsize=(9.5, 3.4))

ax = axes[0]
for key in ("rewards/chosen", "rewards/rejected", "rewards/margins"):
    ax.plot(updates_before, [h[key] for h in history], label=key)
ax.axhline(0.0, color="gray", lw=0.5)
ax.set_xlabel("updates")
ax.set_ylabel("implicit reward  β·log(π/π_ref)")
ax.set_title("Implicit rewards")
ax.legend()

ax = axes[1]
for key, label in (("p_chosen", "chosen y_w"), ("p_rejected", "rejected y_l"), ("p_unseen", "6 unseen answers")):
    ax.plot(updates_after, [start[key]] + [h[key] for h in history], label=label)
ax.set_xlabel("updates")
ax.set_ylabel("mean probability mass")
ax.set_title("Where the probability goes")
ax.legend()

beta = 1.0
scaled_margins = torch.linspace(-6.0, 6.0, 121)
losses, weights = [], []
zero = torch.zeros(1)
for m in scaled_margins:
    # 把 Δ = βΔ / β 直接作为 chosen_logps 传入，其余三个取 0：这里它只是一个数，不必是真正的对数概率
    chosen_logps = (m / beta).reshape(1).requires_grad_(True)
    loss, _ = dpo_loss(chosen_logps, zero, zero, zero, beta=beta)
    loss.backward()
    losses.append(loss.item())
    weights.append(-chosen_logps.grad.item() / beta)
ax = axes[2]
ax.plot(scaled_margins, losses, label="loss  −log σ(βΔ)")
ax.plot(scaled_margins, weights, label="gradient weight  σ(−βΔ)")
ax.axvline(0.0, color="gray", lw=0.5)
ax.set_xlabel("βΔ = r̂(y_w) − r̂(y_l)")
ax.set_title("DPO loss and its gradient weight")
ax.legend()

fig.tight_layout()
plt.show()

# %% [markdown]
# 可以试着改的地方：把 `DPOConfig(beta=0.1, ...)` 换成 `beta=10.0`，看 `p_unseen` 还剩多少；
# 或者把参考模型换成另一张随机表（`TablePolicy.random(20, 8, scale=2.0)`），看 `rewards/chosen` 的上限怎么变。

# %% [markdown]
# ## 动手写：DPO 损失与它的指标
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_dpo_loss` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_dpo_loss


def my_dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1):
    raise NotImplementedError  # 换成你的实现：返回 (loss, metrics)


# %%
result = check_dpo_loss(my_dpo_loss)
