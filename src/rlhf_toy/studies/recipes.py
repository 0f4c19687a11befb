r"""已发表的 GRPO / RLVR 配方的超参数，每一格带出处（论文的章节，或库的文件与行号及版本）。

论文没有写的值记为 `None`，页面上显示“未报告”，不猜。TRL 与 verl 的两列读自本仓库固定版本的安装包，
`tests/claims/test_your_run_settings_page.py` 逐格与安装的库核对。
"""

# --8<-- [start:imports]
from __future__ import annotations

from dataclasses import dataclass

# --8<-- [end:imports]

SETTINGS = (
    "num_generations",
    "prompts_per_generation",
    "prompts_per_step",
    "learning_rate",
    "beta",
    "kl_placement",
    "epsilon",
    "epsilon_high",
    "temperature",
    "max_completion_length",
    "num_iterations",
    "steps_per_generation",
    "loss_aggregation",
)
SETTING_NAMES = {
    "num_generations": "G（每题回答数）",
    "prompts_per_generation": "每次生成的提示词数",
    "prompts_per_step": "每个优化步的提示词数",
    "learning_rate": "学习率",
    "beta": "β",
    "kl_placement": "KL 放在哪里",
    "epsilon": "ε",
    "epsilon_high": "ε_high",
    "temperature": "采样温度",
    "max_completion_length": "最大回答长度",
    "num_iterations": "每批数据过几遍",
    "steps_per_generation": "每次生成的优化步数",
    "loss_aggregation": "损失汇总",
}


# --8<-- [start:cell]
@dataclass(frozen=True)
class Cell:
    """表里的一格：值（`None` 表示出处没有写）与出处。"""

    value: int | float | str | None
    source: str


# --8<-- [end:cell]

_TRL = "trl 1.16.0, trl/trainer/grpo_config.py"
_VERL = "verl 0.9.1, verl/trainer/config/_generated_ppo_trainer.yaml"
_DSM = "DeepSeekMath (arXiv 2402.03300)"
_R1 = (
    "DeepSeek-R1 (Nature 645:633–638, 2025, doi 10.1038/s41586-025-09422-z, Supplementary Information; "
    "arXiv 2501.12948 v1 gives none)"
)
_DAPO = "DAPO (arXiv 2503.14476)"
_DR = "Dr. GRPO (arXiv 2503.20783)"
_DR_SH = "understand-r1-zero examples/qwen2.5-math-7b.sh (commit f6df97e), the paper's official script"
_DAPO_SH = "verl recipe/dapo/run_dapo_qwen2.5_32b.sh (commit e2e729f), the official DAPO script"
_OR1 = "open-r1 recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml (commit bd581c7)"
_UNSET = "not set in the file; the TRL default of that time applies"
_OR1_UNSET = f"{_OR1}: {_UNSET}"

# --8<-- [start:recipes]
RECIPES: dict[str, dict[str, Cell]] = {
    "DeepSeekMath": {
        "num_generations": Cell(64, f"{_DSM} §4.2"),
        "prompts_per_generation": Cell(None, f"{_DSM} §4.2: training batch size 1024, not split into prompts × G"),
        "prompts_per_step": Cell(None, f"{_DSM} §4.2: training batch size 1024, not split into prompts × G"),
        "learning_rate": Cell(1e-6, f"{_DSM} §4.2"),
        "beta": Cell(0.04, f"{_DSM} §4.2"),
        "kl_placement": Cell("loss (k3)", f"{_DSM} §4.1.1, eq. (3)–(4)"),
        "epsilon": Cell(None, f"{_DSM} §4.2"),
        "epsilon_high": Cell(None, f"{_DSM}: one symmetric ε in eq. (3)"),
        "temperature": Cell(None, f"{_DSM} §4.2"),
        "max_completion_length": Cell(1024, f"{_DSM} §4.2 (max length)"),
        "num_iterations": Cell(1, f"{_DSM} §4.2: a single update after each exploration stage"),
        "steps_per_generation": Cell(1, f"{_DSM} §4.2: a single update after each exploration stage"),
        "loss_aggregation": Cell("seq-mean-token-mean", f"{_DSM} eq. (3): 1/G Σ_i 1/|o_i| Σ_t"),
    },
    "DeepSeek-R1-Zero": {
        "num_generations": Cell(16, _R1),
        "prompts_per_generation": Cell(512, f"{_R1}: 8,192 outputs per rollout ÷ G = 16"),
        "prompts_per_step": Cell(32, f"{_R1}: 32 unique questions per step (batch size 512 outputs)"),
        "learning_rate": Cell(3e-6, _R1),
        "beta": Cell(0.001, _R1),
        "kl_placement": Cell("loss (k3)", f"{_R1}, eq. (1)–(2)"),
        "epsilon": Cell(10, _R1),
        "epsilon_high": Cell(None, f"{_R1}: one symmetric ε"),
        "temperature": Cell(1.0, _R1),
        "max_completion_length": Cell(32768, f"{_R1} (65,536 after step 8.2k)"),
        "num_iterations": Cell(1, f"{_R1}: 8,192 outputs per rollout, 16 mini-batches, one inner epoch"),
        "steps_per_generation": Cell(16, f"{_R1}: 8,192 outputs per rollout, 16 mini-batches"),
        "loss_aggregation": Cell(None, f"{_R1} eq. (1) is written per sequence"),
    },
    "DAPO": {
        "num_generations": Cell(16, f"{_DAPO} §4.1 (training details)"),
        "prompts_per_generation": Cell(
            512,
            f"{_DAPO} §4.1, §3.2: 512 prompts kept for training after dynamic sampling; {_DAPO_SH} generates "
            "gen_prompt_bsz = 3 × 512 = 1,536 per round (data.gen_batch_size), up to 10 rounds (max_num_gen_batches)",
        ),
        "prompts_per_step": Cell(
            32, f"{_DAPO} §4.1: mini-batch 512 outputs ÷ G = 16 (train_prompt_mini_bsz=32 in {_DAPO_SH})"
        ),
        "learning_rate": Cell(1e-6, f"{_DAPO} §4.1 (AdamW, 20 warm-up rollout steps)"),
        "beta": Cell(0.0, f"{_DAPO} §2.3 (KL term removed)"),
        "kl_placement": Cell("none", f"{_DAPO} §2.3"),
        "epsilon": Cell(0.2, f"{_DAPO} §4.1"),
        "epsilon_high": Cell(0.28, f"{_DAPO} §4.1"),
        "temperature": Cell(
            1.0,
            f"{_DAPO_SH}: temperature=1.0, top_p=1.0; §4.1 of the paper gives 1.0 / top-p 0.7 "
            "for evaluation only; the script warms up 10 steps, the paper 20",
        ),
        "max_completion_length": Cell(20480, f"{_DAPO} §4.1: 16,384 expected + 4,096 soft punish cache"),
        "num_iterations": Cell(1, f"{_DAPO} §4.1: mini-batch 512, 16 gradient updates per rollout step"),
        "steps_per_generation": Cell(16, f"{_DAPO} §4.1: 16 gradient updates per rollout step"),
        "loss_aggregation": Cell("token-mean", f"{_DAPO} §3.3"),
    },
    "Dr. GRPO": {
        "num_generations": Cell(8, f"{_DR_SH}: --num_samples 8"),
        "prompts_per_generation": Cell(
            None, f"{_DR_SH}: --rollout_batch_size 128, its unit is defined in the oat library and not checked here"
        ),
        "prompts_per_step": Cell(
            None, f"{_DR_SH}: --train_batch_size 128, its unit is defined in the oat library and not checked here"
        ),
        "learning_rate": Cell(1e-6, f"{_DR_SH}: --learning_rate 0.000001"),
        "beta": Cell(0.0, f"{_DR_SH}: --beta 0"),
        "kl_placement": Cell("none", f"{_DR_SH}: --beta 0"),
        "epsilon": Cell(None, f"{_DR_SH} does not set it (the oat library's default applies)"),
        "epsilon_high": Cell(None, f"{_DR_SH} does not set it"),
        "temperature": Cell(1.0, f"{_DR_SH}: --temperature 1, --top_p 1"),
        "max_completion_length": Cell(3000, f"{_DR_SH}: --generate_max_length 3000"),
        "num_iterations": Cell(1, f"{_DR_SH}: --num_ppo_epochs 1"),
        "steps_per_generation": Cell(None, f"{_DR_SH}: the count follows from oat's batch units, not checked here"),
        "loss_aggregation": Cell("seq-mean-token-sum-norm", f"{_DR} §3.1: token sum over a constant, no 1/|o_i|"),
    },
    "Open-R1 1.5B": {
        "num_generations": Cell(16, f"{_OR1}: num_generations: 16"),
        "prompts_per_generation": Cell(
            None, f"{_OR1}: per_device_train_batch_size 16 (completions) × processes ÷ G = 16; process count not given"
        ),
        "prompts_per_step": Cell(
            "4 × 进程数",
            f"{_OR1}: per_device_train_batch_size 16 (completions) × processes × gradient_accumulation_steps 4 "
            "÷ G = 16; process count not given",
        ),
        "learning_rate": Cell(
            2e-5,
            f"{_OR1}: learning_rate: 2.0e-05 (cosine, warmup_ratio 0.1); full fine-tune (no LoRA), bf16, use_vllm, "
            "gradient_checkpointing",
        ),
        "beta": Cell(None, _OR1_UNSET),
        "kl_placement": Cell(None, _OR1_UNSET),
        "epsilon": Cell(None, _OR1_UNSET),
        "epsilon_high": Cell(None, _OR1_UNSET),
        "temperature": Cell(None, _OR1_UNSET),
        "max_completion_length": Cell(1024, f"{_OR1}: max_completion_length: 1024"),
        "num_iterations": Cell(None, _OR1_UNSET),
        "steps_per_generation": Cell(None, _OR1_UNSET),
        "loss_aggregation": Cell(None, f"{_OR1}: loss_type {_UNSET}"),
    },
    "TRL 1.16 默认": {
        "num_generations": Cell(8, f"{_TRL}:480"),
        "prompts_per_generation": Cell(1, f"{_TRL}:1100 (generation_batch_size 8 ÷ G = 8)"),
        "prompts_per_step": Cell(
            1, f"{_TRL}:1100 (per_device_train_batch_size 8 × 1 process × gradient_accumulation_steps 1 ÷ G = 8)"
        ),
        "learning_rate": Cell(1e-6, f"{_TRL}:423"),
        "beta": Cell(0.0, f"{_TRL}:681"),
        "kl_placement": Cell("none（β>0 时 k3 进损失）", "trl 1.16.0, trl/trainer/grpo_trainer.py:3098 (if beta != 0)"),
        "epsilon": Cell(0.2, f"{_TRL}:693"),
        "epsilon_high": Cell(0.2, f"{_TRL}:705 (None) and trl/trainer/grpo_trainer.py:946 (→ epsilon)"),
        "temperature": Cell(1.0, f"{_TRL}:532"),
        "max_completion_length": Cell(512, f"{_TRL}:494"),
        "num_iterations": Cell(1, f"{_TRL}:689"),
        "steps_per_generation": Cell(1, f"{_TRL}:1099 (None → gradient_accumulation_steps = 1)"),
        "loss_aggregation": Cell("dapo", f"{_TRL}:801 (loss_type)"),
    },
    "verl 0.9.1 默认": {
        "num_generations": Cell(1, "verl 0.9.1, verl/trainer/config/rollout/rollout.yaml:127 (rollout.n)"),
        "prompts_per_generation": Cell(1024, f"{_VERL}:506 (data.train_batch_size)"),
        "prompts_per_step": Cell(256, f"{_VERL}:80 (actor.ppo_mini_batch_size, counted in prompts)"),
        "learning_rate": Cell(1e-6, f"{_VERL}:12 (actor.optim.lr)"),
        "beta": Cell(
            "0（use_kl_loss=false；打开时 0.001）",
            f"{_VERL}:106 (actor.use_kl_loss: false; kl_loss_coef 0.001 at :109; algorithm.use_kl_in_reward: false at :869)",
        ),
        "kl_placement": Cell(
            "none（打开时 low_var_kl 进损失）", f"{_VERL}:110 (kl_loss_type, used only when use_kl_loss)"
        ),
        "epsilon": Cell(0.2, f"{_VERL}:86 (clip_ratio_low)"),
        "epsilon_high": Cell(0.2, f"{_VERL}:87 (clip_ratio_high)"),
        "temperature": Cell(1.0, f"{_VERL}:297 (rollout.temperature)"),
        "max_completion_length": Cell(512, f"{_VERL}:505 (data.max_response_length)"),
        "num_iterations": Cell(1, f"{_VERL}:111 (ppo_epochs)"),
        "steps_per_generation": Cell(4, f"{_VERL}:80 (ppo_mini_batch_size 256; 1024 / 256)"),
        "loss_aggregation": Cell("token-mean", f"{_VERL}:101 (loss_agg_mode)"),
    },
}
# --8<-- [end:recipes]

# 每一行：从玩具带过去的与带不过去的（页面上的最后一列）
CARRIES_OVER = {
    "num_generations": "带得过去：G 决定组内基线的噪声；通过率接近 0 或 1 时要更大的 G 才有非零优势",
    "prompts_per_generation": "带不过去：玩具每次生成 32 题；R1 是 512，DAPO 动态采样后留 512 题训练（每轮先生成 1,536 题），verl 默认 1024，由显存与生成吞吐决定",
    "prompts_per_step": "带得过去：玩具每个优化步 32 题，与 R1、DAPO 相同；verl 默认 256",
    "learning_rate": "带不过去：玩具用 5e-4；表中的论文与库都用 1e-6 量级",
    "beta": "带得过去：DAPO、Dr. GRPO 与 TRL 默认取 0，R1-Zero 取 0.001；β = 0 时 TRL 不记 kl，怎样看漂移见下文",
    "kl_placement": "带得过去：放在损失里（k3）与放在奖励里的区别见第 7 章",
    "epsilon": "带不过去：玩具每次生成只做一个优化步，比率恒为 1，ε 不起作用（第 11 章）；拆成多个优化步后它才起作用",
    "epsilon_high": "带不过去：同 ε；DAPO 的 0.28 是在每次生成 16 个优化步之下定的",
    "temperature": "带得过去：训练采样用 1.0，评估另设",
    "max_completion_length": "带不过去：玩具 12 个 token；真实推理任务从 1k 到 32k，决定显存与时间",
    "num_iterations": "带得过去：大多数配方每批数据只过一遍",
    "steps_per_generation": "带不过去：玩具每次生成只做一个优化步；DAPO、R1 做 16 个，后面的步已是异策略（第 12 章）",
    "loss_aggregation": "带得过去：dapo / token-mean 是两个库的默认，长度偏差见第 6 章",
}


# --8<-- [start:format_cell]
def format_cell(cell: Cell) -> str:
    """一格的显示文字：`None` 显示为“未报告”，浮点数用最短的写法（`1e-06`、`0.04`）。"""
    if cell.value is None:
        return "未报告"
    return f"{cell.value:g}" if isinstance(cell.value, float) else str(cell.value)


# --8<-- [end:format_cell]


# --8<-- [start:lora_1p5b_start]
def lora_1p5b_start(G: int = 8, P: int = 4) -> dict[str, object]:
    """一张 GPU、约 1.5B + LoRA 的 `GRPOConfig` 起点（未经本书验证），每一项的来源写在注释里。

    Args:
        G: 每题回答数 `num_generations`（int，≥ 2）。
        P: 每个优化步的提示词数（int，≥ 1）。

    Returns:
        传给 `trl.GRPOConfig` 的关键字参数。`per_device_train_batch_size` 数的是回答条数，等于 `P * G`。

    Raises:
        ValueError: `G` 小于 2 或 `P` 小于 1。

    Source: open-r1 recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml (commit bd581c7)；
    LoRA 学习率的经验法则见 Schulman 等 2025（LoRA Without Regret）；其余是 trl 1.16.0 的默认。
    """
    if G < 2:
        raise ValueError(f"G must be >= 2 (a group needs two completions), got G={G}")
    if P < 1:
        raise ValueError(f"P must be >= 1, got P={P}")
    return dict(
        num_generations=G,  # TRL 默认 8；答对率接近 0 或 1 的题多时加大
        per_device_train_batch_size=P * G,  # 数的是回答条数：P 道题 × G 条回答
        gradient_accumulation_steps=1,  # 一批生成正好一个优化步，比率恒为 1
        learning_rate=2e-4,  # Open-R1 1.5B 全参数的 2e-5 × 约 10（LoRA 的经验法则）
        lr_scheduler_type="cosine",  # 同 Open-R1 1.5B 演示
        warmup_steps=0.1,  # 小于 1 即比例：同 Open-R1 的 warmup_ratio 0.1
        max_completion_length=1024,  # 按自己任务的回答长短定；Open-R1 1.5B 演示取 1024
        beta=0.0,  # 不加 KL，也不载入参考模型（TRL 1.16 默认）
        loss_type="dapo",  # TRL 1.16 默认
        num_iterations=1,  # 每批生成只用一遍（TRL 1.16 默认）
        bf16=True,  # 同 Open-R1 1.5B 演示
        model_init_kwargs={"dtype": "bfloat16"},  # 按 bf16 载入权重；不写时 TRL 按 fp32 载入，权重一项翻倍
        gradient_checkpointing=True,  # 同 Open-R1 1.5B 演示
    )


# --8<-- [end:lora_1p5b_start]
