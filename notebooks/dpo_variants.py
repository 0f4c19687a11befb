# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/dpo_variants.ipynb)

# %% [markdown]
# # 第 5 章（续）notebook：DPO 家族
#
# 同一个间隔 $\Delta$，DPO 家族的各个成员给出不同的损失和梯度权重 $w(\Delta)$（约定 $-\partial\ell/\partial\Delta = \beta\,w$）。
# 这个 notebook 先画出 sigmoid（DPO）、cDPO、鲁棒 DPO、hinge、IPO、SimPO 的损失与权重曲线，
# 再在老虎机任务上比较 DPO 与 IPO：间隔和到参考模型的 KL 散度怎样随训练步数变化，
# 最后看带噪声的偏好数据上 sigmoid、cDPO、鲁棒 DPO 各学到多强的偏好。在 CPU 上几秒钟跑完。

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
# ## 损失与梯度权重随 $\beta\Delta$ 的变化
#
# 取 $\beta = 1$、$\epsilon = 0.1$、SimPO 的 $\gamma = 0.5$。每个点都由 `dpo_loss` 在一个偏好对上算出
# （把 $\Delta$ 直接作为 `chosen_logps` 传入，其余三个取 0：这里它只是一个数，不必是真正的对数概率；SimPO 没有参考模型，长度取 1），
# 权重用 autograd 反推。看权重曲线与横轴的交点：cDPO 在 $\log 9 \approx 2.2$，IPO 在 $\frac{1}{2\beta} = 0.5$，
# hinge 在 1 之后恒为 0；DPO、SimPO 与鲁棒 DPO 从不为 0。

# %%
import matplotlib.pyplot as plt
import torch

from rlhf_toy import dpo_loss

beta = 1.0
one = torch.ones(1)
zero = torch.zeros(1)
variants = {  # 图例 → dpo_loss 的选项
    "sigmoid (DPO)": {},
    "cDPO ε=0.1": {"label_smoothing": 0.1},
    "robust ε=0.1": {"loss_type": "robust", "label_smoothing": 0.1},
    "hinge": {"loss_type": "hinge"},
    "IPO": {"loss_type": "ipo"},
    "SimPO γ=0.5": {"loss_type": "simpo", "simpo_gamma": 0.5, "chosen_lengths": one, "rejected_lengths": one},
}
deltas = torch.linspace(-3.0, 5.0, 161)
curves = {}
for name, options in variants.items():
    refs = (None, None) if options.get("loss_type") == "simpo" else (zero, zero)
    losses, weights = [], []
    for d in deltas:
        chosen = d.reshape(1).clone().requires_grad_(True)
        loss, _ = dpo_loss(chosen, zero, *refs, beta=beta, **options)
        loss.backward()
        losses.append(loss.item())
        weights.append(-chosen.grad.item() / beta)
    curves[name] = (losses, weights)

fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
for name, (losses, weights) in curves.items():
    axes[0].plot(deltas, losses, label=name)
    axes[1].plot(deltas, weights, label=name)
axes[0].set_ylim(-1.5, 5.0)
axes[0].set_title("Per-pair loss ℓ(Δ)")
axes[1].set_ylim(-2.5, 2.5)
axes[1].set_title("Gradient weight w(Δ) = −(1/β) ∂ℓ/∂Δ")
for ax in axes:
    ax.axhline(0.0, color="gray", lw=0.5)
    ax.axvline(0.0, color="gray", lw=0.5)
    ax.set_xlabel("βΔ  (β = 1)")
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 老虎机上的 DPO 与 IPO
#
# 与第 5 章相同的任务：20 个提示词 × 8 个回答，每题一个确定性的偏好对。$\beta = 0.1$，Adam 学习率 0.5，各训练 150 步。
# 每步更新之后记录平均间隔 $\Delta$ 与精确的 $\mathrm{KL}(\pi_\theta\Vert\pi_{\text{ref}})$。
# DPO 的间隔一直在长；IPO 冲过目标 $\frac{1}{2\beta} = 5$ 后被拉回来，停在 5。

# %%
import torch.nn.functional as F

from rlhf_toy import BanditTask, DPOConfig, TablePolicy, train_dpo

beta = 0.1
runs = {}
for loss_type in ("sigmoid", "ipo"):
    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    policy = TablePolicy.random(20, 8)
    ref = policy.frozen_copy()
    prompts, chosen, rejected = pairs = task.preference_pairs()
    y_w, y_l = chosen[:, 0], rejected[:, 0]
    log_ref = F.log_softmax(ref.logits, -1)

    def drift(p):
        logp = F.log_softmax(p.logits, -1).detach()
        ratio = logp - log_ref
        delta = ratio[prompts, y_w] - ratio[prompts, y_l]
        kl = (logp.exp() * ratio).sum(-1)
        return {"delta": delta.mean().item(), "kl": kl.mean().item()}

    config = DPOConfig(beta=beta, steps=150, loss_type=loss_type)
    runs[loss_type] = train_dpo(policy, pairs, config, ref_policy=ref, evaluate=drift)

for loss_type, history in runs.items():
    last = history[-1]
    print(f"{loss_type:8s} 150 步后：Δ = {last['delta']:.3f}，KL = {last['kl']:.3f}")

fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
for loss_type, history in runs.items():
    steps = [h["step"] for h in history]
    label = "DPO (sigmoid)" if loss_type == "sigmoid" else "IPO"
    axes[0].plot(steps, [h["delta"] for h in history], label=label)
    axes[1].plot(steps, [h["kl"] for h in history], label=label)
axes[0].axhline(1 / (2 * beta), color="gray", ls="--", lw=1, label="IPO target 1/(2β)")
axes[0].set_ylabel("mean margin Δ")
axes[0].set_title("Log-ratio margin over training")
axes[1].set_ylabel("KL(π_θ ‖ π_ref)")
axes[1].set_title("Distance from the reference")
for ax in axes:
    ax.set_xlabel("updates")
    ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 带噪声的偏好：学到的偏好强度
#
# 每题两个回答、10 个偏好对，标签以 0.2 的概率被标反。横轴是每题实际被标反的比例 $q_x$，
# 纵轴是训练 100 步后学到的 $\sigma(\beta\Delta_x)$（点），线是第 5 章（续）“带噪声的数据上，三者各学到什么”一节的驻点公式给出的预测：
# sigmoid 学到 $1-q$，cDPO 再往 $\tfrac12$ 收，鲁棒 DPO 反解噪声（超过 1 的部分取 1：$q \le \epsilon$ 时没有有限的驻点）。

# %%
beta, eps = 0.5, 0.2
torch.manual_seed(0)
task = BanditTask.make(n_prompts=20, n_answers=2)
prompts, chosen, rejected = pairs = task.noisy_preference_pairs(pairs_per_prompt=10, label_noise=0.2)
flipped = (chosen[:, 0] != task.correct[prompts]).float()
q = torch.zeros(20).index_add(0, prompts, flipped) / 10
init = TablePolicy.random(20, 2)
q_line = torch.linspace(0.0, 0.6, 61)
predicted = {
    "sigmoid": 1 - q_line,
    "cDPO ε=0.2": (1 - eps) * (1 - q_line) + eps * q_line,
    "robust ε=0.2": ((1 - q_line - eps) / (1 - 2 * eps)).clamp(max=1.0),
}
options = {"sigmoid": ("sigmoid", 0.0), "cDPO ε=0.2": ("sigmoid", eps), "robust ε=0.2": ("robust", eps)}

fig, ax = plt.subplots(figsize=(6.5, 4.5))
for (name, (loss_type, smoothing)), color in zip(options.items(), ("C0", "C1", "C2"), strict=True):
    policy = TablePolicy(init.logits)
    ref = policy.frozen_copy()
    train_dpo(policy, pairs, DPOConfig(beta=beta, steps=100, loss_type=loss_type, label_smoothing=smoothing), ref_policy=ref)
    shift = (policy.logits - ref.logits).detach()
    rows = torch.arange(20)
    learned = torch.sigmoid(beta * (shift[rows, task.correct] - shift[rows, 1 - task.correct]))
    ax.plot(q_line, predicted[name], color=color, lw=1)
    ax.scatter(q, learned, color=color, label=name, zorder=3)
ax.set_xlabel("fraction of flipped labels q_x")
ax.set_ylabel("learned preference σ(βΔ_x)")
ax.set_title("Label noise: what each loss learns")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# 可以试着改的地方：把 IPO 的 `beta` 换成 0.5 或 1.0，看目标间隔和 KL 怎么变；
# 把噪声实验里鲁棒 DPO 的 `label_smoothing` 设得比真实噪声率（0.2）大或小，看学到的偏好偏向哪边
# （这里的真实偏好是确定性的，所以 ε 估大了正确回答的概率反而更高，见第 5 章（续）的对照实验）。

# %% [markdown]
# ## 动手写：按长度归一化的 IPO
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_ipo_loss` 把几组输入（随机的与边界的）同时交给你的函数和本书的实现，
# 比较值（和梯度），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及这种症状通常来自什么错误；全部通过时说明检查了哪些情形。
# 还没动手时它只提醒你函数还没有实现。想先看看报告长什么样，可以把正文练习里的那个错误写法交给它。

# %%
from rlhf_toy.exercises import check_ipo_loss


def my_ipo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1,
                chosen_lengths=None, rejected_lengths=None):
    raise NotImplementedError  # 换成你的实现：返回标量损失


# %%
result = check_ipo_loss(my_ipo_loss)
