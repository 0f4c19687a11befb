"""The command line: `python -m rlhf_toy DEMO [--quick] [--seed N]` and `DQN_QUICK=1`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlhf_toy.__main__ import main
from rlhf_toy.demos import DEMOS


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "rlhf_toy", *args], capture_output=True, text=True, env=full_env)


def test_help_lists_every_demo():
    out = run_cli("--help")
    assert out.returncode == 0
    for name in DEMOS:
        assert name in out.stdout


def test_unknown_demo_is_a_usage_error():
    out = run_cli("no-such-demo")
    assert out.returncode == 2
    assert "invalid choice" in out.stderr


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
    assert out.returncode == 2 and "distill 没有阶段 'rollout'" in out.stderr
    with pytest.raises(ValueError, match="--seed 1"):
        main(["offpolicy", "bias", "--seed", "1"])
