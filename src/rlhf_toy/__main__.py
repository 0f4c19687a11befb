"""命令行入口：`python -m rlhf_toy {seed,grpo,dpo} [--quick] [--seed N]`。

环境变量 `DQN_QUICK=1` 与 `--quick` 等价（种子 notebook 的约定）。
"""

from __future__ import annotations

import argparse
import os
import sys

from rlhf_toy import demos


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rlhf_toy", description="rlhf-toy 各章演示（CPU，固定随机种子）")
    p.add_argument("demo", choices=sorted(demos.DEMOS), help="要运行的演示")
    p.add_argument("--quick", action="store_true", help="只跑很短的版本（也可设环境变量 DQN_QUICK=1）")
    p.add_argument("--seed", type=int, default=0, help="随机种子（默认 0）")
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
    demos.DEMOS[args.demo](seed=args.seed, quick=quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
