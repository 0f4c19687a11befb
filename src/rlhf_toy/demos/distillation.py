r"""第 12 章的蒸馏演示：精确实验台上的众数寻求 / 众数覆盖，与极小 Transformer 上的同策略蒸馏 vs 教师样本 SFT。

`python -m rlhf_toy distill {modes,onpolicy} [--quick]`。完整版由 `scripts/run_offpolicy.py distillation`
跑，结果缓存在 `docs/data/distillation.json`。

* `modes`：双峰教师（61 个回答，峰在 22 与 38，质量 0.7 / 0.3），离散高斯学生分别在精确正向 KL、精确反向 KL
  上拟合；反向 KL 再从小峰附近出发拟合一次（局部最优）。
* `onpolicy`：一位数加法（100 道题，30 道留出），教师是 $\varepsilon = 0.05$ 的精确加法器，学生是 1 层、
  $d = 32$ 的 Transformer（第 9 章默认 2 层、$d = 48$）；两种方法同一初值、同一学习率、同样步数与批大小。
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy
from typing import Any

import torch

from rlhf_toy._threads import single_thread
from rlhf_toy.studies.forward_reverse_kl import bimodal_teacher, fit_student, mode_masses
from rlhf_toy.tasks.addition import EOS, AdditionTask, encode
from rlhf_toy.tasks.teachers import ExactAdderTeacher
from rlhf_toy.train.distill import DistillConfig, train_onpolicy_distillation, train_teacher_sft

# --8<-- [end:imports]

SOURCES = (
    "losses/distillation.py",
    "studies/forward_reverse_kl.py",
    "tasks/teachers.py",
    "train/distill.py",
    "demos/distillation.py",
    "studies/kl_estimators.py",
    "estimators/kl.py",
    "losses/aggregate.py",
    "policies/transformer.py",
    "tasks/addition.py",
    "_checks.py",
)
SPLIT = 30  # 两峰之间的分界
FITS = (("forward", 30.0, 10.0), ("reverse", 30.0, 10.0), ("reverse", 38.0, 3.0))  # (方向, μ 初值, σ 初值)
STUDENT = {"d_model": 32, "n_layers": 1, "n_heads": 4}
METHODS = ("onpolicy", "onpolicy_full", "sft")


def _r(x: float) -> float:
    return round(float(x), 4)


# --8<-- [start:run_modes]
def run_modes() -> dict[str, Any]:
    """精确实验台：教师、三个拟合的学生（参数、两峰质量、两种 KL）与画图用的概率。"""
    teacher = bimodal_teacher()
    out = {"teacher": {"probs": [_r(p) for p in teacher.exp()], "masses": [_r(m) for m in mode_masses(teacher, SPLIT)]}}
    fits = []
    for direction, mu, sigma in FITS:
        f = fit_student(teacher, direction, mu=mu, sigma=sigma)
        fits.append(
            {
                "direction": direction,
                "init": [mu, sigma],
                "mu": _r(f.mu),
                "sigma": _r(f.sigma),
                "masses": [_r(m) for m in mode_masses(f.logps, SPLIT)],
                "forward_kl": _r(f.forward_kl),
                "reverse_kl": _r(f.reverse_kl),
                "probs": [_r(p) for p in f.logps.exp()],
            }
        )
    out["fits"] = fits
    return out


# --8<-- [end:run_modes]


def init_split(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """种子 `seed` 的加法任务的（留出题，训练题）：热启动只用训练题。"""
    task = AdditionTask(n_digits=1, n_heldout=30, seed=seed)
    return task.heldout, task.train


# --8<-- [start:run_distill]
def run_distill(
    seed: int = 0, steps: int = 300, eval_every: int = 30, batch_size: int = 64, warm_steps: int = 0
) -> dict[str, Any]:
    """同一学生初值，分别做同策略蒸馏与教师样本 SFT；返回每次评估的采样 token 数与正确率。

    Args:
        seed: 学生初值、题目划分与采样的种子。
        steps: 每种方法的梯度步数。
        eval_every: 评估间隔（步）。
        batch_size: 每步题数。
        warm_steps: 先在教师样本上做几步 SFT 作为两种方法共同的初值（0 表示从随机初值开始）；
            热启动用掉的教师 token 不计入 `sampled_tokens`，另记在 `"warm_tokens"`。

    Returns:
        `{"onpolicy": [...], "onpolicy_full": [...], "sft": [...]}`（`onpolicy_full` 是全词表反向 KL 的对照），每项 `{"step", "sampled_tokens", "accuracy", "train_accuracy"}`。
    """
    torch.manual_seed(seed)
    init = AdditionTask(n_digits=1, n_heldout=30, seed=seed).make_policy(**STUDENT)
    out = {}
    if warm_steps:
        warm_task = AdditionTask(n_digits=1, n_heldout=30, seed=seed + 1000)  # 同一划分之外的另一条抽题序列
        warm_task.heldout, warm_task.train = init_split(seed)
        warm = train_teacher_sft(
            init, ExactAdderTeacher(warm_task), warm_task, DistillConfig(steps=warm_steps, seed=seed + 1000)
        )
        out["warm_tokens"] = warm[-1]["sampled_tokens"]
    for method in METHODS:
        task = AdditionTask(n_digits=1, n_heldout=30, seed=seed)  # 两种方法抽到同样的题
        teacher = ExactAdderTeacher(task, epsilon=0.05)
        train_prompts = task.encode_prompts(task.train)

        def evaluate(policy, task=task, train_prompts=train_prompts):
            completions, _, _ = policy.generate(train_prompts, greedy=True)
            return {
                "accuracy": task.evaluate(policy)["accuracy"],
                "train_accuracy": task.reward(train_prompts, completions).mean().item(),
            }

        config = DistillConfig(steps=steps, batch_size=batch_size, seed=seed)
        student = copy.deepcopy(init)
        if method == "sft":
            history = train_teacher_sft(student, teacher, task, config, evaluate=evaluate, eval_every=eval_every)
        else:
            full = method == "onpolicy_full"
            history = train_onpolicy_distillation(
                student, teacher, task, config, evaluate=evaluate, eval_every=eval_every, full_vocabulary=full
            )
        out[method] = [
            {
                k: _r(r[k]) if isinstance(r[k], float) else r[k]
                for k in ("step", "sampled_tokens", "accuracy", "train_accuracy")
            }
            for r in history
            if "accuracy" in r
        ]
    return out


# --8<-- [end:run_distill]


@single_thread()
def full_run(quick: bool = False) -> dict[str, Any]:
    """完整实验：精确实验台 + 两个种子的同策略蒸馏 vs SFT（每种 300 步 × 64 题），从随机初值与从 100 步 SFT
    热启动各一次；`quick` 只跑一个种子 20 步（热启动 10 步）。

    Args:
        quick: 快速模式。

    Returns:
        可写进 JSON 的结果（浮点数舍入到 4 位）。
    """
    seeds, steps, every, warm = ((0,), 20, 10, 10) if quick else ((0, 1), 300, 30, 100)
    return {
        "modes": run_modes(),
        "distill": {str(s): run_distill(seed=s, steps=steps, eval_every=every) for s in seeds},
        "distill_warm": {str(s): run_distill(seed=s, steps=steps, eval_every=every, warm_steps=warm) for s in seeds},
        "warm_steps": warm,
        "config": {"steps": steps, "batch_size": 64, "learning_rate": DistillConfig().learning_rate, **STUDENT},
    }


@single_thread()
def demo_modes(quick: bool = True) -> str:
    """精确实验台的表：每个拟合学生的 μ、σ、两峰质量与两种 KL（`quick` 无影响，本来就只要几秒）。"""
    res = run_modes()
    lines = [f"教师：两峰质量 {res['teacher']['masses'][0]:.3f} / {res['teacher']['masses'][1]:.3f}"]
    lines.append(f"{'拟合':<8}{'初值 (μ, σ)':>12}{'μ':>8}{'σ':>7}{'左峰':>7}{'右峰':>7}{'正向KL':>8}{'反向KL':>8}")
    for f in res["fits"]:
        init = f"({f['init'][0]:.0f}, {f['init'][1]:.0f})"
        lines.append(
            f"{f['direction']:<8}{init:>12}{f['mu']:>8.2f}{f['sigma']:>7.2f}{f['masses'][0]:>7.3f}"
            f"{f['masses'][1]:>7.3f}{f['forward_kl']:>8.3f}{f['reverse_kl']:>8.3f}"
        )
    return "\n".join(lines)


@single_thread()
def demo_onpolicy(quick: bool = True) -> str:
    """同策略蒸馏 vs 教师样本 SFT：每次评估的累计采样 token 数与留出集正确率（`quick`：20 步）。"""
    res = run_distill(seed=0, steps=20 if quick else 300, eval_every=10 if quick else 30)
    lines = [f"{'方法':<14}{'步':>5}{'采样token':>10}{'留出正确率':>10}{'训练题正确率':>10}"]
    for method in METHODS:
        for r in res[method]:
            lines.append(
                f"{method:<14}{r['step']:>5}{r['sampled_tokens']:>10}{r['accuracy']:>10.3f}{r['train_accuracy']:>10.3f}"
            )
    return "\n".join(lines)


def advantage_variance(epsilon: float = 0.05, right_probs: tuple[float | None, ...] = (None, 0.3, 0.7)) -> str:
    r"""一个位置上单样本反向 KL 梯度的精确方差：不减基线、减基线 $-\mathrm{KL}_t$、减方差最小的常数基线 $b^*$（对词表枚举，不采样）。

    位置取 `7+8=` 的第一位，教师是 `ExactAdderTeacher(epsilon)`。学生在正确 token 上放概率 $p$、其余 token 均分
    （`None` 表示均匀的学生）。单样本梯度（对 logits）是 $g(y) = -(A(y) - b)\,(e_y - \pi_\theta)$，
    $A(y) = \log\pi_T(y) - \log\pi_\theta(y)$；$b = 0$ 或 $b = \mathbb E_{\pi_\theta}[A] = -\mathrm{KL}(\pi_\theta\Vert\pi_T)$，
    两者的期望都是这个位置精确反向 KL 的梯度。方差是 $g$ 各分量方差之和。
    使方差最小的常数基线是 $b^* = \mathbb E[A\,\|e_y-\pi_\theta\|^2]/\mathbb E[\|e_y-\pi_\theta\|^2]$（对 $b$ 求导令其为 0）。
    """
    task = AdditionTask(n_digits=1, n_heldout=30, seed=0)
    teacher = ExactAdderTeacher(task, epsilon=epsilon)
    prompts = task.encode_prompts(torch.tensor([[7, 8]]))
    completions = torch.tensor([[*encode("15"), EOS]])
    teacher_logps = teacher.log_probs(prompts, completions)[0, 0].double()
    right = int(teacher_logps.argmax())
    size = teacher_logps.numel()
    lines = ["π(正确)  ‖期望梯度‖²  方差（b = 0）  方差（b = −KL）  −KL      b*       方差（b = b*）"]
    for p in right_probs:
        probs = torch.full((size,), 1 / size, dtype=torch.float64)
        if p is not None:
            probs = torch.full((size,), (1 - p) / (size - 1), dtype=torch.float64)
            probs[right] = p
        advantages = teacher_logps - probs.log()
        scores = torch.eye(size, dtype=torch.float64) - probs  # 第 y 行是 e_y − π
        mean = -(probs * advantages) @ scores
        kl = -(probs * advantages).sum()
        variances = []
        sq_norms = scores.square().sum(-1)  # ‖e_y − π‖²
        best = (probs * advantages * sq_norms).sum() / (probs * sq_norms).sum()  # b*
        for baseline in (0.0, -kl, best):
            grads = -(advantages - baseline)[:, None] * scores
            variances.append((probs * grads.square().sum(-1)).sum() - mean.square().sum())
        lines.append(
            f"{probs[right]:.3f}    {mean.square().sum():.3f}       {variances[0]:.3f}         {variances[1]:.3f}"
            f"           {-kl:.3f}   {best:.3f}   {variances[2]:.3f}"
        )
    return "\n".join(lines)
