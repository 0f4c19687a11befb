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

from rlhf_toy.experiments.demo import run_compare  # noqa: E402 - 第 8 章

DEMOS["compare"] = run_compare
__all__ += ["run_compare"]

from rlhf_toy.demos.trl import run_trl  # noqa: E402 - 第 10 章（只在运行时导入 TRL）

DEMOS["trl"] = run_trl
__all__ += ["run_trl"]

from rlhf_toy.demos.reasoning import run_reasoning  # noqa: E402 - 第 11 章

DEMOS["reasoning"] = run_reasoning
__all__ += ["run_reasoning"]
