"""第 11 章的完整实验：两个起点的 GRPO、拒绝采样微调、超长惩罚、pass@k 与 best-of-N，写缓存和图。

    nice -n 10 .venv/bin/python scripts/run_reasoning.py          # 完整模式：写 docs/data/reasoning.json 与图
    nice -n 10 .venv/bin/python scripts/run_reasoning.py --quick  # 快速模式：只打印耗时与结果，不写文件
    .venv/bin/python scripts/run_reasoning.py --plot              # 只从缓存重画图

页面与 notebook 只读缓存。缓存记着它来自哪份代码（`code_hash`：下面 HASHED 里源文件去掉文档字符串与注释之后的 SHA-256）；
`tests/test_reasoning.py` 重算其中最便宜的一项（best-of-N 扫描）并与缓存按四位小数比较，并检查哈希。
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy.demos.reasoning import (  # noqa: E402
    best_of_n_sweep,
    by_shape,
    forced_mode_accuracy,
    format_row,
    pass_at_k_curve,
    rl_from,
    warm_start,
)

CACHE = ROOT / "docs" / "data" / "reasoning.json"
FIGURES = {
    "training": ROOT / "docs" / "figures" / "reasoning-training.svg",
    "pass-at-k": ROOT / "docs" / "figures" / "reasoning-pass-at-k.svg",
    "best-of-n": ROOT / "docs" / "figures" / "reasoning-best-of-n.svg",
}
SVG_METADATA = {"Date": None, "Creator": None}
HASHED = [
    "demos/reasoning.py",
    "tasks/scratchpad.py",
    "tasks/addition.py",
    "estimators/pass_at_k.py",
    "rollout/best_of_n.py",
    "estimators/dynamic_sampling.py",
    "estimators/overlong.py",
    "train/grpo.py",
    "train/sft.py",
    "train/rejection_sampling.py",
    "losses/aggregate.py",
    "losses/dpo.py",
    "losses/grpo.py",
    "losses/pg.py",
    "losses/ppo.py",
    "losses/reward_model.py",
    "estimators/advantages.py",
    "estimators/kl.py",
    "policies",
    "studies/overoptimisation.py",
    "tasks/bandit.py",
    "models",
    "estimators/entropy.py",
    "estimators/rewards.py",
    "studies/comparison.py",
    "train/dpo.py",
    "train/ppo.py",
    "train/reinforce.py",
    "train/reward_model.py",
]
RUNS = {  # 名字 -> run_rl 的参数
    "grpo": {"algorithm": "grpo", "start": "scratchpad"},
    "rft": {"algorithm": "rft", "start": "scratchpad"},
    "grpo_overlong": {"algorithm": "grpo", "start": "scratchpad", "overlong": True},
    "r1_zero": {"algorithm": "grpo", "start": "format"},
}
CONTROLS = {  # 名字 -> 参数；不进训练曲线的图，放在最后跑，前面各项不受影响
    "r1_zero_no_format": {"algorithm": "grpo", "start": "format", "format_weight": 0.0},
    "grpo_no_format": {"algorithm": "grpo", "start": "scratchpad", "format_weight": 0.0},
}
PASS_AT_K_N = 64
FORCED_N = 16  # 强制第一个 token 的对照：每道题每种写法的样本数
BEST_OF_N_SEEDS = (1, 2)  # 种子 0 之外的 best-of-N（第 8 章的曲线是种子 0–2 的平均）
BY_SHAPE = {"n": 16, "per_shape": 150}  # 按题型的评估：每种题型至多 150 道训练题（1+1 只有 99 道），每题 16 个样本


def code_hash() -> str:
    """实验依赖的源文件（HASHED）去掉文档字符串与注释之后的 SHA-256：`rlhf_toy._code_hash.sources_hash`。

    只改文档字符串、注释或排版不改变它（与 `scripts/run_experiments.py` 相同）。
    """
    from rlhf_toy._code_hash import sources_hash

    return sources_hash(HASHED)


def r4(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 4)


def run(quick: bool) -> dict:
    """跑全部实验，返回可写进 JSON 的结果（`timings` 是各部分的墙钟秒数）。

    两个热启动各做一次，每个强化学习运行从它们的深拷贝出发（模型、任务及其随机数生成器都复制），
    所以各运行互不影响、与单独运行时相同。pass@k 用热启动模型与 `grpo`、`r1_zero` 两个运行的最终模型；
    强制第一个 token 的对照（`forced_mode_accuracy`）用草稿热启动模型与 `grpo` 的最终模型；
    按题型的评估（`by_shape`）用两个热启动模型与 `grpo`、`r1_zero` 的最终模型。
    对照运行（`CONTROLS`，写在 `controls` 下）：`r1_zero_no_format` 与 `r1_zero` 相同，只是训练奖励里去掉格式分
    （`format_weight=0`；热启动的 SFT 不用奖励，所以起点相同）；`grpo_no_format` 同样是去掉格式分的 `grpo`。
    新加的几项都放在最后，前面各项的随机数不受影响。
    """
    import torch

    from rlhf_toy.demos.reasoning import FORMAT_WEIGHT, OVERLONG

    timings, out = {}, {}
    t0 = time.perf_counter()
    out["best_of_n"] = [{k: r4(v) if isinstance(v, float) else v for k, v in r.items()} for r in best_of_n_sweep(0)]
    timings["best_of_n"] = time.perf_counter() - t0
    starts = {}
    for start in ("scratchpad", "format"):
        t0 = time.perf_counter()
        starts[start] = warm_start(start, 0, quick, format_weight=FORMAT_WEIGHT)
        timings[f"sft/{start}"] = time.perf_counter() - t0
    runs, finals = {}, {}
    for name, kwargs in RUNS.items():
        t0 = time.perf_counter()
        task, policy = copy.deepcopy(starts[kwargs["start"]])
        task.overlong = OVERLONG if kwargs.get("overlong") else None
        rows = rl_from(task, policy, kwargs["algorithm"], quick)
        for r in rows:
            print(f"{name:>14} 第 {r['step']:3d} 步  {format_row(r)}", flush=True)
        runs[name] = [{k: r4(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows]
        finals[name] = policy
        timings[name] = time.perf_counter() - t0
    out["runs"] = runs
    t0 = time.perf_counter()
    n = 8 if quick else PASS_AT_K_N
    pass_at_k = {}
    for start, run_name in (("scratchpad", "grpo"), ("format", "r1_zero")):
        task, policy = starts[start]
        torch.manual_seed(1)
        pass_at_k[f"{start}/before"] = pass_at_k_curve(policy, task, n)
        pass_at_k[f"{start}/after"] = pass_at_k_curve(finals[run_name], task, n)
        print(start, pass_at_k[f"{start}/before"], pass_at_k[f"{start}/after"], flush=True)
    out["pass_at_k"] = {name: {str(k): r4(v) for k, v in c.items()} for name, c in pass_at_k.items()}
    timings["pass_at_k"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    forced = {}
    for label, policy in (("before", starts["scratchpad"][1]), ("after", finals["grpo"])):
        torch.manual_seed(2)
        acc = forced_mode_accuracy(policy, starts["scratchpad"][0], 2 if quick else FORCED_N)
        forced[label] = {
            "scratchpad": r4(acc["scratchpad"].mean().item()),
            "direct": r4(acc["direct"].mean().item()),
            "best_per_problem": r4(torch.maximum(acc["scratchpad"], acc["direct"]).mean().item()),
        }
        print("forced first token", label, forced[label], flush=True)
    out["forced_first_token"] = {"n": 2 if quick else FORCED_N, **forced}
    timings["forced_first_token"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["best_of_n_seeds"] = {
        str(s): [{k: r4(v) if isinstance(v, float) else v for k, v in r.items()} for r in best_of_n_sweep(s)]
        for s in BEST_OF_N_SEEDS
    }
    timings["best_of_n_seeds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sizes = {"n": 2, "per_shape": 10} if quick else BY_SHAPE
    models = {
        "scratchpad/before": starts["scratchpad"][1],
        "scratchpad/after": finals["grpo"],
        "format/before": starts["format"][1],
        "format/after": finals["r1_zero"],
    }
    out["by_shape"] = {**sizes}
    for label, policy in models.items():
        torch.manual_seed(3)
        result = by_shape(policy, starts[label.split("/")[0]][0], seed=3, **sizes)
        out["by_shape"][label] = {s: {k: r4(v) for k, v in m.items()} for s, m in result.items()}
        print("by shape", label, out["by_shape"][label], flush=True)
    timings["by_shape"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["controls"] = {}
    for name, kwargs in CONTROLS.items():
        task, policy = copy.deepcopy(starts[kwargs["start"]])
        task.format_weight = kwargs["format_weight"]
        rows = rl_from(task, policy, kwargs["algorithm"], quick)
        for r in rows:
            print(f"{name:>18} 第 {r['step']:3d} 步  {format_row(r)}", flush=True)
        out["controls"][name] = [{k: r4(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows]
    timings["controls"] = time.perf_counter() - t0
    out["timings"] = {k: round(v, 1) for k, v in timings.items()}
    return out


def plot(data: dict) -> None:
    """三张嵌在页面上的图（中文标签，Noto Sans CJK SC）。"""
    import matplotlib

    matplotlib.use("Agg")  # 脚本不在 notebook 里，可以选后端
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.family": ["Noto Sans CJK SC", "DejaVu Sans"],
            "axes.unicode_minus": False,
            "font.size": 9,
            "svg.hashsalt": "rlhf-toy",
            "svg.fonttype": "none",
        }
    )
    FIGURES["training"].parent.mkdir(parents=True, exist_ok=True)
    labels = {
        "grpo": "GRPO（草稿热启动）",
        "rft": "拒绝采样微调（草稿热启动）",
        "grpo_overlong": "GRPO + 软超长惩罚",
        "r1_zero": "GRPO（只学格式的起点）",
    }
    panels = (
        ("accuracy", "留出集正确率（贪心）"),
        ("completion_length", "回答长度（采样，token）"),
        ("scratchpad_rate", "写草稿的比例（采样）"),
        ("entropy", "逐 token 熵（nat）"),
    )
    fig, grid = plt.subplots(2, 2, figsize=(7.6, 5.2), dpi=80, sharex=True)
    axes = grid.ravel()
    for name, rows in data["runs"].items():
        x = [r["samples"] / 1000 for r in rows]
        for ax, (key, _) in zip(axes, panels, strict=True):
            ax.plot(x, [r[key] for r in rows], marker=".", ms=3, lw=1.3, label=labels[name])
    for i, (ax, (_, title)) in enumerate(zip(axes, panels, strict=True)):
        ax.set(title=title, xlabel="采样的回答数（千）" if i >= 2 else None)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 1.02)
    axes[0].legend(fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(FIGURES["training"], metadata=SVG_METADATA)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4.6, 3.0), dpi=80)
    names = {
        "scratchpad/before": "草稿热启动，GRPO 前",
        "scratchpad/after": "草稿热启动，GRPO 后",
        "format/before": "只学格式，GRPO 前",
        "format/after": "只学格式，GRPO 后",
    }
    for name, curve in data["pass_at_k"].items():
        ks = [int(k) for k in curve]
        ax.plot(
            ks, list(curve.values()), marker="o", ms=3, lw=1.3, ls="-" if "after" in name else "--", label=names[name]
        )
    ax.set(xscale="log", xlabel="k", ylabel="pass@k（留出集）", ylim=(0, 1.02))
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(FIGURES["pass-at-k"], metadata=SVG_METADATA)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4.6, 3.0), dpi=80)
    rows = data["best_of_n"]
    ns = [r["n"] for r in rows]
    ax.plot(ns, [r["success_prob"] for r in rows], marker="o", ms=3, label="真实奖励（正确概率）")
    ax.plot(ns, [r["decoy_prob"] for r in rows], marker="o", ms=3, label="选中诱饵的概率")
    ax2 = ax.twinx()
    ax2.plot(ns, [r["proxy_reward"] for r in rows], color="grey", ls="--", lw=1, label="代理奖励（右轴）")
    ax.set(xscale="log", xlabel="N", ylabel="概率", ylim=(0, 1.02))
    ax.set_xticks(ns, [str(n) for n in ns])
    ax2.set_ylabel("代理奖励")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [h.get_label() for h in lines], fontsize=7, loc="center right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(FIGURES["best-of-n"], metadata=SVG_METADATA)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="快速模式：只计时与打印，不写缓存")
    parser.add_argument("--plot", action="store_true", help="不跑实验，只从缓存重画图")
    args = parser.parse_args(argv)
    if args.plot:
        plot(json.loads(CACHE.read_text(encoding="utf-8")))
        print(f"wrote {len(FIGURES)} figures from {CACHE.relative_to(ROOT)}")
        return 0
    start = time.perf_counter()
    data = run(args.quick)
    total = time.perf_counter() - start
    print(f"{'quick' if args.quick else 'full'} mode: {total:.1f} s wall ({data['timings']})")
    if not args.quick:
        payload = {"generated_by": "scripts/run_reasoning.py", "code_hash": code_hash(), **data}
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_text(json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        plot(data)
        print(f"wrote {CACHE.relative_to(ROOT)} ({CACHE.stat().st_size} bytes) and {len(FIGURES)} figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
