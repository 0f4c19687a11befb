"""命令行入口：`python -m rlhf_toy DEMO [PHASE] [选项]`（也装成命令 `rlhf-toy`）。

每个演示是一个子命令，有自己的阶段、选项与帮助：`python -m rlhf_toy --help` 列出全部演示（每个一行，
写着所在章节），`python -m rlhf_toy tiny-lm --help` 只列 tiny-lm 的阶段与选项。选项写在演示名之后：

    python -m rlhf_toy grpo --quick --seed 1
    python -m rlhf_toy tiny-lm dpo --quick
    python -m rlhf_toy trl grpo --quick --processes 2

`--quick` 每个演示都有；`--seed` 第 12 章的三个演示（offpolicy、distill、tools）没有，它们的种子固定为 0；
`--processes` 与 `--init-from` 只有 trl 有。`diagnose` 不是演示：它读一个训练日志文件（`python -m rlhf_toy diagnose
trainer_state.json`），没有阶段、`--quick` 与 `--seed`。环境变量 `DQN_QUICK=1` 与 `--quick` 等价（种子 notebook 的约定）。
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys

from rlhf_toy import demos

# 帮助与报错里的程序名：装好的命令 `rlhf-toy`（pyproject 的 [project.scripts]）与 `python -m rlhf_toy` 是同一个入口
PROG = "rlhf-toy" if os.path.basename(sys.argv[0]) == "rlhf-toy" else "python -m rlhf_toy"


class _Parser(argparse.ArgumentParser):
    """把 argparse 的两种常见错误说成中文：选错了演示或阶段（列出可选的），以及多余的参数。"""

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # argparse 检查 choices 的钩子（内部方法，3.10–3.13 相同；子命令名与阶段都经过这里）：只换报错的写法，
        # 检查本身不变。tests/test_cli.py 核对报错原文，argparse 若改了这个钩子，测试会发现
        if action.choices is not None and value not in action.choices:
            what = "没有演示" if action.dest == "demo" else f"{self.prog.split()[-1]} 没有阶段"
            raise argparse.ArgumentError(None, f"{what} {value!r}；可选：{'、'.join(map(str, action.choices))}")

    def parse_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201 - 同 argparse
        argv = sys.argv[1:] if args is None else list(args)
        at = next((i for i, a in enumerate(argv) if a in demos.DEMOS), None)
        if at and not {"-h", "--help"} & set(argv[:at]):  # 选项写在了演示名之前
            fixed = " ".join([*argv[at:], *argv[:at]])
            self.error(f"选项要写在演示名之后：`{PROG} {fixed}`（`{PROG} {argv[at]} --help` 列出它的选项）")
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            demo = getattr(parsed, "demo", None)
            if demo is None:
                self.error(f"多余的参数：{' '.join(extras)}（`{PROG} --help` 列出全部演示）")
            self.error(f"{demo} 不接受 {' '.join(extras)}（`{PROG} {demo} --help` 列出它的阶段与选项）")
        return parsed


def _table(rows: dict[str, str]) -> str:
    """帮助里的两栏表：左栏是名字（ASCII，对齐），右栏是一行说明。

    演示与阶段的表都自己排，不交给 argparse：argparse 列子命令时算栏宽少算了缩进（`reward-model` 会被折到下一行）。
    """
    width = max(map(len, rows))
    return "\n".join(f"  {name:<{width}}  {text}" for name, text in rows.items())


def _default_phase(demo: str) -> str:
    """不写阶段时演示用的阶段：演示函数 `phase` 参数的默认值（第 12 章的默认值是 `None`，即第一个阶段）。"""
    default = inspect.signature(demos.DEMOS[demo]).parameters["phase"].default
    return default or next(iter(demos.PHASES[demo]))


def _parser() -> argparse.ArgumentParser:
    """整个命令行：每个演示一个子命令（按 `demos.CHAPTERS` 的章节顺序），各有自己的阶段与选项。"""
    p = _Parser(
        prog=PROG,
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"rlhf-toy 各章的演示（CPU，固定随机种子）。\n\n演示（DEMO）：\n{_table(demos.CHAPTERS)}",
        epilog=f"""例：
  {PROG} seed                 第 1 章的种子演示
  {PROG} grpo --quick         只跑很短的版本（也可设环境变量 DQN_QUICK=1）
  {PROG} tiny-lm dpo          第 9 章的 DPO 阶段
  {PROG} tiny-lm --help       tiny-lm 的阶段与选项
  {PROG} diagnose out/trainer_state.json   诊断自己的训练日志""",
    )
    p.add_argument("-h", "--help", action="help", help="显示本帮助并退出")
    sub = p.add_subparsers(
        dest="demo",
        metavar="DEMO",
        parser_class=_Parser,
        help=f"上表中的一个演示；`{PROG} DEMO --help` 列出它的阶段与选项",
    )
    for demo, chapter in demos.CHAPTERS.items():
        if demo in demos.PATH_COMMANDS:
            d = sub.add_parser(demo, description=chapter, add_help=False)
            d.add_argument("-h", "--help", action="help", help="显示本帮助并退出")
            d.add_argument("path", metavar="PATH", help=demos.PATH_COMMANDS[demo])
            d.add_argument(
                "--accuracy-metric",
                default=None,
                metavar="NAME",
                help="留出集正确率的指标名（默认依次找 eval_accuracy、accuracy、success_prob、eval_reward）",
            )
            continue
        phases = demos.PHASES.get(demo, {})
        description = chapter
        if demo in demos.CHAPTER_12:
            description += "。种子固定为 0（页面与缓存用的种子），没有 --seed"
        if phases:
            default = _default_phase(demo)
            description += f"\n\n阶段（PHASE，不写时是 {default}）：\n{_table(phases)}"
        d = sub.add_parser(  # 不给 help：演示的表在上面的 description 里
            demo,
            description=description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            add_help=False,
        )
        d.add_argument("-h", "--help", action="help", help="显示本帮助并退出")
        if phases:
            d.add_argument("phase", nargs="?", choices=list(phases), metavar="PHASE", help=f"{'、'.join(phases)} 之一")
        else:
            d.set_defaults(phase=None)
        d.add_argument("--quick", action="store_true", help="只跑很短的版本（也可设环境变量 DQN_QUICK=1）")
        if demo in demos.CHAPTER_12:
            d.set_defaults(seed=0)  # 第 12 章的种子固定为 0（页面与缓存用的种子），没有 --seed
        else:
            d.add_argument("--seed", type=int, default=0, metavar="N", help="随机种子（默认 0）")
        if demo == "trl":
            d.add_argument(
                "--processes",
                type=int,
                default=1,
                metavar="N",
                help="进程数（默认 1；大于 1 时用 accelerate launch 启动）",
            )
            d.add_argument(
                "--init-from", default=None, metavar="DIR", help="grpo 与 dpo：从这个目录载入热启动模型，不再跑 SFT"
            )
    return p


def main(argv: list[str] | None = None) -> int:
    """解析命令行并运行所选演示；不写演示时打印帮助。

    Args:
        argv: 命令行参数（不含程序名）；`None` 表示 `sys.argv[1:]`。

    Returns:
        进程退出码（0 表示成功）。
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.demo is None:
        parser.print_help()
        return 0
    if args.demo in demos.PATH_COMMANDS:
        try:
            demos.DEMOS[args.demo](args.path, accuracy_metric=args.accuracy_metric)
        except ValueError as e:  # 读不了的文件、不是日志、NaN：一行中文报错，退出码 2（同用法错误）
            parser.error(f"{args.demo}：{e}")
        return 0
    quick = args.quick or os.environ.get("DQN_QUICK", "") not in ("", "0")
    extra = {} if args.phase is None else {"phase": args.phase}
    if args.demo == "trl":
        extra.update(processes=args.processes, init_from=args.init_from)
    demos.DEMOS[args.demo](seed=args.seed, quick=quick, **extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
