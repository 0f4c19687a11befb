"""与外部库的接口：只在装了对应的库时导入（`import rlhf_toy` 不导入这里的任何模块）。

* `rlhf_toy.integrations.trl`：把第 9 章的加法任务交给 TRL 的 `SFTTrainer`、`GRPOTrainer`、`DPOTrainer`（第 10 章）。
* `rlhf_toy.integrations.chat`：在任务文本上训练的字节级 BPE 分词器与 ChatML 对话模板，对话格式的数据集与奖励（第 13 章）。
* `rlhf_toy.integrations.lora`：peft 的 `LoraConfig` 交给 TRL 的 `GRPOTrainer`，数参数、全参数与 LoRA 的对比运行（第 13 章）。
* `rlhf_toy.integrations.pretrained`：把模型与分词器存进目录，再 `from_pretrained` 载入，组装只训练 LoRA 的 `GRPOTrainer`（第 13 章）。
"""
