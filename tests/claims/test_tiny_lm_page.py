"""docs/tiny-lm.md: what the page says about TRL's GRPOTrainer, checked against the pinned TRL."""

from __future__ import annotations

import inspect

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from .pinned import (
    assert_refuses_cpu_only_machine_without_use_cpu,
    config,
    default_config,
    source,
    trainer_mixed_precision,
)


def test_chapter_config_is_trl_default():
    # tiny-lm.md: “beta=0、loss_type="dapo" 是 TRL 的默认…加上 DAPO 的 epsilon_high=0.28…num_iterations=1”,
    # “采样温度 1.0（TRL 默认）”; max_completion_length is TRL's name for L.
    from rlhf_toy.demos.tiny_lm import grpo_config, warm_start
    from rlhf_toy.tasks.addition import AdditionTask

    args = default_config(GRPOConfig)
    assert (args.beta, args.loss_type) == (0.0, "dapo")
    assert args.max_completion_length == 512
    c = grpo_config()
    assert (c.beta, c.loss_type, c.epsilon_high, c.num_iterations) == (0.0, "dapo", 0.28, 1)
    # the chapter's policy samples at temperature 1.0, TRL's default: warm_start builds it with make_policy() and no
    # temperature argument, whose default is 1.0.
    assert args.temperature == 1.0
    assert "policy = task.make_policy()" in source(warm_start)
    assert AdditionTask(seed=0).make_policy().temperature == 1.0


def test_epsilon_high_does_not_act_with_one_update_per_batch():
    # tiny-lm.md, under the chapter's config: “本章每批只更新一次（num_iterations=1），比率恒为 1，截断不起作用。
    # 所以配置里 DAPO 的 epsilon_high=0.28 … 在本章也不起作用，去掉它，本章的结果一位不变”.
    # grpo_loss with old_logps=None uses logps.detach(): the ratio is exactly 1, inside [1 - 0.2, 1 + 0.28] and
    # [1 - 0.2, 1 + 0.2] alike. Three steps from one random start, with and without epsilon_high, bit for bit.
    from rlhf_toy.demos.tiny_lm import grpo_config
    from rlhf_toy.tasks.addition import AdditionTask
    from rlhf_toy.train.grpo import train_grpo

    def run(**overrides):
        torch.manual_seed(0)
        task = AdditionTask(seed=0, balanced=True)
        policy = task.make_policy()
        config = grpo_config(True, steps=3, max_completion_length=task.max_completion_length, **overrides)
        history = train_grpo(policy, task, config)
        return policy.state_dict(), history

    (with_high, h1), (without, h2) = run(), run(epsilon_high=None)
    assert grpo_config().epsilon_high == 0.28
    assert h1 == h2 and all(r["clip_ratio"] == 0 for r in h1)
    assert all(torch.equal(with_high[k], without[k]) for k in with_high)


def test_grpo_trainer_lives_in_trl_trainer_grpo_trainer():
    # tiny-lm.md, heading of the mapping table: “TRL GRPOTrainer（trl/trainer/grpo_trainer.py）”.
    assert inspect.getsourcefile(GRPOTrainer).endswith("trl/trainer/grpo_trainer.py")


def test_trl_log_probs_divide_the_logits_by_the_temperature():
    # tiny-lm.md: “TRL 算对数概率前，也先把 logits 除以同一个 τ”. In TRL 1.16 this is the fused LM head that
    # GRPOTrainer installs with temperature=args.temperature (not a line in _get_per_token_logps_and_entropies).
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=16,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=8,
        )
    )
    input_ids = torch.randint(0, 16, (2, 6))
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits[:, :-1]
        add_fused_lm_head(model, temperature=0.7)
        fused = model(input_ids=input_ids, labels=input_ids, fused_lm_head=True)
    expected = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, input_ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(fused.log_probs, expected, atol=1e-5, rtol=1e-5)


def test_entropy_is_logged_and_kl_only_with_beta():
    # tiny-lm.md: “TRL 日志里的 entropy” and “beta=0 时 TRL 不记录 kl”.
    text = source(GRPOTrainer._compute_loss)
    assert 'self._metrics[mode]["entropy"].append(global_masked_mean(entropies))' in text
    assert 'if self.beta != 0.0: self._metrics[mode]["kl"]' in text


def test_mapping_table_names_exist():
    # tiny-lm.md, the mapping table: RepeatSampler lives in trl/trainer/utils.py; the GRPOTrainer methods it names exist.
    import trl.trainer.utils as trl_utils

    assert inspect.getsourcefile(trl_utils.RepeatSampler).endswith("trl/trainer/utils.py")
    for name in (
        "_prepare_inputs",
        "_generate_and_score_completions",
        "_calculate_rewards",
        "_get_per_token_logps_and_entropies",
        "_compute_loss",
    ):
        assert callable(getattr(GRPOTrainer, name)), name
    # also 与论文 / TRL 的差异: “TRL 把提示词与回答拼好、每行各算一遍（同本章的 concat_logps）”:
    # trl/trainer/grpo_trainer.py:3024-3025 (TRL 1.16.0) concatenates prompt_ids and completion_ids and their masks.
    assert "attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)" in source(GRPOTrainer._compute_loss)
    # the record row: TRL logs the batch reward and the mean completion length under these names.
    text = source(GRPOTrainer)
    assert 'self._metrics[mode]["reward"]' in text
    assert '"completions/mean_length"' in text


def test_trl_finds_the_first_eos_with_argmax_and_our_cumsum_mask_agrees():
    # tiny-lm.md shows the completion_mask docstring: “与 TRL 1.16.0 GRPOTrainer._generate_single_turn 的结果相同：
    # TRL 用 is_eos.int().argmax(1) 找第一个 EOS 的位置 eos_idx（没有 EOS 的行取 T），mask = (idx <= eos_idx)；
    # 这里用 cumsum 得到同样的掩码”; exercises/tiny_lm.py's not_eos message says the same.
    from rlhf_toy.policies.transformer import completion_mask

    text = source(GRPOTrainer._generate_single_turn)
    assert "eos_idx = torch.full((is_eos.size(0),), is_eos.size(1)," in text
    assert "eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]" in text
    assert "completion_mask = (sequence_indices <= eos_idx.unsqueeze(1)).int()" in text
    assert "cumsum" not in text

    # TRL's lines, run on rows with no EOS, one EOS, two EOS, EOS first and EOS followed by non-pad tokens.
    completions = torch.tensor([[5, 6, 7, 8], [5, 2, 0, 0], [2, 5, 2, 6], [5, 6, 2, 2], [5, 2, 7, 8]])
    is_eos = torch.isin(completions, torch.tensor([2]))
    eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    sequence_indices = torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1)
    trl_mask = (sequence_indices <= eos_idx.unsqueeze(1)).int()
    assert torch.equal(completion_mask(completions, eos_id=2), trl_mask.float())


def test_training_log_probs_come_from_the_fused_head_with_masked_labels():
    # tiny-lm.md, table row for policy.logps: “它调 model(..., labels=labels, fused_lm_head=True) … PR #7077 之前是先
    # logits /= temperature 再 selective_log_softmax”: at 1.16 the labels are -100 outside the attention mask and the
    # prompt, and grpo_trainer.py no longer calls selective_log_softmax.
    text = source(GRPOTrainer._get_per_token_logps_and_entropies)
    assert "labels = input_ids_batch.masked_fill(attention_mask_batch == 0, -100)" in text
    assert "labels[:, :-logits_to_keep] = -100" in text
    assert "outputs = model(**model_inputs, labels=labels, fused_lm_head=True)" in text
    assert "selective_log_softmax" not in inspect.getsource(inspect.getmodule(GRPOTrainer))


def test_training_forward_passes_no_position_ids():
    # tiny-lm.md: “TRL 1.16 训练时的前向只传 input_ids 与 attention_mask、不传 position_ids，模型（例如 Qwen2）于是从 0 数起”;
    # HF generate derives them from the mask (“position_ids = attention_mask.cumsum(-1) - 1”).
    import transformers.generation.utils as generation_utils
    import transformers.models.qwen2.modeling_qwen2 as qwen2

    text = source(GRPOTrainer._get_per_token_logps_and_entropies)
    assert 'model_inputs = {"input_ids": input_ids_batch, "attention_mask": attention_mask_batch}' in text
    assert '"position_ids"' not in text
    assert (
        "position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens"
        in source(qwen2.Qwen2Model.forward)
    )
    assert "position_ids = attention_mask.long().cumsum(-1) - 1" in inspect.getsource(generation_utils)


def test_fused_head_returns_zero_outside_the_mask():
    # tiny-lm.md: “TRL 1.16 的融合输出层在标签为 −100 的位置（掩码外，包括 EOS 之后）也返回 0”.
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=16,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=8,
        )
    )
    input_ids = torch.randint(0, 16, (2, 6))
    labels = input_ids.clone()
    labels[0, 4:] = -100  # “EOS 之后”的填充
    add_fused_lm_head(model, temperature=1.0)
    with torch.no_grad():
        fused = model(input_ids=input_ids, labels=labels, fused_lm_head=True)
    assert torch.equal(fused.log_probs[0, 3:], torch.zeros(2))  # 标签 −100 的位置（右移一位后）恰为 0
    assert (fused.log_probs[1] < 0).all()


def test_gpt2_counts_positions_from_0_and_opt_from_the_mask():
    # tiny-lm.md: “GPT-2 这类用绝对位置嵌入、前向又不从掩码推位置编号的模型 … OPT 自己从掩码算位置，不受影响”.
    from transformers.models.gpt2.modeling_gpt2 import GPT2Model
    from transformers.models.opt.modeling_opt import OPTLearnedPositionalEmbedding

    gpt2 = source(GPT2Model.forward)
    assert "if position_ids is None:" in gpt2
    assert "position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens" in gpt2
    assert "position_embeds = self.wpe(position_ids)" in gpt2
    assert "position_ids = torch.cumsum(attention_mask, dim=1)" in source(OPTLearnedPositionalEmbedding.forward)


def _first_token_logps_generate_vs_training_forward(model):
    """Greedy `generate` on a left-padded batch, then a TRL-style training forward (input_ids and attention_mask only,
    no position_ids) on the same padded sequences: the first generated token's log-probs from both."""
    from transformers import GenerationConfig

    input_ids = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7]])  # row 0 left-padded, row 1 not padded
    attention_mask = (input_ids != 0).long()
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        generation_config=GenerationConfig(
            max_new_tokens=3,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=0,
            eos_token_id=None,
        ),
    )
    generated = torch.log_softmax(out.scores[0], dim=-1)
    full_mask = torch.cat([attention_mask, torch.ones(2, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=out.sequences, attention_mask=full_mask).logits
    return generated, torch.log_softmax(logits[:, input_ids.shape[1] - 1], dim=-1)


def test_gpt2_generate_and_training_forward_disagree_on_left_padded_rows():
    # tiny-lm.md, 常见错误“左填充占了位置编号”: “即使训练与采样用的是同一批、同样多的左填充，也可能对不上：HF generate
    # 从掩码推位置编号，TRL 1.16 训练时的前向不传 position_ids，GPT-2 这类模型便从 0 数起”; OPT is not affected.
    # A 1-layer randomly initialised GPT-2 (and OPT) built from a config; the training forward is the one TRL 1.16 makes
    # (test_training_forward_passes_no_position_ids).
    from transformers import GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(
        GPT2Config(vocab_size=20, n_embd=16, n_layer=1, n_head=2, n_positions=32, pad_token_id=0, eos_token_id=1)
    ).eval()
    generated, trained = _first_token_logps_generate_vs_training_forward(gpt2)
    assert (generated[0] - trained[0]).abs().max() > 0.05  # the left-padded row: same padding, different log-probs
    torch.testing.assert_close(generated[1], trained[1], atol=1e-5, rtol=0)  # the row without padding agrees

    opt = OPTForCausalLM(
        OPTConfig(
            vocab_size=20,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            ffn_dim=32,
            max_position_embeddings=32,
            word_embed_proj_dim=16,
            pad_token_id=0,
            eos_token_id=1,
        )
    ).eval()
    generated, trained = _first_token_logps_generate_vs_training_forward(opt)
    torch.testing.assert_close(generated, trained, atol=1e-5, rtol=0)  # OPT derives positions from the mask itself

    # “用 vLLM 采样时提示词不填充，训练端却左填充”: TRL hands vLLM each prompt's own token ids, then left-pads for training.
    import trl.generation.vllm_generation as vllm_generation

    assert 'vllm_prompts = [{"prompt_token_ids": ids} for ids in all_prompts]' in source(vllm_generation)
    assert 'padding_side="left"' in source(GRPOTrainer._generate_and_score_completions)


def test_policy_and_reference_share_the_temperature_and_old_logps_come_from_the_trainer():
    # tiny-lm.md, 常见错误“logits 忘了除以温度”: “kl 却仍从 0 开始（当前策略与参考模型都在训练端…）”; “在 TRL 里旧策略的对数概率
    # 也来自训练端，w 仍是 1”; “开着 vLLM 重要性采样校正时，症状出现在 sampling/sampling_logp_difference/mean 与
    # sampling/importance_sampling_ratio/* 上”; TRL asks vLLM for log-probs after temperature (processed_logprobs).
    import trl.generation.vllm_generation as vllm_generation

    init = source(GRPOTrainer.__init__)
    assert (
        "add_fused_lm_head( self.model.get_base_model() if is_peft_model(self.model) else self.model, temperature=self.temperature,"
        in init
    )
    assert "add_fused_lm_head( self.ref_model, temperature=self.temperature" in init
    loss = source(GRPOTrainer._compute_loss)
    assert (
        "old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps" in loss
    )
    assert "torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1" in loss
    score = source(GRPOTrainer._generate_and_score_completions)
    assert "per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask" in score
    assert "delta = torch.abs(old_per_token_logps - sampling_per_token_logps)" in score
    assert '"sampling/sampling_logp_difference/mean"' in score
    for name in ("min", "mean", "max"):
        assert f'"sampling/importance_sampling_ratio/{name}"' in score
    assert 'logprobs_mode="processed_logprobs"' in inspect.getsource(vllm_generation)
    assert "which biases the importance" in init  # the warning for a vLLM server started with another logprobs mode


def test_trl_optimizer_defaults_differ_from_the_chapter_loop():
    # tiny-lm.md, 框“优化器”: “本章用 Adam、学习率不变、不限梯度范数；TRL 1.16 沿用 transformers TrainingArguments 的默认：
    # 学习率线性衰减到 0（lr_scheduler_type="linear"）、梯度全局范数限制在 1.0（max_grad_norm=1.0），AdamW 的权重衰减为 0”.
    from rlhf_toy.train.grpo import train_grpo

    args = default_config(GRPOConfig)
    assert args.lr_scheduler_type == "linear"
    assert args.max_grad_norm == 1.0
    assert args.optim.startswith("adamw") and args.weight_decay == 0.0
    text = source(train_grpo)
    assert "optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)" in text
    assert "clip_grad" not in text and "scheduler" not in text


def test_grpo_config_turns_on_bf16_and_gradient_checkpointing():
    # tiny-lm.md, 框“优化器”: “TRL 的 GRPOConfig 还改了两个默认：bf16=True（use_cpu=True 时按 bf16 自动混合精度跑），
    # gradient_checkpointing 默认设为 True；本章全程 float32”.
    from rlhf_toy.tasks.addition import AdditionTask

    args = config(GRPOConfig)
    assert args.bf16 is True and args.gradient_checkpointing is True
    assert trainer_mixed_precision(args) == "bf16"
    policy = AdditionTask(seed=0).make_policy()
    assert {p.dtype for p in policy.parameters()} == {torch.float32}  # the chapter's model stays float32


def test_grpo_default_config_refuses_a_cpu_only_machine_without_use_cpu():
    # tiny-lm.md, 框“优化器与精度”: “只有 CPU 的机器上，默认配置不设 use_cpu=True 就报错；设了之后按 bf16 自动混合精度跑”.
    assert_refuses_cpu_only_machine_without_use_cpu(GRPOConfig)


def test_length_figure_grpo_wrong_answers_stay_longer_than_dapo():
    # tiny-lm.md, under the length figure (drawn from docs/data/tiny_lm_figures.json): “三个种子里，grpo 答错回答的平均长度
    # 在第 5 到 40 步的每一步都比 dapo 长。三个种子的平均差从第 10 步到第 40 步大致不变；单看种子 1，差距到第 40 步缩小了
    # 一半多，与它自己的 dr_grpo–dapo 之差相当。dr_grpo 与 dapo 的平均线几乎重合”.
    import json

    from .pinned import DOCS

    runs = json.loads((DOCS / "data" / "tiny_lm_figures.json").read_text(encoding="utf-8"))["length_lesson"]
    assert sorted(runs) == ["0", "1", "2"]

    def gaps(seed, loss_type):
        rows, dapo = runs[seed][loss_type], runs[seed]["dapo"]
        assert [r["step"] for r in rows] == [r["step"] for r in dapo] == list(range(0, 45, 5))
        return [r["length_wrong"] - d["length_wrong"] for r, d in zip(rows[1:], dapo[1:], strict=True)]

    grpo = {seed: gaps(seed, "grpo") for seed in runs}
    assert all(g > 0 for seed in grpo.values() for g in seed)  # every seed, every step 5..40
    mean = [sum(col) / len(col) for col in zip(*grpo.values(), strict=True)]
    assert max(mean[1:]) - min(mean[1:]) < 0.05  # steps 10..40: roughly flat
    seed1, dr_seed1 = grpo["1"], gaps("1", "dr_grpo")
    assert seed1[-1] < max(seed1) / 2  # seed 1 shrinks by more than half by step 40 ...
    assert abs(seed1[-1] - dr_seed1[-1]) < 0.05  # ... to about its own dr_grpo - dapo difference
    dr_grpo = [gaps(seed, "dr_grpo") for seed in runs]
    dr_mean = [abs(sum(col) / len(col)) for col in zip(*dr_grpo, strict=True)]  # the figure draws the mean line
    assert max(dr_mean) < 0.1 < min(mean)
    assert all(
        "length_correct" not in r for seed in runs.values() for rows in seed.values() for r in rows
    )  # “缓存里没有记”


def test_seconds_figure_seeds_0_and_2_start_at_the_same_accuracy():
    # tiny-lm.md, under the CPU-seconds figure: “种子 0 与种子 2 的热启动停在同样的正确率，种子 1 的起点低一截”.
    import json

    from .pinned import DOCS

    curves = json.loads((DOCS / "data" / "tiny_lm_figures.json").read_text(encoding="utf-8"))["grpo_cpu_seconds"]
    start = {seed: rows[0]["accuracy"] for seed, rows in curves.items()}
    assert start["0"] == start["2"] > start["1"] + 0.1


def test_length_lesson_notebook_output_grpo_lengthens_correct_answers_too():
    # tiny-lm.md, 长度一课 (seed 0, from the notebook's stored output): “notebook 还打印了答对回答的长度：grpo 下它们也比
    # dapo 长 0.06 到 0.29 个 token，dr_grpo 与 dapo 之差都不到 0.1”; the wrong-answer differences (0.23 to 0.37) are the
    # ones the page prints from docs/data/tiny_lm_figures.json, so the notebook and the cache are the same run.
    import json

    from .pinned import DOCS

    notebook = json.loads((DOCS / "notebooks" / "tiny_lm.ipynb").read_text(encoding="utf-8"))
    text = next(
        "".join(o["text"])
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
        for o in cell.get("outputs", [])
        if "答对回答的平均长度之差" in "".join(o.get("text", ""))
    )
    lines = text.splitlines()
    rows = {}
    for key in ("答错", "答对"):
        i = next(n for n, line in enumerate(lines) if line.startswith(f"{key}回答的平均长度之差"))
        for line in lines[i + 1 : i + 3]:
            name, values = line.split("：")
            rows[key, name.strip()] = [float(v) for v in values.split()][1:]  # steps 5..40
    assert (min(rows["答错", "grpo"]), max(rows["答错", "grpo"])) == (0.23, 0.37)
    assert (min(rows["答对", "grpo"]), max(rows["答对", "grpo"])) == (0.06, 0.29)
    assert all(abs(v) < 0.1 for key in ("答错", "答对") for v in rows[key, "dr_grpo"])


def test_length_lesson_seeds_start_far_apart():
    # tiny-lm.md, 长度一课: “三个种子的起点因此差别很大（种子 1 第 0 步的留出集正确率远高于另外两个）”.
    import json

    from .pinned import DOCS

    runs = json.loads((DOCS / "data" / "tiny_lm_figures.json").read_text(encoding="utf-8"))["length_lesson"]
    start = {seed: runs[seed]["dapo"][0]["accuracy"] for seed in runs}
    assert start["1"] > 10 * max(start["0"], start["2"])


def test_length_table_truncation_and_wrong_answer_lengths():
    # tiny-lm.md, 长度一课, under the seed-0 table read from docs/data/tiny_lm_figures.json: “三种方式下被超长截停的比例
    # 从第 15 步起都在 0.01 上下”; “从第 5 步到第 40 步，grpo 下答错的回答每一步都比 dapo 长……dr_grpo 与 dapo 之差小得多”;
    # “三种方式下，答错的回答都从 8.50 个 token 缩到 4 个多”.
    import json

    from .pinned import DOCS

    runs = json.loads((DOCS / "data" / "tiny_lm_figures.json").read_text(encoding="utf-8"))["length_lesson"]["0"]
    assert all(r["truncated"] < 0.015 for rows in runs.values() for r in rows if r["step"] >= 15)
    grpo = [r["length_wrong"] - d["length_wrong"] for r, d in zip(runs["grpo"][1:], runs["dapo"][1:], strict=True)]
    dr = [r["length_wrong"] - d["length_wrong"] for r, d in zip(runs["dr_grpo"][1:], runs["dapo"][1:], strict=True)]
    assert min(grpo) > 0 and max(abs(x) for x in dr) < min(grpo) / 2
    assert all(round(rows[0]["length_wrong"], 2) == 8.50 and 4 < rows[-1]["length_wrong"] < 5 for rows in runs.values())


def test_ramble0_control_supports_the_page():
    # tiny-lm.md, 长度一课, 对照 (ramble=0, printed from docs/data/tiny_lm_ramble0.json): the cache comes from this code;
    # “热启动之后答错的回答只比答对的长 0.31 个 token，被超长截停的几乎没有”; “grpo 与 dapo 之差……和 dr_grpo 与 dapo
    # 之差一样大，都在随机波动的尺度之内”; “三种方式下答错的回答都从 5.89 个 token 变长到 6.6 以上”;
    # the code section: “热启动之后，错误回答只比正确回答略长……三种汇总方式下的回答长度分不出差别”;
    # the fold: “那里三种方式下答错的回答都在变长”. Contrast: with ramble=0.2 grpo - dapo stays above +0.2 (the table above).
    import json

    from _scripts import load_script

    from .pinned import DOCS

    module = load_script("run_tiny_lm_ramble0")
    cache = json.loads((DOCS / "data" / "tiny_lm_ramble0.json").read_text(encoding="utf-8"))
    assert cache["code_hash"] == module.code_hash(), "code changed: rerun scripts/run_tiny_lm_ramble0.py"
    assert (cache["seed"], cache["ramble"]) == (0, 0.0)
    assert 40 <= cache["cpu_seconds"] < 90  # “要一分钟左右 CPU 时间”
    runs = cache["runs"]
    start = runs["dapo"][0]
    assert round(start["length_wrong"] - start["length_correct"], 2) == 0.31
    assert all(r["truncated"] < 0.015 for rows in runs.values() for r in rows)
    gaps = {
        k: [r["length_wrong"] - d["length_wrong"] for r, d in zip(runs[k][1:], runs["dapo"][1:], strict=True)]
        for k in ("grpo", "dr_grpo")
    }
    assert max(abs(g) for g in gaps["grpo"]) < 0.15 and max(abs(g) for g in gaps["dr_grpo"]) < 0.15
    assert max(abs(g) for g in gaps["grpo"]) < 1.5 * max(abs(g) for g in gaps["dr_grpo"])  # same scale
    assert all(round(rows[0]["length_wrong"], 2) == 5.89 and rows[-1]["length_wrong"] > 6.6 for rows in runs.values())
    with_habit = json.loads((DOCS / "data" / "tiny_lm_figures.json").read_text(encoding="utf-8"))["length_lesson"]["0"]
    habit_gaps = [
        r["length_wrong"] - d["length_wrong"]
        for r, d in zip(with_habit["grpo"][1:], with_habit["dapo"][1:], strict=True)
    ]
    assert min(habit_gaps) > 0.2 > max(abs(g) for g in gaps["grpo"])


def test_dpo_and_ppo_cache_supports_the_page():
    # tiny-lm.md, 运行结果 “DPO 与 PPO”, under the block that prints docs/data/tiny_lm_runs.json: “两组 DPO 都把偏好对分开了
    # （rewards/accuracies 都在 0.95 以上），留出集正确率却都下降了。学习率大、β 小的第一组降得最多，rewards/chosen 是负数……
    # 第二组离参考模型近得多，rewards/chosen 只是略为负……PPO……40 步之后留出集正确率上升。它的价值模型……
    # （val/explained_variance 接近 0）”; and 常见错误: “那一组里多数偏好对的被选回答概率都降了，偏好对提示词上的贪心正确率
    # 也大幅下降。留出集正确率同样下降” and “留出集正确率却大幅下降”.
    import json

    from .pinned import DOCS

    runs = json.loads((DOCS / "data" / "tiny_lm_runs.json").read_text(encoding="utf-8"))
    dpo, ppo = runs["dpo"], runs["ppo"]
    first, second = dpo["runs"]
    assert (first["learning_rate"], first["beta"]) == (5e-4, 0.1) and (second["learning_rate"], second["beta"]) == (
        1e-4,
        0.5,
    )
    assert all(r["rewards/accuracies"] > 0.95 and r["accuracy"] < dpo["accuracy_before"] for r in dpo["runs"])
    assert first["accuracy"] < second["accuracy"] and first["accuracy"] < dpo["accuracy_before"] / 2
    assert first["rewards/chosen"] < 0 and -0.1 < second["rewards/chosen"] < 0
    assert first["chosen_fell"] > 0.5 and first["pair_accuracy"] < dpo["pair_accuracy_before"] / 2
    assert ppo["steps"] == dpo["steps"] == 40 and ppo["after"]["accuracy"] > ppo["accuracy_before"]
    assert abs(ppo["explained_variance"]) < 0.1


def test_uniform_sampling_box_supports_the_page():
    # tiny-lm.md, folded box “深入：均匀抽题与均衡抽题的对照”, from docs/data/tiny_lm_runs.json: “均匀抽题的热启动之后，1+2、2+1
    # 里 8 个回答全错的题不到一半，比例却比 2+2 高得多”; “再跑 100 步 GRPO，2+2 答错的题大幅减少；1+2、2+1 答错的题只少了
    # 几道，仍有六成以上答错。全错的题也只少了几道”.
    import json

    from .pinned import DOCS

    uniform = json.loads((DOCS / "data" / "tiny_lm_runs.json").read_text(encoding="utf-8"))["uniform"]
    sft, grpo = uniform["sft"]["errors"], uniform["grpo"]["errors"]
    assert uniform["steps"] == 100

    def frac(table, shape, key):
        return table[shape][key] / table[shape]["problems"]

    rare = ("1+2", "2+1")
    assert all(
        frac(sft, s, "all_wrong") < 0.5 and frac(sft, s, "all_wrong") > 3 * frac(sft, "2+2", "all_wrong") for s in rare
    )
    assert grpo["2+2"]["wrong"] < sft["2+2"]["wrong"] / 2
    assert all(0 <= sft[s]["wrong"] - grpo[s]["wrong"] <= 9 and frac(grpo, s, "wrong") > 0.6 for s in rare)
    assert all(0 <= sft[s]["all_wrong"] - grpo[s]["all_wrong"] <= 5 for s in rare)


def test_default_config_reuses_the_current_log_probs_so_the_ratio_is_exactly_one():
    # tiny-lm.md, 框“优化器与精度”: “TRL 默认配置下不另算旧策略的对数概率，直接用 per_token_logps.detach()，
    # 所以比率的值恰为 1，bf16 下也一样”; “另算旧策略时（一批样本更新多次、生成与梯度累积不对齐、vLLM 校正），
    # 两次前向的对数概率只在 bf16 舍入的精度内相同”.
    # TRL 1.16.0 trl/trainer/grpo_trainer.py:2642-2657 (old-logp forward only if gradient_accumulation_steps %
    # (steps_per_generation × num_iterations) != 0 or vLLM IS correction), :3065-3066 (detach), :3083-3095 (coef_1).
    args = default_config(GRPOConfig)
    generate_every = args.steps_per_generation * args.num_iterations
    assert args.gradient_accumulation_steps % generate_every == 0  # no second forward under the defaults
    assert args.use_vllm is False
    text = source(GRPOTrainer)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in text
    assert (
        "if self.args.gradient_accumulation_steps % generate_every != 0 or ( self.use_vllm and "
        "self.vllm_importance_sampling_correction ):" in text
    )
    loss = source(GRPOTrainer._compute_loss)
    assert (
        "old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps" in loss
    )
    assert "log_ratio = per_token_logps - old_per_token_logps" in loss
    assert "coef_1 = torch.exp(log_importance_weights)" in loss
    # exp(x − x.detach()) is exactly 1 in bf16, whatever the values
    x = torch.randn(4, 7).to(torch.bfloat16).requires_grad_()
    w = torch.exp(x - x.detach())
    assert w.dtype == torch.bfloat16 and bool((w == 1).all())


def test_reward_functions_get_prompt_completions_and_the_other_columns():
    # tiny-lm.md, “换成 TRL 与你的模型”: “提示词放在 prompt 列”; “TRL 用关键字参数调用奖励函数：传入 prompts、completions、
    # completion_ids，再加上数据集的其余各列。所以奖励函数要收 **kwargs；它返回一个浮点数列表，每条回答一个数”.
    # TRL 1.16.0 trl/trainer/grpo_trainer.py:2338 (prompts from the "prompt" column), :1583-1598 (reward_kwargs: the
    # other columns plus trainer_state, log_extra, log_metric), :1625-1636 (the call; one reward per completion).
    assert 'prompts = [x["prompt"] for x in inputs]' in source(GRPOTrainer._generate_and_score_completions)
    rewards = source(GRPOTrainer._calculate_rewards)
    assert 'keys = [key for key in inputs[0] if key not in ["prompt", "completion", "completion_ids"]]' in rewards
    assert "reward_kwargs = {key: [example[key] for example in inputs] for key in keys}" in rewards
    assert 'reward_kwargs["trainer_state"] = self.state' in rewards  # extra keywords: the function needs **kwargs
    # “另有几个辅助参数：trainer_state（训练进度），log_extra 与 log_metric（记录额外的列与指标），配了环境时还有 environments”
    assert 'reward_kwargs["log_extra"] = self._log_completion_extra' in rewards
    assert 'reward_kwargs["log_metric"] = self._log_metric' in rewards
    assert 'if self.environments is not None: reward_kwargs["environments"] = self.environments' in rewards
    assert (
        "output_reward_func = reward_func( prompts=prompts, completions=completions, "
        "completion_ids=completion_ids_list, **reward_kwargs )" in rewards
    )
    assert "if len(output_reward_func) != len(prompts):" in rewards
    assert "torch.tensor(output_reward_func, dtype=torch.float32, device=device)" in rewards


def test_fused_head_computes_in_chunks_without_the_full_logits():
    # tiny-lm.md, under concat_logps: “TRL 用融合输出层（fused LM head，把输出层与 log-softmax 合成一步、分块计算）
    # 避开了它，不生成完整的 logits”; the fold: “TRL 的融合输出层也是这样：分块投影，反向时重算每一块”.
    # TRL 1.16.0 trl/trainer/utils.py:1555-1556 (add_fused_lm_head docstring), trl/kernels/chunked_logprob.py:299-307.
    from trl.kernels import ChunkedLogProbFunction

    doc = " ".join(add_fused_lm_head.__doc__.split())
    assert "without materializing the `(batch, seq_len, vocab)` logits" in doc
    kernel = " ".join(ChunkedLogProbFunction.__doc__.split())
    assert "without materializing the `[N, V]` logits" in kernel
    assert "The backward recomputes each tile" in kernel
    assert "_ChunkedLogProbFunction.apply(" in inspect.getsource(add_fused_lm_head)


def test_generate_defaults_to_top_k_50_and_trl_to_no_truncation():
    # tiny-lm.md, 从 Hugging Face 模型采样: “不设时 transformers 取 top_k=50，采样分布就不是 softmax(z/τ)”;
    # “TRL 的 GRPOConfig 默认 top_k=0、top_p=1.0，也不截掉词表”.
    # transformers 5.24.0 generation/configuration_utils.py:602-618 (defaults for unset fields), generation/utils.py:1622
    # (top_k 0 adds no TopKLogitsWarper); TRL 1.16.0 grpo_config.py:536-548, grpo_trainer.py:1154-1166.
    import transformers.generation.utils as generation_utils
    from transformers import GenerationConfig

    defaults = GenerationConfig._get_default_generation_params()
    assert (defaults["top_k"], defaults["top_p"]) == (50, 1.0)
    assert "if generation_config.top_k is not None and generation_config.top_k != 0:" in inspect.getsource(
        generation_utils
    )
    args = default_config(GRPOConfig)
    assert (args.top_k, args.top_p) == (0, 1.0)
    init = source(GRPOTrainer.__init__)
    assert '"top_k": self.top_k,' in init and '"top_p": self.top_p,' in init


def test_generate_repeats_each_prompt_in_adjacent_rows_and_pads_after_eos():
    # tiny-lm.md, 从 Hugging Face 模型采样: “num_return_sequences=G  # 同一个提示词的 G 行相邻” (the page's block also
    # asserts it on its own output). transformers 5.24.0 generation/utils.py:1223-1227.
    from transformers.generation.utils import GenerationMixin

    text = source(GenerationMixin._expand_inputs_for_generation)
    assert "input_ids = input_ids.repeat_interleave(expand_size, dim=0)" in text
    # “回答在 EOS 处停下，之后填 PAD”: generation/utils.py:3283, rows that have finished get pad_token_id.
    assert "next_tokens = next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)" in source(
        GenerationMixin._sample
    )


def _tiny_qwen2(vocab_size: int = 32, seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=vocab_size,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            tie_word_embeddings=False,
        )
    ).eval()


def _processed_and_raw_first_step(model, **sampling):
    """generate's processed logits (`scores`) and raw logits for the first sampled token of one prompt."""
    from transformers import GenerationConfig

    input_ids = torch.tensor([[3, 4, 5, 6]])
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        generation_config=GenerationConfig(
            do_sample=True,
            max_new_tokens=2,
            pad_token_id=0,
            eos_token_id=1,
            output_scores=True,
            output_logits=True,
            return_dict_in_generate=True,
            **sampling,
        ),
    )
    return out.scores[0], out.logits[0], input_ids, out


def test_generate_takes_unset_fields_from_the_checkpoint_so_repetition_penalty_must_be_written_out():
    # tiny-lm.md, 从 Hugging Face 模型采样: “generate 会把检查点 generation_config.json 里设了的项并进来：你没写明的项，
    # 就按检查点的取。新建的 GenerationConfig 也一样，它只挡得住你写明的项。” / “repetition_penalty 大于 1 时，提示词和
    # 已写出的部分里出现过的 token，logit 会被压低。这时采样分布就不是 softmax(z/τ)” / “所以 repetition_penalty=1.0 要写明”;
    # 自己写一步 GRPO: “检查点设了大于 1 的 repetition_penalty 而没有写明 1.0 时，这个差就不再是 0”.
    # transformers 5.24.0 generation/utils.py:2114 (the checkpoint's generation_config fills every field left None),
    # :1472 (RepetitionPenaltyLogitsProcessor unless the penalty is 1.0).
    import transformers.generation.utils as generation_utils

    assert (
        "generation_config.update(**self.generation_config.to_dict(), defaults_only=True, allow_custom_entries=True)"
        in inspect.getsource(generation_utils.GenerationMixin._prepare_generation_config)
    )
    model = _tiny_qwen2()
    model.generation_config.repetition_penalty = 1.1  # what a chat checkpoint may ship
    sampling = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    torch.manual_seed(0)
    scores, raw, prompt, out = _processed_and_raw_first_step(model, **sampling)  # fresh config, no penalty
    changed = (scores != raw).nonzero()[:, 1].unique()
    assert len(changed) > 0 and set(changed.tolist()) <= set(prompt[0].tolist())  # only tokens already seen
    assert torch.all(scores[0, changed] < raw[0, changed])  # pushed down
    # the next step also pushes down the token just written
    seen = set(out.sequences[0, :5].tolist())
    assert set((out.scores[1] != out.logits[1]).nonzero()[:, 1].tolist()) == seen
    torch.manual_seed(0)
    scores, raw, _, _ = _processed_and_raw_first_step(model, repetition_penalty=1.0, **sampling)
    assert torch.equal(scores, raw)


def test_generate_scores_are_the_logits_it_samples_from_after_the_temperature():
    # tiny-lm.md, 自己写一步 GRPO: “generated.scores 是 generate 每一步实际用来采样的 logits（已经除过温度）”.
    # transformers 5.24.0 generation/utils.py:3251-3256 (scores collects the processed next_token_scores), :1618-1619
    # (the temperature warper is one of the processors).
    from transformers.generation.utils import GenerationMixin

    text = source(GenerationMixin._sample)
    assert "next_token_scores = logits_processor(input_ids, next_token_logits)" in text
    assert "scores += (next_token_scores,)" in text
    assert "probs = nn.functional.softmax(next_token_scores, dim=-1)" in text
    torch.manual_seed(0)
    scores, raw, _, _ = _processed_and_raw_first_step(
        _tiny_qwen2(), temperature=0.7, top_k=0, top_p=1.0, repetition_penalty=1.0
    )
    assert torch.allclose(scores, raw / 0.7)


def test_trl_passes_repetition_penalty_to_generate_and_defaults_to_one():
    # tiny-lm.md: “TRL 的 GRPOConfig 默认 top_k=0、top_p=1.0、repetition_penalty=1.0，并把它们显式传给 generate”.
    # TRL 1.16.0 grpo_config.py:573-574, grpo_trainer.py:1161-1165 (generation_kwargs) and the GenerationConfig built from
    # them, which is what generate gets.
    args = default_config(GRPOConfig)
    assert (args.top_k, args.top_p, args.repetition_penalty) == (0, 1.0, 1.0)
    init = source(GRPOTrainer.__init__)
    assert '"repetition_penalty": self.repetition_penalty,' in init
    assert "self.generation_config = GenerationConfig(**generation_kwargs" in init


def test_hf_decoder_and_output_layer_give_the_logits():
    # tiny-lm.md, 深入：大词表上怎样省下这个张量: “hidden 是去掉输出层的模型的输出，weight 是输出层。Qwen2 里它们是
    # model.model 与 model.lm_head；通用的取法是 model.get_decoder() 与 model.get_output_embeddings()”.
    # transformers 5.24.0 modeling_utils.py:1049 (get_output_embeddings), :2264 (get_decoder).
    model = _tiny_qwen2()
    assert model.get_decoder() is model.model and model.get_output_embeddings() is model.lm_head
    input_ids = torch.tensor([[3, 4, 5, 6, 7]])
    mask = torch.ones_like(input_ids)
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=input_ids, attention_mask=mask).last_hidden_state
        assert torch.allclose(model.lm_head(hidden), model(input_ids=input_ids, attention_mask=mask).logits, atol=1e-6)


def test_dapo_over_micro_batches_needs_the_whole_batch_token_count():
    # tiny-lm.md, 自己写一步 GRPO: “每个小批的 dapo 损失要乘‘本小批的 token 数 / 整批的 token 数’，整批才与一次算完相同”.
    from rlhf_toy.losses.grpo import grpo_loss

    torch.manual_seed(0)
    logps = torch.randn(8, 6, requires_grad=True)
    advantages = torch.randn(8)
    mask = (torch.rand(8, 6) < 0.7).float()
    mask[:, 0] = 1
    whole, _ = grpo_loss(logps, None, None, advantages, mask, beta=0.0, loss_type="dapo")
    (whole_grad,) = torch.autograd.grad(whole, logps)
    parts, plain = [], []
    for rows in torch.arange(8).split(4):
        part, _ = grpo_loss(logps[rows], None, None, advantages[rows], mask[rows], beta=0.0, loss_type="dapo")
        parts.append(part * mask[rows].sum() / mask.sum())
        plain.append(part / 2)  # averaging the micro-batch losses instead
    (parts_grad,) = torch.autograd.grad(sum(parts), logps)
    assert torch.allclose(sum(parts), whole) and torch.allclose(parts_grad, whole_grad)
    assert not torch.allclose(sum(plain), whole)


def test_train_grpo_copies_the_policy_as_reference_even_at_beta_zero():
    # tiny-lm.md, 自己写一步 GRPO: “β = 0 时不要建参考模型：本章的 train_grpo 为了简单总建一份，大模型上它要多占一整份权重”
    # (and the comment in train/grpo.py). frozen_copy is a deepcopy; the reference log-probs are used only when beta > 0.
    from rlhf_toy.policies.transformer import TinyTransformerPolicy
    from rlhf_toy.train.grpo import train_grpo

    loop = source(train_grpo)
    assert "ref_policy = policy.frozen_copy() if ref_policy is None else ref_policy" in loop
    assert "ref_logps = ref_policy.logps(group_prompts, completions) if config.beta > 0 else None" in loop
    assert "copy.deepcopy(self)" in source(TinyTransformerPolicy.frozen_copy)


def test_length_table_grpo_gap_lies_above_the_dr_grpo_ruler():
    # tiny-lm.md, 长度一课: “用它来读：grpo 减 dapo（倒数第二行）的范围，整个落在 dr_grpo 减 dapo 的范围之上。”
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    runs = json.loads((root / "docs/data/tiny_lm_figures.json").read_text(encoding="utf-8"))["length_lesson"]["0"]

    def diffs(name):
        return [r["length_wrong"] - d["length_wrong"] for r, d in zip(runs[name][1:], runs["dapo"][1:], strict=True)]

    assert min(diffs("grpo")) > max(diffs("dr_grpo"))


def test_reward_weights_default_to_one_and_trl_sums_before_the_group_normalisation():
    # tiny-lm.md, 数据集与奖励函数: “reward_weights 给每个函数一个权重，个数与函数相同；不设时全是 1.0”;
    # “TRL 默认先按权重把各函数的奖励加起来，再对这个和算组内优势。这个默认就是 multi_objective_aggregation="sum_then_normalize"。
    # 所以格式分和答案分一起减去组内均值、除以组内标准差”.
    # TRL 1.16.0 trl/trainer/grpo_config.py:770-787 (defaults), trl/trainer/grpo_trainer.py:567-576 (weights),
    # :2761-2787 (sum, then group mean and std of the sum).
    args = default_config(GRPOConfig)
    assert args.reward_weights is None
    assert args.multi_objective_aggregation == "sum_then_normalize"
    init = source(GRPOTrainer.__init__)
    assert "if len(args.reward_weights) != len(reward_funcs): raise ValueError(" in init
    assert "self.reward_weights = torch.ones(len(reward_funcs), dtype=torch.float32)" in init
    score = source(GRPOTrainer._generate_and_score_completions)
    head = 'if self.multi_objective_aggregation == "sum_then_normalize":'
    branch = score[score.index(head) : score.index('elif self.multi_objective_aggregation == "normalize_then_sum":')]
    total = "rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)"
    assert total in branch
    after = branch[branch.index(total) :]
    assert "mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)" in after
    assert "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)" in after
    assert "advantages = advantages / (std_rewards + 1e-4)" in after
    # “一组回答全错时，组内只有格式分不同；它得到的优势，与答对、答错之分在别的组里得到的几乎一样大。只要格式分远大于 1e-4，把权重从 0.1 调小，
    # 这一点几乎不变”: the same arithmetic as TRL's branch (nanstd is Bessel-corrected), on an all-wrong group.
    from trl.trainer.utils import nanstd

    accuracy = torch.zeros(4)
    fmt = torch.tensor([1.0, 1.0, 0.0, 0.0])
    for weight in (0.1, 0.01):
        rewards = torch.stack([accuracy, fmt], dim=1) @ torch.tensor([1.0, weight])
        adv = (rewards - rewards.mean()) / (nanstd(rewards) + 1e-4)
        assert bool((adv.abs() > 0.85).all())  # 0.865 at weight 0.1, 0.851 at 0.01 (the +1e-4 starts to show)
    answers = torch.tensor([1.0, 1.0, 0.0, 0.0])  # another group: two right, two wrong, no format bonus
    answer_adv = (answers - answers.mean()) / (nanstd(answers) + 1e-4)
    assert torch.allclose(answer_adv.abs(), torch.full((4,), 0.866), atol=1e-3)

    # The page's format_reward sketch (display-only) gives 1 for exactly one “\boxed{”.
    def format_reward(completions, **kwargs):
        texts = [c[-1]["content"] for c in completions]
        return [float(t.count(r"\boxed{") == 1) for t in texts]

    replies = [r"\boxed{81}", r"\boxed{80} \boxed{81}", "81"]
    assert format_reward([[{"role": "assistant", "content": t}] for t in replies]) == [1.0, 0.0, 0.0]


def test_trl_builds_no_reference_model_at_beta_zero():
    # tiny-lm.md, 自己写一步 GRPO: “β = 0 时它也不建参考模型”.
    # TRL 1.16.0 trl/trainer/grpo_trainer.py:983-986.
    init = source(GRPOTrainer.__init__)
    assert "if self.beta == 0.0: # If beta is 0.0, the reference model is not needed self.ref_model = None" in init
