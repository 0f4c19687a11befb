"""第 8 章的完整实验：跑同台对比、离线算法的数据量扫描、奖励过优化与坏配置，写缓存和图。

    .venv/bin/python scripts/run_experiments.py          # 完整模式：写 docs/data/comparison.json 与两张图
    .venv/bin/python scripts/run_experiments.py --quick  # 快速模式：只打印耗时与汇总，不写文件
    .venv/bin/python scripts/run_experiments.py --plot   # 只从缓存重画两张图（改了画图代码之后）

页面与 notebook 只读缓存（`docs/data/comparison.json`），网站构建不重跑完整实验。缓存里记着它来自哪份配置
（`config`）和哪份代码（`code_hash`：实验、训练循环、损失等源文件的 SHA-256）；`tests/test_compare.py` 重算
其中一项并与缓存逐位比较。改了这些代码之后重跑本脚本，把 JSON 和 SVG 一起提交。
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rlhf_toy.studies.comparison import (  # noqa: E402
    OFFLINE,
    Budget,
    budget_dict,
    run_comparison,
    run_offline_sweep,
    summarize,
)
from rlhf_toy.studies.health import BROKEN, run_broken  # noqa: E402
from rlhf_toy.studies.overoptimisation import (  # noqa: E402
    early_stop,
    make_setup,
    optimum_curve,
    peak,
    run_overoptimisation,
)

CACHE = ROOT / "docs" / "data" / "comparison.json"
# SVG: vector (sharp at any zoom) and about 20 KB each gzipped, a third of the 80-dpi PNGs they replace.
FIGURES = {"comparison": ROOT / "docs" / "data" / "comparison.svg", "overopt": ROOT / "docs" / "data" / "overopt.svg"}
# No creation date or matplotlib version in the file, so an unchanged figure is byte-identical.
SVG_METADATA = {"Date": None, "Creator": None}
HASHED = [
    "studies/comparison.py",
    "studies/overoptimisation.py",
    "studies/health.py",
    "demos/comparison.py",
    "train",
    "losses/aggregate.py",
    "losses/dpo.py",
    "losses/grpo.py",
    "losses/pg.py",
    "losses/ppo.py",
    "losses/reward_model.py",
    "estimators/advantages.py",
    "estimators/kl.py",
    "estimators/rewards.py",
    "policies/table.py",
    "tasks/bandit.py",
    "models",
    "estimators/dynamic_sampling.py",
    "estimators/entropy.py",
]

FULL = {
    "seeds": [0, 1, 2, 3, 4],
    "budget": Budget(samples=4800, offline_steps=60),
    "offline_sizes": [80, 160, 320, 640, 1280],
    "target": 0.9,
    "broken_seeds": 2,
    "overopt": {
        "algorithms": ["ppo", "grpo"],
        "betas": [0.0, 0.3, 1.0, 3.0],
        "seeds": [0, 1, 2],
        "steps": 40,
        "kl_budget": 0.4,
    },
}
QUICK = {
    "seeds": [0, 1],
    "budget": Budget(),
    "offline_sizes": [160, 640],
    "target": 0.8,
    "broken_seeds": 1,
    "overopt": {"algorithms": ["ppo"], "betas": [0.0, 1.0], "seeds": [0], "steps": 25, "kl_budget": 0.4},
}
OPTIMUM_BETAS = [10.0, 5.0, 3.0, 2.0, 1.5, 1.0, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02]


def code_hash() -> str:
    """实验依赖的源文件去掉文档字符串与注释之后的 SHA-256（按路径排序后拼接路径与文本）。

    只改文档字符串、注释或排版不改变它（`rlhf_toy._code_hash.code_text`，Python 3.10–3.13 给出相同的文本）。
    """
    from rlhf_toy._code_hash import code_text

    digest = hashlib.sha256()
    base = ROOT / "src" / "rlhf_toy"
    for item in HASHED:
        path = base / item
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(f.relative_to(base)).encode())
            digest.update(code_text(f).encode("utf-8"))
    return digest.hexdigest()


def r3(x: float | None) -> float | None:
    return None if x is None else round(float(x), 3)


def curve(rows: list[dict], keys: tuple[str, ...], every: int, spread: bool = True) -> dict:
    """每隔 `every` 步取一个点：各指标在种子间的均值（`spread=True` 时另存最小值、最大值）。"""
    by_step: dict[int, list[dict]] = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(r)
    steps = sorted(by_step)
    steps = [s for s in steps if s % every == 0 or s == steps[-1]]
    out = {"samples": [by_step[s][0]["samples"] for s in steps]}
    for key in keys:
        values = [[r[key] for r in by_step[s]] for s in steps]
        out[key] = [r3(sum(v) / len(v)) for v in values]
        if spread:
            out[key + "_min"] = [r3(min(v)) for v in values]
            out[key + "_max"] = [r3(max(v)) for v in values]
    return out


def run(spec: dict) -> dict:
    timings = {}
    t0 = time.perf_counter()
    rows = run_comparison(seeds=spec["seeds"], budget=spec["budget"])
    online = [r for r in rows if r["algorithm"] not in OFFLINE]
    sweep = run_offline_sweep(OFFLINE, spec["seeds"], spec["offline_sizes"], spec["budget"])
    timings["comparison"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    oo = spec["overopt"]
    overopt = {}
    for algorithm in oo["algorithms"]:
        for beta in oo["betas"]:
            runs = [run_overoptimisation(algorithm, beta, seed, oo["steps"]) for seed in oo["seeds"]]
            flat = [{**h, "seed": s} for s, hist in zip(oo["seeds"], runs, strict=True) for h in hist]
            overopt[f"{algorithm}/{beta}"] = {
                **curve(flat, ("proxy_reward", "success_prob", "kl_to_ref"), 2, spread=False),
                "peak_success": r3(sum(peak(h)["success_prob"] for h in runs) / len(runs)),
                "final_success": r3(sum(h[-1]["success_prob"] for h in runs) / len(runs)),
                "final_kl": r3(sum(h[-1]["kl_to_ref"] for h in runs) / len(runs)),
                "final_proxy": r3(sum(h[-1]["proxy_reward"] for h in runs) / len(runs)),
                "early_stop_success": r3(sum(early_stop(h, oo["kl_budget"])["success_prob"] for h in runs) / len(runs)),
            }
    optimum = {}
    for seed in oo["seeds"]:
        for point in optimum_curve(make_setup(seed), OPTIMUM_BETAS):
            optimum.setdefault(point["beta"], []).append(point)
    optimum_rows = [
        {
            "beta": beta,
            **{k: r3(sum(p[k] for p in pts) / len(pts)) for k in ("proxy_reward", "success_prob", "kl_to_ref")},
        }
        for beta, pts in optimum.items()
    ]
    timings["overopt"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    broken = {}
    for name in BROKEN:
        runs = [run_broken(name, seed, spec["budget"]) for seed in spec["seeds"][: spec["broken_seeds"]]]
        flat = [
            {**h, "seed": s, "samples": h["step"]} for s, hist in zip(spec["seeds"], runs, strict=False) for h in hist
        ]
        broken[name] = curve(flat, ("success_prob", "entropy"), 2, spread=False)
    timings["broken"] = time.perf_counter() - t0

    summary = summarize(online, spec["target"]) + summarize(sweep, spec["target"])
    return {
        "summary": [{k: r3(v) if isinstance(v, float) else v for k, v in row.items()} for row in summary],
        "finals": {
            name: {
                str(s): [x for x in rows if x["algorithm"] == name and x["seed"] == s][-1]["success_prob"]
                for s in spec["seeds"]
            }
            for name in dict.fromkeys(r["algorithm"] for r in rows)
        },
        "curves": {
            name: curve([r for r in online if r["algorithm"] == name], ("success_prob", "kl_to_ref"), 4)
            for name in dict.fromkeys(r["algorithm"] for r in online)
        },
        "offline_curves": {
            name: curve(
                [{**r, "step": r["samples"]} for r in sweep if r["algorithm"] == name], ("success_prob", "kl_to_ref"), 1
            )
            for name in OFFLINE
        },
        "overopt": overopt,
        "optimum": optimum_rows,
        "broken": broken,
        "timings": {k: round(v, 2) for k, v in timings.items()},
    }


def plot(data: dict, targets: dict | None = None) -> None:
    """两张嵌在页面上的图（中文标签），版式同其余各章的图（scripts/figs/base.py）：窄而高、面板上下叠放、背景透明。

    `targets` 覆盖输出路径（键同 `FIGURES`）。`scripts/figures.py` 经登记表（scripts/figs/ch08_comparison.py）
    分别调用下面两个函数。
    """
    targets = targets or FIGURES
    plot_comparison(data, targets["comparison"])
    plot_overopt(data, targets["overopt"])


def plot_comparison(data: dict, path: Path) -> None:
    """各算法的真实奖励与 KL 随用掉的样本数（在线算法的种子范围，离线算法的数据量扫描）。"""
    from figs.base import WIDTH, save, setup

    plt = setup()
    names = {
        "reinforce": "REINFORCE",
        "rloo": "RLOO",
        "ppo": "PPO",
        "grpo": "GRPO",
        "dr_grpo": "Dr. GRPO",
        "dapo": "DAPO",
        "dpo": "DPO（离线）",
        "ipo": "IPO（离线）",
    }
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, 5.6), layout="constrained", sharex=True)
    for name, c in {**data["curves"], **data["offline_curves"]}.items():
        style = {"marker": "o", "ms": 3, "ls": "--"} if name in OFFLINE else {}
        for ax, key in zip(axes, ("success_prob", "kl_to_ref"), strict=True):
            (line,) = ax.plot(c["samples"], c[key], label=names[name], lw=1.3, **style)
            ax.fill_between(c["samples"], c[key + "_min"], c[key + "_max"], color=line.get_color(), alpha=0.12, lw=0)
    axes[0].set(ylabel="真实奖励（正确概率）", ylim=(0, 1.02))
    axes[1].set(xlabel="用掉的回答数（样本）", ylabel="KL(π‖π_ref)（nat）")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=4, columnspacing=0.9)
    save(fig, path)


def plot_overopt(data: dict, path: Path) -> None:
    """奖励过优化：PPO 各 β 的代理奖励与真实奖励随 KL，与精确最优解 π*_β 的曲线。"""
    from figs.base import WIDTH, save, setup

    plt = setup()
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, 5.2), layout="constrained", sharex=True)
    opt = data["optimum"]
    for ax, key, label in zip(
        axes, ("proxy_reward", "success_prob"), ("代理奖励（奖励模型打分）", "真实奖励（正确概率）"), strict=True
    ):
        ax.plot([p["kl_to_ref"] for p in opt], [p[key] for p in opt], "k--", lw=1, label="精确最优解 π*_β")
        for run_name, c in data["overopt"].items():
            algorithm, beta = run_name.split("/")
            if algorithm != "ppo":
                continue
            ax.plot(c["kl_to_ref"], c[key], lw=1.3, marker=".", ms=3, label=f"PPO β={float(beta):g}")
        ax.set(ylabel=label)
    axes[1].set(xlabel="KL(π‖π_ref)（nat）")
    axes[1].axvline(FULL["overopt"]["kl_budget"], color="grey", lw=0.8, ls=":")
    axes[1].text(
        FULL["overopt"]["kl_budget"] + 0.03,
        0.03,
        "KL 预算（早停）",
        fontsize=9,
        color="grey",
        transform=axes[1].get_xaxis_transform(),
    )
    axes[0].legend(loc="lower right")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="快速模式：只计时与打印，不写缓存")
    parser.add_argument("--plot", action="store_true", help="不跑实验，只从缓存重画图")
    args = parser.parse_args(argv)
    if args.plot:
        plot(json.loads(CACHE.read_text(encoding="utf-8")))
        print(f"wrote {len(FIGURES)} figures from {CACHE.relative_to(ROOT)}")
        return 0
    spec = QUICK if args.quick else FULL
    start = time.perf_counter()
    data = run(spec)
    total = time.perf_counter() - start
    for row in data["summary"]:
        print(row)
    print(f"{'quick' if args.quick else 'full'} mode: {total:.1f} s wall ({data['timings']})")
    if not args.quick:
        config = {**spec, "budget": budget_dict(spec["budget"])}
        payload = {"generated_by": "scripts/run_experiments.py", "config": config, "code_hash": code_hash(), **data}
        del payload["timings"]
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_text(json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        plot(data)
        print(f"wrote {CACHE.relative_to(ROOT)} ({CACHE.stat().st_size} bytes) and {len(FIGURES)} figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
