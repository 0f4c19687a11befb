"""命令行演示：`python -m rlhf_toy {seed,grpo,dpo}` 背后的函数，每个都打印并返回指标历史。"""

from rlhf_toy.demos.bandit import run_dpo, run_grpo, run_seed

DEMOS = {"seed": run_seed, "grpo": run_grpo, "dpo": run_dpo}

__all__ = ["DEMOS", "run_dpo", "run_grpo", "run_seed"]
