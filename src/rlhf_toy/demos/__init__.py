"""命令行演示：`python -m rlhf_toy DEMO [PHASE] [--quick] [--seed N]` 背后的函数，每个都打印并返回指标历史。

`DEMOS` 是演示名 -> 函数；`CHAPTERS` 是 `python -m rlhf_toy --help` 里每个演示的一行说明（所在章节），
`PHASES` 是有阶段的演示的阶段与说明（`python -m rlhf_toy DEMO --help` 列出）。
"""

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

from rlhf_toy.demos.diagnose import run_diagnose  # noqa: E402 - 第 14 章（读日志，不训练）

DEMOS["diagnose"] = run_diagnose
__all__ += ["run_diagnose"]

# 命令行的说明：`python -m rlhf_toy --help` 每个演示一行（所在章节与内容），按章节排列
CHAPTERS = {
    "seed": "第 1 章：种子演示，查表策略上先 GRPO 再 DPO",
    "reinforce": "第 2 章：REINFORCE 与三种基线（梯度估计的偏差与方差，奖励加常数）",
    "rloo": "第 2 章：RLOO（k=4，KL 惩罚在奖励里）",
    "reward-model": "第 3 章：Bradley–Terry 奖励模型（标签噪声 20%）",
    "ppo": "第 4 章：对第 3 章的奖励模型做 PPO",
    "dpo": "第 5 章：DPO（损失与隐式奖励）",
    "grpo": "第 6 章：GRPO（奖励、正确率、KL 与截断比例）",
    "compare": "第 8 章：同台对比与奖励过优化",
    "tiny-lm": "第 9 章：小语言模型上的 SFT、GRPO、DPO、PPO",
    "trl": "第 10 章：交给 TRL 的 SFT、GRPO、DPO（需要 TRL）",
    "reasoning": "第 11 章：推理型强化学习（带草稿的加法）",
    "offpolicy": "第 12 章：异策略（落后的采样器、重要性修正）",
    "distill": "第 12 章：蒸馏（前向与反向 KL，同策略蒸馏）",
    "tools": "第 12 章：工具调用（多轮回答，遮住工具输出）",
    "diagnose": "第 14 章：诊断自己的训练日志（TRL 的 trainer_state.json）",
}
# 读文件、不训练的命令：命令 -> 位置参数 PATH 的说明（没有阶段、--quick、--seed）
PATH_COMMANDS = {"diagnose": "TRL 写出的 trainer_state.json（或每步一个指标对象的 JSON 列表）"}
# 有阶段的演示：演示 -> {阶段: 说明}；不写阶段时用演示函数的默认阶段（`phase` 参数的默认值，第 12 章是第一个）
PHASES = {
    "tiny-lm": {
        "sft": "只跑 SFT：留出集贪心正确率随步数的变化",
        "grpo": "SFT 热启动后跑 GRPO：正确率、回答长度、KL 与熵",
        "dpo": "SFT 热启动后用模型自己的样本造偏好对，跑离线 DPO",
        "ppo": "SFT 热启动后跑 PPO（价值模型 + GAE + 逐 token KL 奖励）",
    },
    "trl": {
        "sft": "只跑 SFTTrainer 热启动",
        "grpo": "SFT 热启动后用 GRPOTrainer 跑第 9 章的 GRPO 配置",
        "dpo": "SFT 热启动后用模型自己的样本造偏好对，跑 DPOTrainer",
    },
    "reasoning": {
        "warm-start": "两个起点（带草稿的示范、只学格式的随机数字）的 SFT 热启动与评估",
        "grpo": "从带草稿的起点跑 GRPO",
        "rft": "从带草稿的起点跑 RFT（拒绝采样微调）",
        "length": "GRPO 加 DAPO 的软超长惩罚",
        "r1-zero": "从只学会格式的起点跑 GRPO（R1-Zero 式）",
        "pass-at-k": "GRPO 前后的 pass@k",
        "best-of-n": "best-of-N 的扫描（精确计算）",
    },
    "offpolicy": {
        "bias": "采样器落后 k 步时各种修正的相对偏差与方差（精确）",
        "staleness": "精确的学习曲线：第 5、10、30 步的期望奖励，落后步数 × 修正",
        "mismatch": "采样器与训练器不一致（温度、top-k、top-p、bf16）时的相对偏差",
    },
    "distill": {
        "modes": "精确实验台：每个拟合学生的 μ、σ、两峰质量与两种 KL",
        "onpolicy": "同策略蒸馏 vs 教师样本 SFT：采样 token 数与留出集正确率",
    },
    "tools": {
        "rollout": "一条示范与几条策略自己的多轮回答，及遮住工具输出后的损失掩码",
        "train": "遮住、不遮、打乱三种设置的训练批指标",
    },
}

# 第 12 章：三部分各一个命令，子命令是模块里的 demo_<名字>（固定种子，打印一张表）
CHAPTER_12 = {"offpolicy": "offpolicy", "distill": "distillation", "tools": "tools"}  # 命令 -> rlhf_toy.demos 模块
CHAPTER_12_PHASES = {command: tuple(PHASES[command]) for command in CHAPTER_12}  # 子命令，第一个是默认


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
