"""The command line: `python -m rlhf_toy DEMO [PHASE] [--quick] [--seed N]` (one subcommand per demo) and `DQN_QUICK=1`.

Also: every `python -m rlhf_toy …` command shown to readers (README.md, docs/*.md, notebooks/*.py) parses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlhf_toy.__main__ import _parser, main
from rlhf_toy.demos import CHAPTER_12, CHAPTERS, DEMOS, PHASES

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "rlhf_toy", *args], capture_output=True, text=True, env=full_env)


def help_text(capsys, monkeypatch, *args: str) -> str:
    """`python -m rlhf_toy ARGS --help` in this process (wide terminal: no line is wrapped)."""
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def usage_error(capsys, *args: str) -> str:
    """The message of the usage error (exit status 2) that `python -m rlhf_toy ARGS` stops with."""
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_help_lists_every_demo():
    out = run_cli("--help")
    assert out.returncode == 0
    for name in DEMOS:
        assert name in out.stdout


def test_top_level_help_is_one_line_per_demo_with_its_chapter(capsys, monkeypatch):
    out = help_text(capsys, monkeypatch)
    for name, chapter in CHAPTERS.items():
        assert re.search(rf"^ +{re.escape(name)} +{re.escape(chapter)}$", out, re.M), name
        assert chapter.startswith("第 ")
    for not_here in ("warm-start", "staleness", "--processes", "--init-from", "--seed"):
        assert not_here not in out  # phases and options belong to the demos


def test_demo_help_shows_only_its_phases_and_options(capsys, monkeypatch):
    out = help_text(capsys, monkeypatch, "tiny-lm")
    assert out.startswith("usage: python -m rlhf_toy tiny-lm ")
    assert CHAPTERS["tiny-lm"] in out and "不写时是 grpo" in out
    for phase, text in PHASES["tiny-lm"].items():
        assert re.search(rf"^ +{phase} +{re.escape(text)}$", out, re.M), phase
    assert "--quick" in out and "--seed" in out
    for other in ("warm-start", "bias", "--processes", "--init-from"):
        assert other not in out
    trl = help_text(capsys, monkeypatch, "trl")
    assert "--processes N" in trl and "--init-from DIR" in trl and "ppo" not in trl
    seed = help_text(capsys, monkeypatch, "seed")
    assert "PHASE" not in seed and "--seed" in seed
    offpolicy = help_text(capsys, monkeypatch, "offpolicy")
    assert "--quick" in offpolicy and "--seed" not in offpolicy.split("options:")[1]  # seed fixed at 0


def test_no_demo_prints_the_help(capsys):
    assert main([]) == 0
    assert "python -m rlhf_toy tiny-lm --help" in capsys.readouterr().out


def test_unknown_demo_is_a_usage_error():
    out = run_cli("no-such-demo")
    assert out.returncode == 2
    assert "error: 没有演示 'no-such-demo'；可选：seed、reinforce、" in out.stderr


@pytest.mark.parametrize("demo", sorted(PHASES))
def test_wrong_phase_names_the_valid_ones(demo, capsys):
    message = usage_error(capsys, demo, "no-such-phase", "--quick")
    assert message == (
        f"python -m rlhf_toy {demo}: error: {demo} 没有阶段 'no-such-phase'；可选：{'、'.join(PHASES[demo])}"
    )


def test_phase_or_option_of_another_demo_is_refused(capsys):
    assert "grpo 不接受 sft" in usage_error(capsys, "grpo", "sft")
    assert "grpo 不接受 --processes 2" in usage_error(capsys, "grpo", "--processes", "2")
    assert "tiny-lm 不接受 --init-from x" in usage_error(capsys, "tiny-lm", "grpo", "--init-from", "x")
    assert "offpolicy 不接受 --seed 1" in usage_error(capsys, "offpolicy", "bias", "--seed", "1")


def test_options_before_the_demo_are_refused_with_the_fixed_command(capsys):
    message = usage_error(capsys, "--seed", "3", "tiny-lm", "dpo", "--quick")
    assert "选项要写在演示名之后：`python -m rlhf_toy tiny-lm dpo --quick --seed 3`" in message


def test_phases_match_the_demo_modules():
    import importlib

    from rlhf_toy.demos import reasoning, tiny_lm, trl

    assert list(CHAPTERS) == list(dict.fromkeys(CHAPTERS)) and set(CHAPTERS) == set(DEMOS)
    assert list(PHASES["tiny-lm"]) == list(tiny_lm.PHASES)
    assert list(PHASES["trl"]) == list(trl.RUNS)
    assert list(PHASES["reasoning"]) == list(reasoning.PHASES)
    assert set(PHASES) == {"tiny-lm", "trl", "reasoning", *CHAPTER_12}
    for command, module in CHAPTER_12.items():
        for phase in PHASES[command]:
            assert callable(getattr(importlib.import_module(f"rlhf_toy.demos.{module}"), f"demo_{phase}"))


def test_trl_relaunch_command_parses(monkeypatch):
    """`--processes 2` relaunches `python -m rlhf_toy trl …` under accelerate: that command must parse."""
    from rlhf_toy.demos import trl

    launched = []
    monkeypatch.setattr(
        trl.subprocess,
        "run",
        lambda command, check: launched.append(command) or subprocess.CompletedProcess(command, 0),
    )
    trl.launch("grpo", True, 2, seed=1, init_from="/tmp/warm")
    command = launched[0]
    args = _parser().parse_args(command[command.index("rlhf_toy") + 1 :])
    assert (args.demo, args.phase, args.quick, args.seed, args.init_from) == ("trl", "grpo", True, 1, "/tmp/warm")


def shown_commands() -> list[tuple[str, list[str]]]:
    """Every `python -m rlhf_toy …` in README.md, docs/*.md and notebooks/*.py: (where, arguments).

    A command ends at a backtick, a `#` comment or the end of the line; arguments are ASCII words.
    """
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.py"))]
    found = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(r"python -m rlhf_toy((?:[ \t]+(?!#)[!-_a-~]+)*)", line):
                found.append((f"{path.relative_to(ROOT)}:{n}", m.group(1).split()))
    return found


def test_the_readers_commands_were_found():
    commands = [args for _, args in shown_commands()]
    assert len(commands) >= 15
    assert ["trl", "grpo", "--quick", "--processes", "2"] in commands and ["--help"] in commands


@pytest.mark.parametrize(("where", "args"), shown_commands(), ids=lambda x: x if isinstance(x, str) else None)
def test_every_command_shown_to_readers_parses(where, args, capsys, monkeypatch):
    if "--help" in args:  # the parser prints the help and exits 0
        help_text(capsys, monkeypatch, *[a for a in args if a != "--help"])
        return
    parsed = _parser().parse_args(args)  # a usage error would raise SystemExit(2)
    assert parsed.demo is None or parsed.demo in DEMOS, where


def test_quick_flag_and_environment_variable_agree(capsys):
    main(["grpo", "--quick"])
    by_flag = capsys.readouterr().out
    os.environ["DQN_QUICK"] = "1"
    try:
        main(["grpo"])
    finally:
        del os.environ["DQN_QUICK"]
    by_env = capsys.readouterr().out
    assert by_flag == by_env
    assert by_flag.strip().splitlines()[-1].split()[0] == "20"  # quick GRPO stops at step 20


def test_seed_option_changes_the_run(capsys):
    main(["dpo", "--quick", "--seed", "0"])
    first = capsys.readouterr().out
    main(["dpo", "--quick", "--seed", "1"])
    second = capsys.readouterr().out
    assert first != second


@pytest.mark.parametrize("name", ["grpo", "dpo"])
def test_demo_improves_true_success_probability(name):
    history = DEMOS[name](seed=0, quick=True)
    assert history[-1]["success_prob"] > 0.9


@pytest.mark.parametrize(("command", "phase"), [("offpolicy", "bias"), ("distill", "modes"), ("tools", "rollout")])
def test_chapter_12_commands_print_their_table(command, phase, capsys):
    assert main([command, phase, "--quick"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) >= 3


def test_chapter_12_phases_are_checked_per_command():
    out = run_cli("distill", "rollout")
    assert out.returncode == 2 and "distill 没有阶段 'rollout'；可选：modes、onpolicy" in out.stderr
    with pytest.raises(ValueError, match="--seed 1"):  # no --seed on the command line; the function refuses too
        DEMOS["offpolicy"](seed=1, phase="bias")


# --- diagnose: reads a log file, takes a path instead of phases ---


def test_diagnose_help_shows_the_path_and_no_demo_options(capsys, monkeypatch):
    out = help_text(capsys, monkeypatch, "diagnose")
    assert "usage: python -m rlhf_toy diagnose [-h] [--accuracy-metric NAME] PATH" in out
    assert CHAPTERS["diagnose"] in out and "trainer_state.json" in out
    for not_here in ("--quick", "--seed", "PHASE"):
        assert not_here not in out


def test_diagnose_bad_path_is_a_usage_error(capsys, tmp_path):
    missing = tmp_path / "no_such" / "trainer_state.json"
    assert usage_error(capsys, "diagnose", str(missing)) == (
        f"python -m rlhf_toy: error: diagnose：path：{str(missing)!r} 不是一个存在的文件；要的是 TRL 写出的 trainer_state.json"
    )
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}', encoding="utf-8")
    assert "不是训练日志" in usage_error(capsys, "diagnose", str(tmp_path / "config.json"))
    assert usage_error(capsys, "diagnose").endswith("the following arguments are required: PATH")


def test_diagnose_prints_the_report(capsys, tmp_path):
    log = [{"step": s, "loss": 0.1, "reward": 0.5, "frac_reward_zero_std": 1.0} for s in (1, 2, 3)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": log}), encoding="utf-8")
    assert main(["diagnose", str(tmp_path / "trainer_state.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"训练日志诊断：{tmp_path / 'trainer_state.json'}")
    assert "组内奖励全相同，没有学习信号（第 1 步起）" in out and "缺少指标、没能检查：" in out
