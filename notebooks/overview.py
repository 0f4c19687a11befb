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
# # 第 1 章 notebook：查表“语言模型”与种子演示
#
# 20 个提示词，每个提示词 8 个候选回答，恰有一个正确；回答正确得 1 分，否则得 0 分。
# 这个 notebook 调用 `rlhf_toy` 包里的函数：先看一眼策略、采样和奖励的形状，再算出精确的期望奖励，
# 然后运行种子演示（GRPO 与 DPO），最后画出两种算法的学习曲线。在 CPU 上几秒钟跑完。

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
# ## 任务、策略与一组回答
#
# `BanditTask` 保存每个提示词的正确答案，`TablePolicy` 是一张 `(20, 8)` 的 logits 表。
# 对每个提示词采样 $G = 8$ 个回答：同一提示词的回答在批内相邻，所以配提示词用 `repeat_interleave`。

# %%
import torch

from rlhf_toy import BanditTask, TablePolicy

torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=8)
policy = TablePolicy.random(20, 8)

G = 8
prompts = task.prompts()  # (P,)
completions, mask = policy.sample(prompts, G)  # (P * G, 1)，T = 1
rewards = task.reward(prompts.repeat_interleave(G), completions)  # (P * G,)
print("prompts", tuple(prompts.shape), "completions", tuple(completions.shape), "rewards", tuple(rewards.shape))
print("前 3 组的奖励：", rewards.view(-1, G)[:3].int().tolist())

# %% [markdown]
# ## 采样估计与精确期望奖励
#
# 回答只有 8 种，期望奖励可以枚举求和：$\sum_y \pi_\theta(y\mid x)\, r(x, y) = \pi_\theta(y^*_x\mid x)$。
# 本批平均奖励只是它的一个带噪声的估计。

# %%
P, V = task.n_prompts, task.n_answers
all_answers = torch.arange(V).repeat(P).unsqueeze(1)  # 每个提示词的全部 8 个回答
r = task.reward(prompts.repeat_interleave(V), all_answers).view(P, V)
exact = (policy.probs() * r).sum(-1).mean()
print(f"本批平均奖励（采样估计）：{rewards.mean():.3f}")
print(f"精确期望奖励（枚举求和）：{exact:.3f}")
print(f"success_prob：           {task.success_prob(policy):.3f}")

# %% [markdown]
# ## 种子演示
#
# 同一个任务上，先用 GRPO 训练一个随机初始化的查表策略 60 步，再用 DPO 在 20 个固定偏好对上训练另一个 200 步。
# GRPO 取 β = 0.04、`num_iterations=2`、`loss_type="grpo"`（本书的默认值，不是 TRL 的默认值，见第 1 章正文）。
# DPO 各行里的“被拒绝回答”就是被拒回答 $y_l$。

# %%
from rlhf_toy.demos import run_seed

grpo_history, dpo_history = run_seed(seed=0)

# %% [markdown]
# ## 学习曲线
#
# `run_seed` 返回两份每步一个字典的指标历史，键名与 TRL 的日志相同（`success_prob`、`rejected_prob` 是本书自己的评估键）。`success_prob` 是正确回答的平均概率，
# 即精确的期望奖励；GRPO 的 `reward` 是本批平均奖励（采样估计），DPO 的 `rejected_prob` 是被拒回答的平均概率。
# 注意两边的“一步”含义不同：GRPO 每步采样一批并更新 2 次，DPO 每步在全部偏好对上更新 1 次。

# %%
import matplotlib.pyplot as plt

grpo_steps = [h["step"] for h in grpo_history]
dpo_steps = [h["step"] for h in dpo_history]
fig, (ax_grpo, ax_dpo) = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)

ax_grpo.plot(grpo_steps, [h["success_prob"] for h in grpo_history], label="success_prob (exact)")
ax_grpo.plot(grpo_steps, [h["reward"] for h in grpo_history], ".", alpha=0.6, label="reward (batch mean)")
ax_grpo.set_title("GRPO")
ax_grpo.set_xlabel("step (sample + 2 updates)")
ax_grpo.set_ylabel("probability / reward")

ax_dpo.plot(dpo_steps, [h["success_prob"] for h in dpo_history], label="success_prob (chosen)")
ax_dpo.plot(dpo_steps, [h["rejected_prob"] for h in dpo_history], label="rejected_prob")
ax_dpo.set_title("DPO")
ax_dpo.set_xlabel("step (full-batch update)")

for ax in (ax_grpo, ax_dpo):
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    ax.legend(loc="center right")
fig.suptitle("Seed demo: mean probability of the correct answer")
fig.tight_layout()
plt.show()

# %% [markdown]
# 两条 `success_prob` 曲线都从 $1/8$ 附近出发并升到接近 1。GRPO 只看到 0/1 奖励，靠组内比较把概率挪向正确回答；
# 它每步的 `reward` 来自更新**前**采样的那一批，而 `success_prob` 是更新**后**的精确值，所以前 9 步橙色的点都落在蓝线下方。
# DPO 不采样、不打分，只在偏好对上把被选回答往上推、把被拒回答往下压。
# 第 1 章正文解释了这些数字从哪里来，第 5、6 章分别拆开 DPO 与 GRPO 的损失。

# %% [markdown]
# ## 动手写：整条回答的对数概率
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_sequence_logps` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_sequence_logps


def my_sequence_logps(logps, mask):
    raise NotImplementedError  # 换成你的实现：返回形状 (B,)


# %%
result = check_sequence_logps(my_sequence_logps)
