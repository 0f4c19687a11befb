"""命令行演示：`python -m rlhf_toy {seed,grpo,dpo}` 背后的函数，每个都打印并返回指标历史。"""

from rlhf_toy.demos.bandit import run_dpo, run_grpo, run_seed
from rlhf_toy.demos.rlhf import run_ppo, run_reinforce, run_reward_model, run_rloo

DEMOS = {"seed": run_seed, "grpo": run_grpo, "dpo": run_dpo}
DEMOS.update({"reinforce": run_reinforce, "rloo": run_rloo, "reward-model": run_reward_model, "ppo": run_ppo})

__all__ = ["DEMOS", "run_dpo", "run_grpo", "run_seed"]
__all__ += ["run_ppo", "run_reinforce", "run_reward_model", "run_rloo"]

from rlhf_toy.demos.tiny_lm import run_tiny_lm  # noqa: E402 - 第 9 章，追加在各章之后

DEMOS["tiny-lm"] = run_tiny_lm
__all__ += ["run_tiny_lm"]

from rlhf_toy.demos.comparison import run_compare  # noqa: E402 - 第 8 章

DEMOS["compare"] = run_compare
__all__ += ["run_compare"]

from rlhf_toy.demos.trl import run_trl  # noqa: E402 - 第 10 章（只在运行时导入 TRL）

DEMOS["trl"] = run_trl
__all__ += ["run_trl"]

from rlhf_toy.demos.reasoning import run_reasoning  # noqa: E402 - 第 11 章

DEMOS["reasoning"] = run_reasoning
__all__ += ["run_reasoning"]

# 第 12 章：三部分各一个命令，子命令是模块里的 demo_<名字>（固定种子，打印一张表）
CHAPTER_12 = {"offpolicy": "offpolicy", "distill": "distillation", "tools": "tools"}  # 命令 -> rlhf_toy.demos 模块
CHAPTER_12_PHASES = {
    "offpolicy": ("bias", "staleness", "mismatch"),
    "distill": ("modes", "onpolicy"),
    "tools": ("rollout", "train"),
}


def _chapter_12(command: str):
    def run(seed: int = 0, quick: bool = False, phase: str | None = None) -> str:
        """第 12 章的演示：`phase` 是子命令（默认第一个）；种子固定为 0。"""
        import importlib

        if seed != 0:
            raise ValueError(f"{command} 的演示种子固定为 0（页面与缓存用的种子），实际是 --seed {seed}")
        module = importlib.import_module(f"rlhf_toy.demos.{CHAPTER_12[command]}")
        out = getattr(module, f"demo_{phase or CHAPTER_12_PHASES[command][0]}")(quick=quick)
        print(out)
        return out

    run.__name__ = f"run_{CHAPTER_12[command]}"
    return run


for _command in CHAPTER_12:
    DEMOS[_command] = _chapter_12(_command)
