# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/ppo.ipynb)

# %% [markdown]
# # 第 4 章 PPO：RLHF 的经典做法
#
# 用 PPO 优化第 3 章学到的奖励模型：看代理奖励、真实正确概率与到参考模型的 KL 怎样随训练变化，
# 读懂截断比例、近似 KL、解释方差与熵，最后改变 KL 系数 $\beta$，与 KL 正则化目标的精确最优解比较。
# 所有函数都来自 `rlhf_toy` 包，正文见第 4 章。在 CPU 上几秒钟跑完。

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
# ## PPO 对学到的奖励模型
#
# 超参数取 TRL `PPOConfig` 的默认（TRL 删除 PPO 之前的最后版本 v1.12.0；本书固定的 TRL 1.16.0 已没有 PPO）：
# $\beta = 0.05$、$\gamma = 1$、$\lambda = 0.95$、$\epsilon = 0.2$、4 轮；每个提示词采 4 个回答、每轮切成 2 个小批
# （TRL 默认 `num_mini_batches=1`），60 步。查表任务上 $T = 1$，GAE 就是 $r - V(x)$，$\lambda$ 不起作用。
# `success_prob` 与 `kl_to_ref` 是精确的真实指标，训练循环看不到它们。

# %%
import matplotlib.pyplot as plt
import torch

from rlhf_toy import BanditTask, PPOConfig, TablePolicy, TableValueModel, train_ppo
from rlhf_toy.demos.rlhf import build_reward_model, exact_kl

torch.set_num_threads(1)  # 张量都很小：多线程只增加开销（机器繁忙时尤其明显）
torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=8)
reward_model, _, _ = build_reward_model(task)
rm_top1 = (reward_model.table.argmax(dim=1) == task.correct).float().mean().item()
policy = TablePolicy.random(20, 8)
ref_policy = policy.frozen_copy()
start = task.success_prob(policy)


config = PPOConfig(steps=60)


@torch.no_grad()
def ev_ceiling(p):
    """价值表完全准确（V(x) = E[R | x]）时解释方差的上限 1 − E_x Var[R | x] / Var[R]（T = 1，精确计算）。"""
    logp, ref_logp = torch.log_softmax(p.logits, -1), torch.log_softmax(ref_policy.logits, -1)
    prob, ret = logp.exp(), reward_model.table - config.kl_coef * (logp - ref_logp)  # R = s − β·k1
    mean_x = (prob * ret).sum(-1)
    within = (prob * (ret - mean_x[:, None]) ** 2).sum(-1).mean()
    total = (prob * ret**2).sum(-1).mean() - mean_x.mean() ** 2
    return 1.0 - (within / total).item()


def evaluate(p):
    return {"success_prob": task.success_prob(p), "kl_to_ref": exact_kl(p, ref_policy), "ev_ceiling": ev_ceiling(p)}


history = train_ppo(policy, TableValueModel(20), task, config, reward_model, ref_policy, evaluate)
end = history[-1]
print(f"真实正确概率 {start:.3f} → {end['success_prob']:.3f}，KL(π‖π_ref) = {end['kl_to_ref']:.3f} nat")
print(f"奖励模型把正确回答排第一的提示词比例 {rm_top1:.3f}")
assert end["success_prob"] > start + 0.4
assert abs(end["success_prob"] - rm_top1) < 0.05  # 停在奖励模型的水平

steps = [h["step"] for h in history]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
axes[0].plot(steps, [h["objective/scores"] for h in history], label="objective/scores (proxy RM)")
axes[0].plot(steps, [h["success_prob"] for h in history], label="success_prob (true)")
axes[0].axhline(rm_top1, color="gray", linestyle=":", label="RM ranks correct answer first")
axes[0].set_xlabel("step")
axes[0].legend(fontsize=8)
axes[1].plot(steps, [h["objective/kl"] for h in history], label="objective/kl (sampled k1)")
axes[1].plot(steps, [h["kl_to_ref"] for h in history], label="exact KL to reference")
axes[1].set_xlabel("step")
axes[1].set_ylabel("nat")
axes[1].legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 人们盯着看的指标
#
# 查表价值模型只能预测 $\mathbb E[R\mid x]$，解释方差图里的虚线 `ev_ceiling` 是它能达到的解释方差上限（精确计算）；
# `val/explained_variance` 只用一批 80 个样本估计，跟着上限升高，但常常高过它，不能逐步比大小。
# `approxkl_k1`、`approxkl_k3` 都是在同一批样本上、经过前几次更新之后估计的，所以都有偏：第 1 步 $k_1$ 偏低（为负），
# 之后两者都偏高：正文同一次运行打印的第 21–60 步平均，精确值只有 0.0002，两者却还有 0.0051 与 0.0013。
# `approxkl_k3` 每个样本都非负，但同样有偏。
# 见正文“怎么读这张表”。

# %%
fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
for ax, keys in zip(
    axes.flat,
    (
        ("policy/clipfrac_avg", "val/clipfrac_avg"),
        ("policy/approxkl_k1", "policy/approxkl_k3"),
        ("val/explained_variance",),
        ("policy/entropy_avg",),
    ),
    strict=True,
):
    for key in keys:
        ax.plot(steps, [h[key] for h in history], label=key)
    if keys == ("val/explained_variance",):
        ax.plot(steps, [h["ev_ceiling"] for h in history], "k--", label="ev_ceiling (exact)")
    ax.legend(fontsize=8)
for ax in axes[1]:
    ax.set_xlabel("step")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## KL 系数换来了什么
#
# 同一个奖励模型、同一个初始策略，只改 $\beta$。曲线是式 $\pi^* \propto \pi_{\text{ref}}\exp(s/\beta)$ 的精确最优解
# 随 $\beta$ 变化的轨迹，点是 PPO 训练 60 步的终点。

# %%
init = ref_policy
ref_logp = torch.log_softmax(init.logits, -1)
scores = reward_model.table.detach()


def optimum(beta):
    opt_logp = torch.log_softmax(ref_logp + scores / beta, -1)
    success = opt_logp.exp()[task.prompts(), task.correct].mean().item()
    kl = (opt_logp.exp() * (opt_logp - ref_logp)).sum(-1).mean().item()
    return kl, success


betas = [0.05, 0.2, 0.5, 1.0, 2.0]
points = []
for beta in betas:
    torch.manual_seed(1)
    p = TablePolicy(init.logits)
    h = train_ppo(p, TableValueModel(20), task, PPOConfig(kl_coef=beta, steps=60), reward_model, init, task.evaluate)
    points.append((exact_kl(p, init), h[-1]["success_prob"]))
    print(
        f"beta {beta:4.2f}：PPO KL {points[-1][0]:.3f}、正确概率 {points[-1][1]:.3f}；最优解 KL {optimum(beta)[0]:.3f}、正确概率 {optimum(beta)[1]:.3f}"
    )
    assert abs(points[-1][1] - optimum(beta)[1]) < 0.05

grid = torch.logspace(-1.5, 0.7, 40).tolist()
curve = [optimum(b) for b in grid]
fig, ax = plt.subplots(figsize=(5.5, 3.8))
ax.plot([c[0] for c in curve], [c[1] for c in curve], label="exact optimum, varying beta")
ax.scatter([p[0] for p in points], [p[1] for p in points], color="tab:red", zorder=3, label="PPO, 60 steps")
for beta, (kl, success) in zip(betas, points, strict=True):
    ax.annotate(f"beta={beta}", (kl, success), textcoords="offset points", xytext=(5, -10), fontsize=8)
ax.set_xlabel("KL(pi || pi_ref) (nat)")
ax.set_ylabel("true success_prob")
ax.set_title("PPO against a learned reward model")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 动手写：截断策略损失与带掩码的 GAE
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_ppo_policy_loss`、`check_gae_advantages` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_ppo_policy_loss, check_gae_advantages


def my_ppo_policy_loss(logps, old_logps, advantages, mask, epsilon=0.2):
    raise NotImplementedError  # 换成你的实现：返回标量损失


def my_gae_advantages(rewards, values, mask, gamma=1.0, lam=0.95):
    raise NotImplementedError  # 换成你的实现：返回 (advantages, returns)


# %%
result = check_ppo_policy_loss(my_ppo_policy_loss)
result_2 = check_gae_advantages(my_gae_advantages)
