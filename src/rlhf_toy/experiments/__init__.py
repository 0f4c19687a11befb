"""第 8 章的实验：同台对比（`compare`）、奖励过优化（`overoptimisation`）、健康与异常的训练（`health`）。"""
