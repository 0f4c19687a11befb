"""命令行入口：`python -m rlhf_toy DEMO [--quick] [--seed N]`；第 9 章另有 `python -m rlhf_toy tiny-lm {sft,grpo,dpo,ppo}`，
第 10 章有 `python -m rlhf_toy trl {sft,grpo,dpo} [--processes N]`（需要 TRL），
第 11 章有 `python -m rlhf_toy reasoning {warm-start,grpo,rft,length,r1-zero,pass-at-k,best-of-n}`，
第 12 章有 `python -m rlhf_toy offpolicy {bias,staleness,mismatch}`、`distill {modes,onpolicy}` 与 `tools {rollout,train}`。

环境变量 `DQN_QUICK=1` 与 `--quick` 等价（种子 notebook 的约定）。
"""

from __future__ import annotations

import argparse
import os
import sys

from rlhf_toy import demos
from rlhf_toy.demos import CHAPTER_12_PHASES

PHASES = ("sft", "grpo", "dpo", "ppo")  # `tiny-lm` 的阶段（第 9 章）；`trl` 只有前三个（第 10 章）
REASONING_PHASES = ("warm-start", "grpo", "rft", "length", "r1-zero", "pass-at-k", "best-of-n")  # 第 11 章
PHASED = {"tiny-lm": PHASES, "trl": PHASES[:3], "reasoning": REASONING_PHASES, **CHAPTER_12_PHASES}
WITH_PHASES = tuple(PHASED)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rlhf_toy", description="rlhf-toy 各章演示（CPU，固定随机种子）")
    p.add_argument("demo", choices=sorted(demos.DEMOS), help="要运行的演示")
    p.add_argument("--quick", action="store_true", help="只跑很短的版本（也可设环境变量 DQN_QUICK=1）")
    p.add_argument("--seed", type=int, default=0, help="随机种子（默认 0）")
    p.add_argument(
        "phase",
        nargs="?",
        choices=list(dict.fromkeys(p for phases in PHASED.values() for p in phases)),
        help="只用于 tiny-lm 与 trl（sft、grpo（默认）、dpo 或 ppo）、reasoning（"
        + "、".join(REASONING_PHASES)
        + "）与第 12 章的 "
        + "；".join(f"{c}（{'、'.join(p)}）" for c, p in CHAPTER_12_PHASES.items()),
    )
    p.add_argument("--processes", type=int, default=1, help="只用于 trl：进程数（大于 1 时用 accelerate launch 启动）")
    p.add_argument("--init-from", default=None, help="只用于 trl grpo：从这个目录载入热启动模型，不再跑 SFT")
    return p


def main(argv: list[str] | None = None) -> int:
    """解析命令行并运行所选演示。

    Args:
        argv: 命令行参数（不含程序名）；`None` 表示 `sys.argv[1:]`。

    Returns:
        进程退出码（0 表示成功）。
    """
    args = _parser().parse_args(argv)
    quick = args.quick or os.environ.get("DQN_QUICK", "") not in ("", "0")
    if args.phase is not None and args.demo not in WITH_PHASES:
        _parser().error(f"阶段 {args.phase!r} 只用于 {'、'.join(WITH_PHASES)}")
    allowed = PHASED.get(args.demo, PHASES)
    if args.phase is not None and args.phase not in allowed:
        _parser().error(f"{args.demo} 没有阶段 {args.phase!r}；可选：{'、'.join(allowed)}")
    if (args.processes != 1 or args.init_from) and args.demo != "trl":
        _parser().error("--processes 与 --init-from 只用于 trl")
    extra = {} if args.phase is None else {"phase": args.phase}
    if args.demo == "trl":
        extra.update(processes=args.processes, init_from=args.init_from)
    demos.DEMOS[args.demo](seed=args.seed, quick=quick, **extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
