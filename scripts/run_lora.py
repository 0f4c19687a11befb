"""第 13 章的缓存：同一个 SFT 热启动之后，TRL 的 GRPO 全参数微调与 LoRA（同样的步数、提示词、种子），写缓存。

    .venv/bin/python scripts/run_lora.py      # 空闲的两核机器上约两分钟；写 docs/data/lora.json

四次运行都从同一个热启动模型（第 10 章的 `sft_warm_start`，到训练题正确率 0.5 为止）出发，
各跑 `STEPS` 步第 9 章的 GRPO 配置（每步 32 个提示词 × G = 8），只差 `peft_config` 与学习率：

- `full`：全参数，学习率 5e-4（第 9、10 章的值）；
- `lora`：LoRA（r = 8、α = 16、七个线性层），同样的学习率 5e-4；
- `lora_lr10`：LoRA，学习率 5e-3（LoRA 常用比全参数高约一个数量级的学习率）；
- `lora_r1`：LoRA，秩 r = 1、α = 2（α/r 仍是 2），学习率 5e-4：页面上“容量”假设的对照。

只有一个种子（0）：各组的差别要与种子之间的波动比，页面上这样说。

页面与 notebook 只读缓存；`tests/test_your_run.py` 检查缓存的代码摘要与配置和当前代码一致。
改了下面 `SOURCES` 里的代码之后重跑本脚本，提交 JSON。
"""

from __future__ import annotations

import hashlib
import json
import resource
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "data" / "lora.json"
SOURCES = [
    "src/rlhf_toy/integrations/lora.py",
    "src/rlhf_toy/integrations/trl.py",
    "src/rlhf_toy/demos/trl.py",
    "src/rlhf_toy/tasks/addition.py",
    "src/rlhf_toy/demos/tiny_lm.py",
    "src/rlhf_toy/train/grpo.py",
    "scripts/run_lora.py",
    "src/rlhf_toy/estimators/advantages.py",
    "src/rlhf_toy/estimators/dynamic_sampling.py",
    "src/rlhf_toy/estimators/entropy.py",
    "src/rlhf_toy/estimators/kl.py",
    "src/rlhf_toy/estimators/rewards.py",
    "src/rlhf_toy/losses/aggregate.py",
    "src/rlhf_toy/losses/dpo.py",
    "src/rlhf_toy/losses/grpo.py",
    "src/rlhf_toy/losses/ppo.py",
    "src/rlhf_toy/policies/table.py",
    "src/rlhf_toy/policies/transformer.py",
    "src/rlhf_toy/tasks/bandit.py",
    "src/rlhf_toy/train/dpo.py",
    "src/rlhf_toy/train/ppo.py",
    "src/rlhf_toy/train/sft.py",
]

STEPS = 100
RUNS = {
    "full": {"lora": False, "learning_rate": 5e-4},
    "lora": {"lora": True, "learning_rate": 5e-4},
    "lora_lr10": {"lora": True, "learning_rate": 5e-3},
    "lora_r1": {"lora": True, "learning_rate": 5e-4, "r": 1, "lora_alpha": 2},
}
LORA = {"r": 8, "lora_alpha": 16}


def code_hash() -> str:
    """`SOURCES` 去掉文档字符串与注释之后的 SHA-256（前 16 位）：缓存来自哪份代码。"""
    from rlhf_toy._code_hash import code_text

    h = hashlib.sha256()
    for path in SOURCES:
        h.update(code_text(ROOT / path).encode("utf-8"))
    return h.hexdigest()[:16]


def config() -> dict:
    """缓存对应的配置（改了这些数，缓存就过期）。"""
    from rlhf_toy.demos import trl

    return {"sft": trl.SFT_FULL, "seed": 0, "steps": STEPS, "runs": RUNS, "lora": LORA}


def main() -> int:
    from transformers import Qwen2ForCausalLM

    from rlhf_toy.demos.tiny_lm import grpo_config
    from rlhf_toy.demos.trl import sft_warm_start
    from rlhf_toy.integrations.lora import lora_config, run_grpo
    from rlhf_toy.tasks.addition import AdditionTask

    cpu0 = time.process_time()
    work = tempfile.mkdtemp(prefix="rlhf_toy_lora_")
    model, tokenizer, sft = sft_warm_start(AdditionTask(seed=0, balanced=True), seed=0)
    model.save_pretrained(work)
    print(f"SFT: {sft['steps']} steps, {sft['seconds']:.0f} s", flush=True)
    runs = {}
    for name, spec in RUNS.items():
        task = AdditionTask(seed=0, balanced=True)  # 每次运行重新建任务：抽到的提示词相同
        result = run_grpo(
            Qwen2ForCausalLM.from_pretrained(work),
            tokenizer,
            task,
            grpo_config(steps=STEPS, learning_rate=spec["learning_rate"]),
            peft_config=lora_config(**{**LORA, **{k: spec[k] for k in LORA if k in spec}}) if spec["lora"] else None,
            seed=0,
        )
        result.pop("model")
        runs[name] = result
        print(
            f"{name}: {result['trainable']:,}/{result['total']:,} trainable, "
            f"{result['accuracy_before']:.3f} -> {result['accuracy_after']:.3f}, {result['seconds']:.0f} s",
            flush=True,
        )
    payload = {
        "generated_by": "scripts/run_lora.py",
        "config": config(),
        "code_hash": code_hash(),
        "sft": sft,
        "runs": runs,
        "cpu_seconds": time.process_time() - cpu0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    CACHE.write_text(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)}; CPU {payload['cpu_seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
