"""章节页上的图：每张图一个短函数，数据由 rlhf_toy 自己的函数算出，写成 docs/figures/<章>-<内容>.svg。

    .venv/bin/python scripts/figures.py                 # 重画全部（make figures），含第 8 章的两张（读它的缓存）
    .venv/bin/python scripts/figures.py ppo-clip        # 只画名字里含 ppo-clip 的图
    .venv/bin/python scripts/figures.py --refresh-cache # 重跑第 9 章的训练（几分钟），写 docs/data/tiny_lm_figures.json

绝大多数图是闭式或几毫秒的查表训练，每次重算；要训练极小 Transformer 的两张（第 9 章）读缓存
`docs/data/tiny_lm_figures.json`，缓存记着它来自哪份代码（`code_hash`）。`tests/test_figures.py` 把每张图重画到
临时目录并与提交的文件逐字节比较。输出是确定的：Agg 后端、文字写成 SVG 的 <text>（`svg.fonttype: none`）、
固定的 `svg.hashsalt`、元数据里没有日期和版本；版面按 Noto Sans CJK SC 的字宽排（没有这个字体就报错）。

版式：宽 4.8 英寸（浏览器里约 460 px，手机上缩到约 360 px 时 10 pt 的字仍有约 10 px），多个面板上下叠放，
背景透明；深色模式下 docs/stylesheets/extra.css 把图反色（保留色相）。
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

# 先 import rlhf_toy（固定数值设置），再导入 torch
import rlhf_toy  # noqa: E402, F401, I001
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

OUT = ROOT / "docs" / "figures"
TINY_LM_CACHE = ROOT / "docs" / "data" / "tiny_lm_figures.json"
TRL_CACHE = ROOT / "docs" / "data" / "trl.json"
WIDTH = 4.8  # 英寸
FONT = "Noto Sans CJK SC"
STYLE = {
    "font.family": [FONT, "DejaVu Sans"],
    "axes.unicode_minus": False,
    "font.size": 10,
    "axes.labelsize": 10,
    "axes.titlesize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.6,
    "legend.frameon": False,
    "figure.dpi": 72,
    "savefig.transparent": True,
    "svg.hashsalt": "rlhf-toy",
    # 文字写成 SVG 的 <text>（浏览器用系统的中文字体排），不把字形转成路径：图小一半，文字可选中
    "svg.fonttype": "none",
}
# 没有创建日期与 matplotlib 版本：图没变，文件就逐字节相同。
SVG_METADATA = {"Date": None, "Creator": None}
GREY = "#777777"


def setup():
    """Agg 后端与本书的版式；返回 pyplot。"""
    import matplotlib

    matplotlib.use("Agg")  # 脚本不在 notebook 里，可以选后端
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    plt.rcParams.update(STYLE)
    if FONT not in {f.name for f in font_manager.fontManager.ttflist}:
        # matplotlib 的字体缓存建于字体安装之前时找不到它：只在本进程里补上，不改缓存
        for font in font_manager.findSystemFonts():
            if Path(font).name.startswith("NotoSansCJK"):
                font_manager.fontManager.addfont(font)
    if FONT not in {f.name for f in font_manager.fontManager.ttflist}:
        raise RuntimeError(f"图按 {FONT} 的字宽排版，请先安装（Debian：apt-get install fonts-noto-cjk）")
    return plt


def save(fig, path: Path) -> None:
    fig.savefig(path, metadata=SVG_METADATA)
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)


def panels(n: int, height: float = 2.3, **kw):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(n, 1, figsize=(WIDTH, height * n + 0.2), layout="constrained", **kw)
    return fig, axes


def bandit(seed: int = 0):
    """各章共用的起点：种子 0 的老虎机任务与近似均匀的随机查表策略（与页面代码块相同的随机数抽取顺序）。"""
    from rlhf_toy import BanditTask, TablePolicy

    torch.manual_seed(seed)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    policy = TablePolicy.random(20, 8)
    return task, policy


# --- 第 1 章 ---------------------------------------------------------------------------------------


def overview_pipeline(path: Path) -> None:
    """SFT → 奖励模型 → RL 的流程图，DPO 从 SFT 直接到策略。"""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(WIDTH, 2.5), layout="constrained")
    ax.set(xlim=(0, 10.2), ylim=(0.2, 5.3))
    ax.axis("off")
    boxes = {
        "sft": (0.1, 2.5, "SFT\n模仿示范", "#dbe7f5"),
        "rm": (2.7, 2.5, "奖励模型\n学偏好打分", "#fbe3cc"),
        "rl": (5.3, 2.5, "RL\nPPO / GRPO", "#d9efd9"),
        "pi": (7.9, 2.5, "策略 $\\pi_\\theta$\n对齐后", "#ececec"),
    }
    w, h = 2.0, 1.5
    for x, y, text, color in boxes.values():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05,rounding_size=0.2", fc=color, ec="#444"))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9.5, linespacing=1.4)
    arrow = {"arrowstyle": "-|>", "color": "#444", "lw": 1.3, "mutation_scale": 12}
    for a, b in (("sft", "rm"), ("rm", "rl"), ("rl", "pi")):
        ax.annotate("", xy=(boxes[b][0], 3.25), xytext=(boxes[a][0] + w, 3.25), arrowprops=arrow)
    # 参考模型：SFT 模型的冻结副本，拴住 RL
    ax.annotate(
        "",
        xy=(boxes["rl"][0] + w / 2, 4.0),
        xytext=(boxes["sft"][0] + w / 2, 4.0),
        arrowprops={**arrow, "ls": "--", "connectionstyle": "arc3,rad=-0.25"},
    )
    ax.text(3.4, 5.0, "冻结副本 = 参考模型 $\\pi_{\\mathrm{ref}}$（KL 惩罚的锚点）", ha="center", fontsize=9)
    # DPO：不训练奖励模型、不采样
    ax.annotate(
        "",
        xy=(boxes["pi"][0] + w / 2, 2.5),
        xytext=(boxes["sft"][0] + w / 2, 2.5),
        arrowprops={**arrow, "color": "#b0413e", "connectionstyle": "arc3,rad=0.22"},
    )
    ax.text(5.0, 0.75, "DPO：直接在偏好对上训练（不要奖励模型，不采样）", ha="center", fontsize=9, color="#b0413e")
    save(fig, path)


def overview_optimum(path: Path) -> None:
    """一个提示词上的 π_ref 与几个 β 下的闭式最优解 π* ∝ π_ref·exp(r/β)。"""
    import matplotlib.pyplot as plt

    from rlhf_toy.studies.kl_estimators import reverse_kl_optimum

    task, policy = bandit()
    ref_logps = F.log_softmax(policy.frozen_copy().logits[0], -1).double()  # 提示词 0
    rewards = F.one_hot(task.correct[0], 8).double()
    series = [("$\\pi_{\\mathrm{ref}}$", ref_logps.exp())]
    series += [(f"$\\pi^*$，β = {b:g}", reverse_kl_optimum(ref_logps, rewards, b).exp()) for b in (1.0, 0.5, 0.2)]
    fig, ax = plt.subplots(figsize=(WIDTH, 2.7), layout="constrained")
    width = 0.2
    colors = ["#999999", "#9ecae1", "#4292c6", "#08519c"]
    for i, ((label, probs), color) in enumerate(zip(series, colors, strict=True)):
        ax.bar(torch.arange(8) + (i - 1.5) * width, probs.tolist(), width, label=label, color=color)
    c = task.correct[0].item()
    ax.set_xticks(range(8), [f"{y}{' ✓' if y == c else ''}" for y in range(8)])
    ax.set(xlabel="回答 y（✓ 是正确回答，奖励 1；其余为 0）", ylabel="概率", ylim=(0, 1.0))
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper left", ncol=2)
    save(fig, path)


# --- 第 2 章 ---------------------------------------------------------------------------------------


def policy_gradient_estimates(path: Path) -> None:
    """单批梯度估计 ĝ 在真实梯度 g 周围的散布：无基线与 RLOO，奖励加 0 与加 1。"""
    from rlhf_toy import reinforce_loss
    from rlhf_toy.studies.gradient_variance import expected_reward
    from rlhf_toy.train.reinforce import reinforce_advantages

    task, policy = bandit()
    (g,) = torch.autograd.grad(-expected_reward(policy, task), policy.logits)
    g = g.flatten()
    k, n_batches = 4, 300
    prompts = task.prompts()
    group_prompts = prompts.repeat_interleave(k)

    def estimates(baseline: str, offset: float) -> torch.Tensor:
        out = []
        for _ in range(n_batches):
            completions, mask = policy.sample(prompts, k)
            rewards = task.reward(group_prompts, completions) + offset
            advantages = reinforce_advantages(rewards, k, baseline)
            loss, _ = reinforce_loss(policy.logps(group_prompts, completions), advantages, mask)
            (grad,) = torch.autograd.grad(loss, policy.logits)
            out.append(grad.flatten())
        return torch.stack(out)

    torch.manual_seed(1)
    runs = {(b, o): estimates(b, o) for o in (0.0, 1.0) for b in ("none", "rloo")}
    u = g / g.norm()
    resid = runs[("none", 1.0)] - runs[("none", 1.0)] @ u[:, None] * u  # 与 g 正交的部分
    v = torch.linalg.svd(resid - resid.mean(0), full_matrices=False).Vh[0]  # 它散得最开的方向
    fig, axes = panels(2, 2.4, sharex=True, sharey=True)
    names = {"none": "无基线", "rloo": "RLOO"}
    colors = {"none": "#9e9e9e", "rloo": "#d95f02"}
    for ax, offset in zip(axes, (0.0, 1.0), strict=True):
        for baseline in ("none", "rloo"):
            est = runs[(baseline, offset)] / g.norm()
            ax.scatter(est @ u, est @ v, s=6, alpha=0.55, lw=0, color=colors[baseline], label=names[baseline])
        ax.plot([1.0], [0.0], marker="*", ms=12, color="black", ls="none", label="真实梯度 g")
        ax.set_title(f"每个奖励加 {offset:g}（真实梯度不变）", loc="left")
        ax.set_ylabel("与 g 垂直的分量 / |g|")
    axes[1].set_xlabel("沿 g 方向的分量 / |g|（无偏时平均为 1）")
    legend = axes[0].legend(loc="lower right", ncol=3, handletextpad=0.2)
    for handle in legend.legend_handles[:2]:
        handle.set_sizes([30])
    save(axes[0].figure, path)


# --- 第 3 章 ---------------------------------------------------------------------------------------


def reward_model_sigmoid(path: Path) -> None:
    """Bradley–Terry：偏好概率 σ(Δ) 与梯度权重 σ(−Δ)（由 bradley_terry_loss 与 autograd 得到）。"""
    import matplotlib.pyplot as plt

    from rlhf_toy import bradley_terry_loss

    deltas = torch.linspace(-6, 6, 241)
    probs, weights = [], []
    for d in deltas:
        chosen = d.clone().reshape(1).requires_grad_(True)
        loss, _ = bradley_terry_loss(chosen, torch.zeros(1))
        loss.backward()
        probs.append(torch.exp(-loss).item())  # 损失 = −log σ(Δ)
        weights.append(-chosen.grad.item())  # −∂L/∂r_w = σ(−Δ)
    fig, ax = plt.subplots(figsize=(WIDTH, 2.6), layout="constrained")
    ax.plot(deltas, probs, color="#1f77b4", label="偏好概率 σ(Δ)")
    ax.plot(deltas, weights, color="#d95f02", ls="--", label="梯度权重 σ(−Δ)")
    ax.axvline(0, color=GREY, lw=0.8)
    ax.set(xlabel="间隔 Δ = r(y_w) − r(y_l)", ylim=(-0.02, 1.02))
    ax.legend(loc="center left")
    ax.annotate(
        "排得越对，推力越小，\n但永远不为 0",
        xy=(4.0, 0.02),
        xytext=(1.9, 0.38),
        fontsize=9,
        arrowprops={"arrowstyle": "->", "color": GREY},
    )
    save(fig, path)


def reward_model_table(path: Path) -> None:
    """标签噪声 0.2 下学到的 20 × 8 奖励表，方框标出正确回答。"""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from rlhf_toy import BanditTask
    from rlhf_toy.demos.rlhf import build_reward_model

    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    reward_model, _, _ = build_reward_model(task, label_noise=0.2)
    table = reward_model.table.detach()
    lim = table.abs().max().item()
    fig, ax = plt.subplots(figsize=(WIDTH, 2.9), layout="constrained")
    image = ax.imshow(table.T, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    for x, y in enumerate(task.correct.tolist()):
        ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, ec="black", lw=1.4))
    ax.set_xticks(range(0, 20, 2))
    ax.set_yticks(range(8))
    ax.set(xlabel="提示词 x（方框：正确回答）", ylabel="回答 y")
    ax.grid(False)
    fig.colorbar(image, ax=ax, label="奖励 r(x, y)", shrink=0.9, pad=0.02)
    save(fig, path)


# --- 第 4 章 ---------------------------------------------------------------------------------------


def ppo_clip(path: Path) -> None:
    """截断代理目标 L^CLIP 随比率 w 的变化，A > 0 与 A < 0；灰色区域里 autograd 给出的梯度恰为 0。"""
    from rlhf_toy.losses.grpo import clipped_surrogate

    epsilon = 0.2
    w = torch.linspace(0.5, 1.5, 401, dtype=torch.float64)
    fig, axes = panels(2, 2.2, sharex=True)
    for ax, advantage in zip(axes, (1.0, -1.0), strict=True):
        logps = w.log().reshape(-1, 1).requires_grad_(True)
        per_token_loss, _ = clipped_surrogate(
            logps, torch.zeros_like(logps), torch.full_like(logps, advantage), epsilon
        )
        (grad,) = torch.autograd.grad(per_token_loss.sum(), logps)
        objective = -per_token_loss.detach()[:, 0]  # 损失 = −目标
        zero = (grad[:, 0] == 0).numpy()
        ax.fill_between(w, 0, 1, where=zero, transform=ax.get_xaxis_transform(), color=GREY, alpha=0.25, lw=0)
        ax.plot(w, w * advantage, color=GREY, ls=":", lw=1.2, label="不截断：w·A")
        ax.plot(w, objective, color="#1f77b4" if advantage > 0 else "#d62728", label="$L^{\\mathrm{CLIP}}$")
        for x in (1 - epsilon, 1 + epsilon):
            ax.axvline(x, color=GREY, lw=0.8, ls="--")
        side = "w > 1+ε\n已经涨够了" if advantage > 0 else "w < 1−ε\n已经降够了"
        ax.text(
            1.35 if advantage > 0 else 0.65,
            0.42 if advantage > 0 else 0.5,
            f"梯度为 0\n{side}",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize=9,
        )
        ax.set_title(f"A = {advantage:+g}（{'好' if advantage > 0 else '坏'} token）", loc="left")
        ax.set_ylabel("目标（= −损失）")
        ax.grid(False)
    axes[0].legend(loc="upper left")
    axes[1].legend(loc="upper right")
    axes[1].set_xticks([0.5, 0.8, 1.0, 1.2, 1.5], ["0.5", "1−ε\n0.8", "1", "1+ε\n1.2", "1.5"])
    axes[1].set_xlabel("重要性采样比率 w = π_θ / π_old")
    save(axes[0].figure, path)


def ppo_token_strip(path: Path) -> None:
    """一批补齐到 T = 4 的回答：逐 token 奖励里 −βk_t、分数 s 与掩码的位置；本书 vs TRL 的两种填充设置。"""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from rlhf_toy import kl_penalized_rewards

    # 与第 4 章“用法：T > 1 的逐 token 奖励与 GAE”相同的两条回答
    logps = torch.log(torch.tensor([[0.5, 0.6, 0.9, 0.8], [0.3, 0.7, 0.5, 0.5]]))
    ref_logps = torch.log(torch.tensor([[0.4, 0.6, 0.6, 0.9], [0.3, 0.35, 0.5, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    scores = torch.tensor([1.0, -1.0])
    beta = 0.1
    ours, _ = kl_penalized_rewards(scores, logps, ref_logps, mask, kl_coef=beta)
    kl_only, _ = kl_penalized_rewards(torch.zeros(2), logps, ref_logps, mask, kl_coef=beta)
    # TRL，填充符 ≠ EOS：分数落在 EOS 之后的第一个填充位置（掩码为 0），那里没有 KL 项
    trl_pad = kl_only[1].clone()
    trl_pad[int(mask[1].sum())] += scores[1]
    # TRL，填充符 = EOS：EOS 本身算第一个填充位置，它的对数概率不进损失，分数落在它上面
    eos_mask = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    trl_eos, _ = kl_penalized_rewards(torch.zeros(1), logps[1:], ref_logps[1:], eos_mask, kl_coef=beta)
    trl_eos = trl_eos[0].clone()
    trl_eos[1] += scores[1]
    rows = [
        ("本书：回答 1", ours[0], kl_only[0], mask[0], 3, 3),
        ("本书：回答 2", ours[1], kl_only[1], mask[1], 1, 1),
        ("TRL，填充符 ≠ EOS", trl_pad, kl_only[1], mask[1], 2, 1),
        ("TRL，填充符 = EOS", trl_eos, trl_eos * (1 - F.one_hot(torch.tensor(1), 4)), eos_mask[0], 1, 1),
    ]
    tokens = [
        ["y₁", "y₂", "y₃", "EOS"],
        ["y₁", "EOS", "PAD", "PAD"],
        ["y₁", "EOS", "PAD", "PAD"],
        ["y₁", "EOS", "EOS", "EOS"],
    ]
    fig, ax = plt.subplots(figsize=(WIDTH, 3.3), layout="constrained")
    ax.set(xlim=(-2.35, 4.02), ylim=(len(rows) + 0.05, -0.55))
    ax.axis("off")
    for t in range(4):
        ax.text(t + 0.5, -0.3, f"t = {t}", ha="center", fontsize=9)
    for i, ((label, r, kl_part, m, score_at, _eos), toks) in enumerate(zip(rows, tokens, strict=True)):
        ax.text(-0.1, i + 0.5, label, ha="right", va="center", fontsize=9)
        for t in range(4):
            real = m[t] > 0
            ax.add_patch(
                Rectangle(
                    (t + 0.04, i + 0.06),
                    0.92,
                    0.88,
                    fc="#dbe7f5" if real else "#eeeeee",
                    ec="#d95f02" if t == score_at else "#999999",
                    lw=2.2 if t == score_at else 0.8,
                    hatch=None if real else "///",
                )
            )
            ax.text(t + 0.5, i + 0.27, toks[t], ha="center", va="center", fontsize=9, color="#555555")
            k = kl_part[t].item() + 0.0
            text = f"{r[t].item():+.3f}" if (real or t == score_at) else "0"
            ax.text(
                t + 0.5,
                i + 0.62,
                text,
                ha="center",
                va="center",
                fontsize=9.5,
                weight="bold" if t == score_at else "normal",
            )
            del k
    ax.text(
        -2.3,
        len(rows) - 0.02,
        "格内数字：r_t = −βk_t（+ 分数 s，橙框）；斜线格：掩码为 0，不进策略损失",
        fontsize=8.6,
        va="top",
    )
    save(fig, path)


# --- 第 5 章 ---------------------------------------------------------------------------------------


def pair_curves(deltas: torch.Tensor, beta: float, loss_type: str, label_smoothing: float = 0.0):
    """一条曲线：逐对损失 ℓ(Δ) 与梯度权重 w = −(1/β)∂ℓ/∂Δ（dpo_pair_losses 与 autograd）。"""
    from rlhf_toy.losses.dpo import dpo_pair_losses

    margins = deltas.clone().requires_grad_(True)
    losses = dpo_pair_losses(margins, beta=beta, loss_type=loss_type, label_smoothing=label_smoothing)
    (grad,) = torch.autograd.grad(losses.sum(), margins)
    return losses.detach(), -grad / beta


def dpo_weight(path: Path) -> None:
    """DPO 的逐对损失 −log σ(βΔ) 与梯度权重 σ(−βΔ)，横轴 βΔ。"""
    import matplotlib.pyplot as plt

    x = torch.linspace(-4, 6, 201, dtype=torch.float64)
    loss, weight = pair_curves(x, 1.0, "sigmoid")  # β = 1：横轴就是 βΔ
    fig, ax = plt.subplots(figsize=(WIDTH, 2.6), layout="constrained")
    ax.plot(x, loss, color="#1f77b4", label="损失 ℓ = −log σ(βΔ)")
    ax.plot(x, weight, color="#d95f02", ls="--", label="梯度权重 σ(−βΔ)")
    ax.axvline(0, color=GREY, lw=0.8)
    ax.plot([0, 0], [weight[80].item(), loss[80].item()], "o", color="black", ms=4)
    ax.text(0.15, 0.72, "起点 Δ = 0：log 2 与 1/2", fontsize=9)
    ax.set(xlabel="βΔ（隐式奖励间隔）", ylim=(-0.05, 3))
    ax.legend(loc="upper right")
    save(fig, path)


def dpo_mass(path: Path) -> None:
    """DPO 训练 50 步：被选、被拒、没出现过的回答的概率质量（第 5 章运行结果的设置）。"""
    import matplotlib.pyplot as plt

    from rlhf_toy import DPOConfig, train_dpo

    task, policy = bandit()
    ref = policy.frozen_copy()
    prompts, chosen, rejected = pairs = task.preference_pairs()
    y_w, y_l = chosen[:, 0], rejected[:, 0]

    def mass(p):
        probs = p.probs().detach()
        return {"p_chosen": probs[prompts, y_w].mean().item(), "p_rejected": probs[prompts, y_l].mean().item()}

    start = mass(policy)
    history = [{"step": 0, **start}] + train_dpo(
        policy, pairs, DPOConfig(beta=0.1, steps=50), ref_policy=ref, evaluate=mass
    )
    steps = [h["step"] for h in history]
    chosen_mass = [h["p_chosen"] for h in history]
    rejected_mass = [h["p_rejected"] for h in history]
    unseen_mass = [1 - a - b for a, b in zip(chosen_mass, rejected_mass, strict=True)]
    fig, ax = plt.subplots(figsize=(WIDTH, 2.6), layout="constrained")
    ax.stackplot(
        steps,
        chosen_mass,
        rejected_mass,
        unseen_mass,
        colors=["#4c9f50", "#d62728", "#bdbdbd"],
        labels=["被选回答 y_w", "被拒回答 y_l", "6 个没出现过的回答"],
        alpha=0.85,
    )
    ax.set(xlabel="训练步数（β = 0.1，Adam 学习率 0.5）", ylabel="平均概率质量", xlim=(0, 50), ylim=(0, 1))
    ax.legend(loc="center right")
    save(fig, path)


def dpo_variants_losses(path: Path) -> None:
    """七种 loss_type 里五条不同的曲线：损失与梯度权重随 Δ 的变化（β = 1、ε = 0.1，同页面的表）。"""
    deltas = torch.linspace(-2, 6, 321, dtype=torch.float64)
    variants = [
        ("sigmoid", "sigmoid", 0.0, "#1f77b4", "-"),
        ("cDPO ε=0.1", "sigmoid", 0.1, "#17becf", "--"),
        ("robust ε=0.1", "robust", 0.1, "#9467bd", "-."),
        ("hinge", "hinge", 0.0, "#d95f02", "-"),
        ("ipo", "ipo", 0.0, "#2ca02c", "-"),
    ]
    fig, axes = panels(2, 2.3, sharex=True)
    for name, loss_type, eps, color, ls in variants:
        loss, weight = pair_curves(deltas, 1.0, loss_type, eps)
        axes[0].plot(deltas, loss, color=color, ls=ls, label=name)
        axes[1].plot(deltas, weight, color=color, ls=ls, label=name)
    axes[0].set(ylabel="逐对损失 ℓ", ylim=(-1, 3.2))
    axes[1].set(ylabel="梯度权重 w", ylim=(-1.2, 1.3), xlabel="间隔 Δ（β = 1）")
    axes[1].axhline(0, color=GREY, lw=0.8)
    axes[0].legend(loc="upper right", ncol=2)
    save(axes[0].figure, path)


def dpo_variants_ipo(path: Path) -> None:
    """DPO 与 IPO 在老虎机上训练 100 步：平均间隔 Δ 与精确的 KL(π_θ‖π_ref)。"""
    from rlhf_toy import DPOConfig, train_dpo
    from rlhf_toy.policies.table import exact_kl

    beta = 0.1
    runs = {}
    for loss_type in ("sigmoid", "ipo"):
        task, policy = bandit()
        ref = policy.frozen_copy()
        prompts, chosen, rejected = pairs = task.preference_pairs()
        y_w, y_l = chosen[:, 0], rejected[:, 0]
        log_ref = F.log_softmax(ref.logits, -1)

        def drift(p, prompts=prompts, y_w=y_w, y_l=y_l, log_ref=log_ref, ref=ref):
            ratio = F.log_softmax(p.logits, -1).detach() - log_ref
            return {"delta": (ratio[prompts, y_w] - ratio[prompts, y_l]).mean().item(), "exact_kl": exact_kl(p, ref)}

        config = DPOConfig(beta=beta, steps=100, loss_type=loss_type)
        runs[loss_type] = train_dpo(policy, pairs, config, ref_policy=ref, evaluate=drift)
    fig, axes = panels(2, 2.2, sharex=True)
    for loss_type, color in (("sigmoid", "#1f77b4"), ("ipo", "#2ca02c")):
        h = runs[loss_type]
        steps = [r["step"] for r in h]
        label = "DPO（sigmoid）" if loss_type == "sigmoid" else "IPO"
        axes[0].plot(steps, [r["delta"] for r in h], color=color, label=label)
        axes[1].plot(steps, [r["exact_kl"] for r in h], color=color, label=label)
    axes[0].axhline(1 / (2 * beta), color=GREY, ls="--", lw=1)
    axes[0].text(100, 1 / (2 * beta) + 1.5, "IPO 的目标间隔 1/(2β) = 5", ha="right", fontsize=9, color=GREY)
    axes[0].set(ylabel="平均间隔 Δ")
    axes[1].set(ylabel="精确 KL(π_θ‖π_ref)", xlabel="训练步数（β = 0.1，Adam 学习率 0.5）", xlim=(0, 100))
    axes[0].legend(loc="upper left")
    save(axes[0].figure, path)


# --- 第 6 章 ---------------------------------------------------------------------------------------


def grpo_iterations(path: Path) -> None:
    """GRPO 默认配置跑 40 步，num_iterations = 1 与 2：正确概率、记录的 k3 与精确 KL、clip_ratio。"""
    from rlhf_toy import GRPOConfig, train_grpo
    from rlhf_toy.policies.table import exact_kl

    runs = {}
    for mu in (1, 2):
        task, policy = bandit()
        ref = policy.frozen_copy()

        def evaluate(p, task=task, ref=ref):
            return {**task.evaluate(p), "exact_kl": exact_kl(p, ref)}

        runs[mu] = train_grpo(policy, task, GRPOConfig(steps=40, num_iterations=mu), ref_policy=ref, evaluate=evaluate)
    fig, axes = panels(3, 1.85, sharex=True)
    colors = {1: "#1f77b4", 2: "#d95f02"}
    for mu, h in runs.items():
        steps = [r["step"] for r in h]
        label = f"num_iterations = {mu}"
        axes[0].plot(steps, [r["success_prob"] for r in h], color=colors[mu], label=label)
        axes[1].plot(steps, [r["exact_kl"] for r in h], color=colors[mu], label="精确 KL" if mu == 1 else None)
        axes[1].plot(
            steps,
            [r["kl"] for r in h],
            color=colors[mu],
            ls=":",
            lw=1.3,
            label="日志里的 kl（k3）" if mu == 1 else None,
        )
        axes[2].plot(steps, [r["clip_ratio"] for r in h], color=colors[mu], label=label)
    axes[0].set(ylabel="正确回答的概率", ylim=(0, 1.02))
    axes[1].set(ylabel="KL(π_θ‖π_ref)", ylim=(0, 5))
    axes[2].set(ylabel="clip_ratio", xlabel="训练步数（G = 8，β = 0.04，Adam 学习率 0.5）", xlim=(1, 40))
    axes[0].legend(loc="lower right")
    axes[1].legend(loc="upper right", ncol=2)
    save(axes[0].figure, path)


def grpo_variants_length(path: Path) -> None:
    """四种 loss_type 给一条答对回答的梯度，随它的长度变化（组内另三条长 6、2、6，奖励 [1, 1, 0, 0]）。"""
    from rlhf_toy import group_advantages, grpo_loss

    advantages = group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), num_generations=4)
    lengths = list(range(1, 9))
    styles = {
        "grpo": ("#1f77b4", "-"),
        "bnpo": ("#2ca02c", "-"),
        "dapo": ("#d95f02", ":"),
        "dr_grpo": ("#9467bd", "--"),
    }
    per_token = {k: [] for k in styles}
    per_answer = {k: [] for k in styles}
    for n in lengths:
        mask = (torch.arange(8) < torch.tensor([n, 6, 2, 6])[:, None]).float()
        for loss_type in styles:
            logps = torch.full((4, 8), -1.0, requires_grad=True)
            loss, _ = grpo_loss(
                logps, None, None, advantages, mask, beta=0.0, loss_type=loss_type, max_completion_length=8
            )
            (grad,) = torch.autograd.grad(loss, logps)
            per_token[loss_type].append(-grad[0, 0].item())  # 梯度下降抬高这个 token 的推力
            per_answer[loss_type].append(-grad[0].sum().item())
    fig, axes = panels(2, 2.2, sharex=True)
    for loss_type, (color, ls) in styles.items():
        axes[0].plot(lengths, per_token[loss_type], color=color, ls=ls, marker="o", ms=3.5, label=loss_type)
        axes[1].plot(lengths, per_answer[loss_type], color=color, ls=ls, marker="o", ms=3.5, label=loss_type)
    axes[0].set(ylabel="每个 token 的推力", ylim=(0, None))
    axes[1].set(ylabel="整条回答的推力", xlabel="这条答对回答的长度 |y|（L = 8）", ylim=(0, None))
    axes[0].legend(loc="upper right", ncol=2)
    save(axes[0].figure, path)


# --- 第 7 章 ---------------------------------------------------------------------------------------


def kl_estimators(path: Path) -> None:
    """k1、k2、k3 的偏差与标准差（相对真值）随两个分布的距离变化：老虎机第 0 个提示词，精确求和。"""
    from rlhf_toy.studies.kl_estimators import estimator_stats, exact_kl

    task, policy = bandit()
    ref_logps = policy.logits[0].detach().double().log_softmax(-1)
    correct = task.correct[0]
    shifts = torch.linspace(0.1, 10, 100, dtype=torch.float64)
    stats = {name: {"bias": [], "std": []} for name in ("k1", "k2", "k3")}
    for shift in shifts:
        logits = ref_logps.clone()
        logits[correct] += shift
        logps = logits.log_softmax(-1)
        true_kl = exact_kl(logps, ref_logps).item()
        for name, s in estimator_stats(ref_logps - logps, weights=logps.exp()).items():
            stats[name]["bias"].append((s.mean - true_kl) / true_kl)
            stats[name]["std"].append(s.std / true_kl)
    fig, axes = panels(2, 2.2, sharex=True)
    colors = {"k1": "#1f77b4", "k2": "#2ca02c", "k3": "#d95f02"}
    for name, s in stats.items():
        axes[0].plot(shifts, s["std"], color=colors[name], label=name)
        axes[1].plot(shifts, s["bias"], color=colors[name], label=name)
    axes[0].set(yscale="log", ylabel="标准差 / 真值")
    axes[1].set(ylabel="偏差 / 真值", xlabel="正确回答的 logit 抬高量（0.5：接近的一对；8：训练后期）")
    for ax in axes:
        for x in (0.5, 8.0):
            ax.axvline(x, color=GREY, lw=0.8, ls="--")
    axes[0].legend(loc="upper center", ncol=3)
    save(axes[0].figure, path)


def kl_optima(path: Path) -> None:
    """两种最优解给正确回答的概率随 β 变化：π*（反向 KL）与 π†（正向 KL，k3 进损失）。"""
    import matplotlib.pyplot as plt

    from rlhf_toy.studies.kl_estimators import forward_kl_optimum, reverse_kl_optimum

    task, policy = bandit()
    ref_logps = policy.logits[0].detach().double().log_softmax(-1)
    c = task.correct[0]
    rewards = F.one_hot(c, 8).double()
    betas = torch.logspace(-2, 1, 61, dtype=torch.float64).tolist()
    rev = [reverse_kl_optimum(ref_logps, rewards, b).exp()[c].item() for b in betas]
    fwd = [forward_kl_optimum(ref_logps, rewards, b).exp()[c].item() for b in betas]
    fig, ax = plt.subplots(figsize=(WIDTH, 2.7), layout="constrained")
    ax.plot(betas, rev, color="#1f77b4", label="π*：反向 KL（k1 进奖励、修正 k3）")
    ax.plot(betas, fwd, color="#d95f02", ls="--", label="π†：正向 KL（k3 进损失）")
    ax.axhline(ref_logps.exp()[c].item(), color=GREY, ls=":", lw=1.2, label="参考模型")
    ax.set(xscale="log", xlabel="β", ylabel="P(正确回答)", ylim=(0, 1.03))
    ax.legend(loc="lower left")
    save(fig, path)


# --- 第 9 章（读缓存） -------------------------------------------------------------------------------

TINY_LM_SEEDS = (0, 1, 2)
TINY_LM_CPU_SECONDS = 60.0
TINY_LM_HASHED = [
    "demos/tiny_lm.py",
    "tasks/addition.py",
    "policies/transformer.py",
    "train/grpo.py",
    "train/sft.py",
    "losses/grpo.py",
    "losses/aggregate.py",
    "estimators/advantages.py",
]


def tiny_lm_code_hash() -> str:
    """第 9 章缓存依赖的源文件与生成它的函数 `tiny_lm_runs` 的摘要（SHA-256 前 16 位）。

    同 `scripts/run_experiments.py`：摘要取自 `rlhf_toy._code_hash.code_text`（去掉文档字符串与注释的语法树），
    只改文档字符串、注释或排版不会让缓存过期。
    """
    import os
    import tempfile
    import textwrap

    from rlhf_toy._code_hash import code_text

    digest = hashlib.sha256()
    base = ROOT / "src" / "rlhf_toy"
    for item in TINY_LM_HASHED:
        digest.update(item.encode())
        digest.update(code_text(base / item).encode("utf-8"))
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as f:
        f.write(textwrap.dedent(inspect.getsource(tiny_lm_runs)))
    try:
        digest.update(code_text(f.name).encode("utf-8"))
    finally:
        os.unlink(f.name)
    return digest.hexdigest()[:16]


def tiny_lm_runs() -> dict:
    """第 9 章的两组训练（几分钟）：每个种子 GRPO 跑满 60 个 CPU 秒、每 10 步评估一次；长度一课（40 步，每 5 步统计）。

    计时用进程的 CPU 时间（单线程），不用墙钟：机器被别的进程占用时墙钟会被拉长，CPU 时间基本不变。
    评估不计时。
    """
    import copy

    from rlhf_toy.demos.tiny_lm import grpo_config, length_lesson, single_thread, warm_start
    from rlhf_toy.train.grpo import GRPOConfig, train_grpo

    seconds = {}
    with single_thread():
        for seed in TINY_LM_SEEDS:
            task, policy = warm_start(seed)
            config = grpo_config(max_completion_length=task.max_completion_length)
            part = GRPOConfig(**{**config.__dict__, "steps": 10})
            ref = policy.frozen_copy()
            optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
            rows = [{"step": 0, "cpu_seconds": 0.0, "accuracy": task.evaluate(copy.deepcopy(policy))["accuracy"]}]
            cpu, step = 0.0, 0
            while cpu < TINY_LM_CPU_SECONDS:
                start = time.process_time()
                train_grpo(policy, task, part, ref_policy=ref, optimizer=optimizer)
                cpu += time.process_time() - start
                step += part.steps
                rows.append({"step": step, "cpu_seconds": round(cpu, 2), "accuracy": task.evaluate(policy)["accuracy"]})
            seconds[str(seed)] = rows
            print(
                f"seed {seed}: {step} steps in {cpu:.1f} CPU s, accuracy {rows[0]['accuracy']} -> {rows[-1]['accuracy']}"
            )
    lesson = {}
    for seed in TINY_LM_SEEDS:
        runs = length_lesson(seed=seed, steps=40, every=5, ramble=0.2)
        lesson[str(seed)] = {
            k: [{key: round(r[key], 4) for key in ("step", "length_wrong", "truncated", "accuracy")} for r in rows]
            for k, rows in runs.items()
        }
        print(f"length lesson seed {seed} done")
    return {"grpo_cpu_seconds": seconds, "length_lesson": lesson}


def tiny_lm_cache() -> dict:
    data = json.loads(TINY_LM_CACHE.read_text(encoding="utf-8"))
    if data["code_hash"] != tiny_lm_code_hash():
        raise RuntimeError(f"{TINY_LM_CACHE.name} 来自旧代码：运行 scripts/figures.py --refresh-cache 并提交")
    return data


def tiny_lm_seconds(path: Path) -> None:
    """极小 Transformer：SFT 热启动之后的 GRPO，留出集正确率随 CPU 秒数的变化，三个种子。"""
    import matplotlib.pyplot as plt

    data = tiny_lm_cache()
    fig, ax = plt.subplots(figsize=(WIDTH, 2.7), layout="constrained")
    for (seed, rows), color in zip(data["grpo_cpu_seconds"].items(), ("#1f77b4", "#d95f02", "#2ca02c"), strict=True):
        ax.plot(
            [r["cpu_seconds"] for r in rows],
            [r["accuracy"] for r in rows],
            color=color,
            marker="o",
            ms=2.5,
            lw=1.3,
            label=f"种子 {seed}",
        )
    ax.set(xlabel="GRPO 用掉的 CPU 秒（单线程，不含评估）", ylabel="留出集正确率（贪心）", xlim=(0, None))
    ax.legend(loc="lower right")
    save(fig, path)


def tiny_lm_length(path: Path) -> None:
    """长度一课：三种 loss_type 下答错回答的平均长度与被超长截停的比例（三个种子的平均与范围）。"""
    data = tiny_lm_cache()["length_lesson"]
    fig, axes = panels(2, 2.2, sharex=True)
    styles = {"grpo": ("#1f77b4", "-"), "dr_grpo": ("#9467bd", "--"), "dapo": ("#d95f02", ":")}
    for loss_type, (color, ls) in styles.items():
        for ax, key in zip(axes, ("length_wrong", "truncated"), strict=True):
            per_seed = torch.tensor([[r[key] for r in data[s][loss_type]] for s in data])
            steps = [r["step"] for r in data[next(iter(data))][loss_type]]
            ax.plot(steps, per_seed.mean(0), color=color, ls=ls, label=loss_type)
            ax.fill_between(steps, per_seed.min(0).values, per_seed.max(0).values, color=color, alpha=0.12, lw=0)
    axes[0].set(ylabel="答错回答的平均长度")
    axes[1].set(ylabel="被超长截停的比例", xlabel=f"GRPO 步数（{len(data)} 个种子：平均与范围）", xlim=(0, 40))
    axes[0].legend(loc="upper right")
    save(axes[0].figure, path)


# --- 第 10 章（读 docs/data/trl.json） ---------------------------------------------------------------


def trl_curves(path: Path) -> None:
    """TRL 完整运行：GRPOTrainer 每步的平均奖励（1 个与 2 个进程），DPOTrainer 日志里的 logps/chosen 与 logps/rejected。"""
    cache = json.loads(TRL_CACHE.read_text(encoding="utf-8"))
    fig, axes = panels(2, 2.2)
    window = 20
    for key, color in (("1", "#1f77b4"), ("2", "#d95f02")):
        rewards = torch.tensor(cache["grpo"][key]["rewards"])
        smooth = rewards.unfold(0, window, 1).mean(-1)
        steps = torch.arange(window, len(rewards) + 1)
        axes[0].plot(steps, smooth, color=color, label=f"{key} 个进程")
    axes[0].set(ylabel=f"平均奖励（{window} 步滑动平均）", xlabel="GRPOTrainer 步数")
    axes[0].legend(loc="lower right")
    logs = cache["dpo"]["logs"]
    steps = [log["step"] for log in logs]
    axes[1].plot(steps, [log["logps/chosen"] for log in logs], color="#4c9f50", marker="o", ms=3, label="logps/chosen")
    axes[1].plot(
        steps, [log["logps/rejected"] for log in logs], color="#d62728", marker="o", ms=3, label="logps/rejected"
    )
    axes[1].set(ylabel="整条回答的对数概率（批平均）", xlabel="DPOTrainer 步数")
    axes[1].legend(loc="lower left")
    save(axes[0].figure, path)


# --- 全部 -----------------------------------------------------------------------------------------

FIGURES = {
    "overview-pipeline": overview_pipeline,
    "overview-optimum": overview_optimum,
    "policy-gradient-estimates": policy_gradient_estimates,
    "reward-model-sigmoid": reward_model_sigmoid,
    "reward-model-table": reward_model_table,
    "ppo-clip": ppo_clip,
    "ppo-token-strip": ppo_token_strip,
    "dpo-weight": dpo_weight,
    "dpo-mass": dpo_mass,
    "dpo-variants-losses": dpo_variants_losses,
    "dpo-variants-ipo": dpo_variants_ipo,
    "grpo-iterations": grpo_iterations,
    "grpo-variants-length": grpo_variants_length,
    "kl-estimators": kl_estimators,
    "kl-optima": kl_optima,
    "tiny-lm-seconds": tiny_lm_seconds,
    "tiny-lm-length": tiny_lm_length,
    "trl-curves": trl_curves,
}


CHAPTER_12_MODULES = ("figures_offpolicy", "figures_distillation", "figures_tools")


def chapter_12_figures() -> dict:
    """第 12 章三部分的图：各在 scripts/figures_<部分>.py 的 `FIGURES` 里（版式用本模块的 WIDTH、panels、save）。"""
    import importlib

    found = {}
    for module in CHAPTER_12_MODULES:
        found.update(importlib.import_module(module).FIGURES)
    return found


def draw(out_dir: Path = OUT, only: list[str] | None = None) -> list[Path]:
    """画 `FIGURES` 里的图（`only` 给出时只画名字含其中之一的），外加第 8 章的两张；返回写出的文件。"""
    import matplotlib

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context():  # 画完恢复调用者的 rcParams（测试进程里还有别的测试）
        setup()
        for name, fn in {**FIGURES, **chapter_12_figures()}.items():
            if only and not any(o in name for o in only):
                continue
            path = out_dir / f"{name}.svg"
            fn(path)
            written.append(path)
        if not only or any(o in "comparison overopt" for o in only):
            import run_experiments

            targets = {k: out_dir / v.name for k, v in run_experiments.FIGURES.items()} if out_dir != OUT else None
            run_experiments.plot(json.loads(run_experiments.CACHE.read_text(encoding="utf-8")), targets)
            written += list((targets or run_experiments.FIGURES).values())
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="只画名字含这些字符串的图")
    parser.add_argument("--refresh-cache", action="store_true", help="重跑第 9 章的训练，重写 tiny_lm_figures.json")
    args = parser.parse_args(argv)
    if args.refresh_cache:
        start = time.perf_counter()
        data = {
            "generated_by": "scripts/figures.py --refresh-cache",
            "code_hash": tiny_lm_code_hash(),
            **tiny_lm_runs(),
        }
        TINY_LM_CACHE.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"wrote {TINY_LM_CACHE.relative_to(ROOT)} in {time.perf_counter() - start:.0f} s")
    for path in draw(only=args.only):
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
