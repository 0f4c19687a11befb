"""第 9 章（tiny-lm.md）：极小 Transformer 的两张图，读缓存 docs/data/tiny_lm_figures.json。

    .venv/bin/python scripts/figures.py --refresh-cache   # 重跑 `tiny_lm_runs`（几分钟），重写缓存

缓存记着它来自哪份代码（`code_hash` = `tiny_lm_code_hash()`：下面 TINY_LM_HASHED 里的源文件与函数 `tiny_lm_runs`
本身，都去掉文档字符串与注释）；代码变了，画图时报错，提示重跑。
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from pathlib import Path

import torch

from figs.base import GREY, ROOT, WIDTH, Figure, panels, save

TINY_LM_CACHE = ROOT / "docs" / "data" / "tiny_lm_figures.json"
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
    "estimators/dynamic_sampling.py",
    "estimators/entropy.py",
    "estimators/kl.py",
    "estimators/rewards.py",
    "losses/dpo.py",
    "losses/ppo.py",
    "policies/table.py",
    "tasks/bandit.py",
    "train/dpo.py",
    "train/ppo.py",
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


def tiny_lm_shift(path: Path) -> None:
    """右移一位：提示词与回答拼成一行，位置 s 的 logits 预测第 s+1 个 token，`gather` 后只留回答的 T 列（`concat_logps`）。"""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    from rlhf_toy.tasks.addition import BOS, EOS, VOCAB, encode

    prompt, answer = [BOS, *encode("23+58=")], [*encode("81"), EOS]
    ids = prompt + answer
    n, T = len(ids), len(answer)
    orange, light, grey_fill = "#d95f02", "#fdd9b5", "#e8e8e8"
    fig, ax = plt.subplots(figsize=(WIDTH, 2.1), layout="constrained")
    ax.set_axis_off()
    ax.set_xlim(-2.4, n - 0.4)
    ax.set_ylim(-0.95, 2.15)
    w, h = 0.84, 0.6
    for s, t in enumerate(ids):  # 上一行：拼好的 input_ids
        fill = light if s >= len(prompt) else grey_fill
        ax.add_patch(Rectangle((s - w / 2, 1.3), w, h, fc=fill, ec=GREY, lw=0.8))
        ax.text(s, 1.6, VOCAB[t], ha="center", va="center", fontsize=7 if len(VOCAB[t]) > 1 else 10)
        ax.text(s, 2.05, str(s), ha="center", va="center", fontsize=7, color=GREY)
    for s in range(n - 1):  # 下一行：logits[:, :-1]，位置 s 预测第 s+1 个 token
        kept = s >= n - 1 - T
        ax.add_patch(Rectangle((s - w / 2, 0), w, h, fc=light if kept else "white", ec=orange if kept else GREY, lw=0.8))
        ax.text(s, 0.3, str(s), ha="center", va="center", fontsize=9)
        arrow = FancyArrowPatch(
            (s + 0.1, h + 0.02), (s + 0.9, 1.28), arrowstyle="-|>", mutation_scale=7, lw=0.8,
            color=orange if kept else GREY,
        )  # fmt: skip
        ax.add_patch(arrow)
    ax.add_patch(Rectangle((n - 1 - w / 2, 0), w, h, fc="none", ec=GREY, lw=0.8, ls=":"))
    ax.text(n - 1, 0.3, "×", ha="center", va="center", fontsize=10, color=GREY)
    ax.text(-0.6, 1.6, "input_ids", ha="right", va="center", fontsize=9)
    ax.text(-0.6, 0.3, "logits[:, :-1]", ha="right", va="center", fontsize=9)
    last = len(prompt) - 2  # 位置 0…last 预测的是提示词自己的 token
    ax.text(last / 2, -0.35, f"位置 0–{last} 预测提示词，不要", ha="center", va="center", fontsize=8, color=GREY)
    ax.text(
        n - 2 + w / 2, -0.7, f"gather 下一个 token，只留回答的 T = {T} 列", ha="right", va="center", fontsize=8,
        color=orange,
    )  # fmt: skip
    save(fig, path)


def refresh_cache() -> None:
    """重跑 `tiny_lm_runs`（几分钟），把结果与 `code_hash` 写进 docs/data/tiny_lm_figures.json。"""
    start = time.perf_counter()
    data = {
        "generated_by": "scripts/figures.py --refresh-cache",
        "code_hash": tiny_lm_code_hash(),
        **tiny_lm_runs(),
    }
    TINY_LM_CACHE.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {TINY_LM_CACHE.relative_to(ROOT)} in {time.perf_counter() - start:.0f} s")


CACHE = "docs/data/tiny_lm_figures.json"
FIGURES = [
    Figure("tiny-lm-seconds", tiny_lm_seconds, "tiny-lm.md", cache=CACHE),
    Figure("tiny-lm-length", tiny_lm_length, "tiny-lm.md", cache=CACHE),
    Figure("tiny-lm-shift", tiny_lm_shift, "tiny-lm.md"),
]
