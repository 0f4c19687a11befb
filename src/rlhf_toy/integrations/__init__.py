"""与外部库的接口：只在装了对应的库时导入（`import rlhf_toy` 不导入这里的任何模块）。

* `rlhf_toy.integrations.trl`：把第 9 章的加法任务交给 TRL 的 `SFTTrainer`、`GRPOTrainer`、`DPOTrainer`（第 10 章）。
"""
