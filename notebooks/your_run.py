# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["colab-badge"]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rlhf-toy/rlhf-toy/blob/main/docs/notebooks/your_run.ipynb)

# %% [markdown]
# # 第 13 章：对话模板与 LoRA
#
# 在第 9、10 章的加法题上训练一个字节级 BPE 分词器，给它一段 ChatML 格式的对话模板；把题目写成对话、渲染、
# 看损失掩码覆盖哪些 token；再用 peft 给第 10 章的极小 `Qwen2ForCausalLM` 装上 LoRA，数参数、关掉适配器、合并适配器。
# 然后读缓存（`scripts/run_lora.py`）画出全参数与 LoRA 三次 GRPO 运行的奖励曲线；最后从目录载入模型与分词器，
# 用 TRL 的 `GRPOTrainer` 只训练 LoRA 两步。全部在 CPU 上运行，十几秒。

# %%
# 在 Colab 里安装 rlhf_toy；本地已经安装时什么也不做。
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("rlhf_toy") is None:
    source = os.environ.get("RLHF_TOY_SOURCE", "git+https://github.com/rlhf-toy/rlhf-toy")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)
    importlib.invalidate_caches()
if importlib.util.find_spec("trl") is None or importlib.util.find_spec("peft") is None:  # 本章按 TRL 1.16.0、peft 0.21.2 写
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "trl==1.16.0", "peft==0.21.2"], check=True)
    importlib.invalidate_caches()

# 导入 rlhf_toy 时，它在任何张量计算之前固定 CPU 指令集与线程数（见 rlhf_toy.numerics），所以这一格要最先运行。
# 在 x86-64 上，打印的数字与网页逐位相同；在 ARM 笔记本或换了 torch 版本（例如 Colab 自带的）时可能不同。
# %%
import json
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="IProgress not found")
# transformers 5.24 警告自己内部的一个改名（`is_gradient_checkpointing`），与本章的代码无关
warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing", category=FutureWarning)

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from peft import get_peft_model  # noqa: E402

import rlhf_toy  # noqa: E402, F401
from rlhf_toy.integrations.chat import (  # noqa: E402
    conversation,
    prompt_completion_ids,
    train_chat_tokenizer,
    worked_answer,
)
from rlhf_toy.integrations.lora import count_parameters, lora_config  # noqa: E402
from rlhf_toy.integrations.trl import make_model  # noqa: E402
from rlhf_toy.tasks.addition import AdditionTask  # noqa: E402
from rlhf_toy.tasks.answers import parse_answer  # noqa: E402

torch.set_num_threads(1)

# %% [markdown]
# ## 分词器与对话模板
#
# 在 2000 道训练题渲染好的对话上训练字节级 BPE（词表 400），再渲染一道题：末尾的 `<|im_start|>assistant` 加换行是生成提示。

# %%
tokenizer = train_chat_tokenizer(AdditionTask(seed=0, balanced=True).train[:2000])
prompt = tokenizer.apply_chat_template(conversation(23, 58), add_generation_prompt=True, tokenize=False)
print(prompt)
print(tokenizer.tokenize("What is 23 + 58?"))

# %% [markdown]
# ## 损失掩码
#
# 一段以助手回答结尾的对话：灰色是提示词（含全部模板 token 与生成提示），橙色是计入损失的回答与回合结束符。

# %%
ids, mask = prompt_completion_ids(tokenizer, conversation(23, 58, worked_answer(23, 58)))
tokens = [t.replace("Ġ", "␣").replace("Ċ", "⏎") for t in tokenizer.convert_ids_to_tokens(ids)]
fig, ax = plt.subplots(figsize=(10, 1.6))
ax.bar(range(len(ids)), [1] * len(ids), color=["C1" if m else "lightgray" for m in mask])
ax.set_xticks(range(len(ids)), tokens, rotation=90, fontsize=7)
ax.set_yticks([])
ax.set_title(f"{len(ids)} tokens, {sum(mask)} in the loss mask (orange)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 从自由文本里取答案

# %%
for text in (r"The answer is \boxed{81}.", r"\boxed{80}? No: \boxed{81}", r"\boxed{8", "Answer: 81", "23 + 58 = ?"):
    print(f"{text!r:32} → {parse_answer(text)}")

# %% [markdown]
# ## LoRA：参数、参考模型、合并
#
# r = 8、α = 16，七个线性层。给 B 随机的权重（假装训练过），然后比较：关掉适配器 vs 原模型，合并前后。

# %%
full, _ = count_parameters(make_model(seed=0))
model = get_peft_model(make_model(seed=0), lora_config())
trainable, total = count_parameters(model)
print(f"全参数 {full:,}；LoRA 训练 {trainable:,}（{trainable / full:.1%}）")
with torch.no_grad():
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.normal_(0, 0.1, generator=torch.Generator().manual_seed(1))
model.eval()
ids = torch.tensor([[1, 5, 6, 13, 8, 11, 14]])
with torch.no_grad():
    adapted = model(input_ids=ids).logits
    with model.disable_adapter():
        ref = model(input_ids=ids).logits
    base = make_model(seed=0)(input_ids=ids).logits
    merged = model.merge_and_unload()(input_ids=ids).logits
print(f"关掉适配器 vs 原模型：{(ref - base).abs().max().item():.1e}")
print(f"合并前后：{(merged - adapted).abs().max().item():.1e}")

# %% [markdown]
# ## 全参数与 LoRA：同样 100 步的 GRPO
#
# 读 `scripts/run_lora.py` 写的缓存：同一个 SFT 热启动之后，全参数（学习率 5e-4）、LoRA（5e-4）、LoRA（5e-3）。
# 一个种子的结果，曲线是 10 步滑动平均。

# %%
cache_path = Path("docs/data/lora.json")
if cache_path.exists():
    cache = json.loads(cache_path.read_text(encoding="utf-8"))
    fig, ax = plt.subplots(figsize=(6, 3.4))
    labels = {"full": "full fine-tuning, lr 5e-4", "lora": "LoRA r=8, lr 5e-4", "lora_lr10": "LoRA r=8, lr 5e-3"}
    for key, label in labels.items():
        run = cache["runs"][key]
        rewards = torch.tensor(run["rewards"])
        smooth = torch.nn.functional.avg_pool1d(rewards[None, None], 10, stride=1)[0, 0]
        ax.plot(range(10, len(rewards) + 1), smooth, label=f"{label}: held-out {run['accuracy_after']:.3f}")
    ax.set(xlabel="step", ylabel="mean reward (10-step moving average)", title="TRL GRPOTrainer: full vs LoRA")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()
else:
    print("没有找到 docs/data/lora.json（在 Colab 里请克隆仓库后再读，或自己运行 scripts/run_lora.py）")

# %% [markdown]
# ## 把它们放在一起：从目录载入，用 TRL 训练两步
#
# 本书不下载模型：先把一个极小模型与本章的分词器存进目录，再用 `from_pretrained(path)` 载入，
# 组装 `GRPOTrainer`（对话格式的数据集、`chat_reward`、LoRA）。这一屏只适合演示：
# 真实运行从第 6 章“动手前的清单”里的起步配置写自己的 `GRPOConfig`，奖励与数据集换成你的任务。

# %%
import tempfile  # noqa: E402

from rlhf_toy.integrations.pretrained import build_grpo_trainer, save_tiny_checkpoint  # noqa: E402

task = AdditionTask(seed=0, balanced=True)
problems = task.train[:2]  # P = 2 道题
path = save_tiny_checkpoint(tempfile.mkdtemp(), task, problems)  # 代替你的模型：一个存好的目录
# beta=0.04 只为让日志里出现 kl（β = 0 时 TRL 不记录它）；你自己的运行起步取默认的 0
trainer = build_grpo_trainer(path, problems, num_generations=4, max_steps=2, beta=0.04)
tokenizer = trainer.processing_class
print(f"载入的分词器：{type(tokenizer).__name__}，有对话模板：{tokenizer.chat_template is not None}，EOS = {tokenizer.eos_token}")
trainable, total = count_parameters(trainer.model)
only_lora = all("lora_" in name for name, p in trainer.model.named_parameters() if p.requires_grad)
print(f"要训练 {trainable:,} 个参数（共 {total:,} 个），全是 LoRA 的：{only_lora}")
before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
trainer.train()
for log in trainer.state.log_history[:-1]:  # 最后一条是整次训练的汇总
    print(f"第 {log['step']} 步：reward {log['reward']:.3f}，reward_std {log['reward_std']:.3f}，"
          f"frac_reward_zero_std {log['frac_reward_zero_std']:.1f}，kl > 0：{log['kl'] > 0}")
    print(f"  clip_ratio/region_mean {log['clip_ratio/region_mean']:.1f}，"
          f"completions/mean_length {log['completions/mean_length']:.3f}，"
          f"completions/clipped_ratio {log['completions/clipped_ratio']:.3f}")
changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[name])]
print(f"变了的参数张量 {len(changed)} 个，全是 LoRA 的 A、B：{all('lora_' in name for name in changed)}")

# %% [markdown]
# ## 动手写：对话里回答的掩码
#
# 把下面的 `raise NotImplementedError` 换成你的实现，再运行下一格。`check_chat_completion_mask` 用几段手搭的编号检查它
# （左填充、两轮对话、被超长截停），第一处不一致时说出是哪个输入、期望什么、得到了什么，以及常见的原因。

# %%
from rlhf_toy.exercises import check_chat_completion_mask, check_lora_trainable_parameters  # noqa: E402


def my_chat_completion_mask(input_ids, header_ids, eos_id):
    raise NotImplementedError  # 换成你的实现：返回 list[int]


# %%
result = check_chat_completion_mask(my_chat_completion_mask)

# %% [markdown]
# ## 动手写：LoRA 要训练多少个参数
#
# `shapes` 是各目标线性层权重的形状 `(d_out, d_in)`，`r` 是秩。


# %%
def my_lora_trainable_parameters(shapes, r):
    raise NotImplementedError  # 换成你的实现：返回 int


# %%
result = check_lora_trainable_parameters(my_lora_trainable_parameters)
