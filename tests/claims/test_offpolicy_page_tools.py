"""docs/offpolicy.md, the tools section: what it says about TRL 1.16's and verl 0.9.1's tool masks."""

from __future__ import annotations

import inspect

from trl import GRPOTrainer
from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, MergeResult


def test_trl_tool_mask_is_zero_on_tool_results_and_their_logprobs_are_zero():
    # offpolicy.md: “TRL 1.16 在 _tool_call_loop 里给工具结果的 token 记 tool_mask = 0、采样对数概率记 0.0”.
    src = inspect.getsource(GRPOTrainer._tool_call_loop)
    assert "tool_mask = [[1] * len(ids) for ids in completion_ids]" in src
    assert "tool_mask[idx_with_tool] += [0] * tool_length + [1] * post_tool_length" in src
    assert "logprobs[idx_with_tool] += [0.0] * tool_length + post_tool_logprobs[idx]" in src


def test_trl_multiplies_completion_mask_by_tool_mask():
    # offpolicy.md: “损失、dapo 的 token 数、熵与 KL 的日志、vLLM 重要性采样修正都用 completion_mask * tool_mask”.
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "loss_mask = completion_mask if tool_mask is None else completion_mask * tool_mask" in src
    assert "num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()" in src
    assert "mask = completion_mask if tool_mask is None else completion_mask * tool_mask" in src  # the IS correction
    loss_src = inspect.getsource(GRPOTrainer._compute_loss)
    assert 'mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]' in loss_src


def test_verl_response_mask_is_zero_on_context_tokens():
    # offpolicy.md: “verl 0.9.1 的 agent loop 把工具返回的 token 记作 response_mask = 0、对数概率记 0.0，
    # 模型生成的 token 记 1”.
    builder = object.__new__(ContinuousTokenBuilder)  # the method reads only its arguments
    tool = MergeResult(token_ids=[7] * 5, appended_token_count=3, kind="context")
    mask, logprobs = builder.align_response_metadata(tool, [1, 1], [-0.5, -0.7])
    assert mask == [1, 1, 0, 0, 0]
    assert logprobs == [-0.5, -0.7, 0.0, 0.0, 0.0]
    model = MergeResult(token_ids=[7] * 4, appended_token_count=2, kind="assistant")
    mask, logprobs = builder.align_response_metadata(model, [1, 0], [-0.5, 0.0], assistant_logprobs=[-0.1, -0.2])
    assert mask == [1, 0, 1, 1]


def test_trl_drops_a_tool_result_that_does_not_fit():
    # offpolicy.md: “TRL 把放不下的工具结果整段撤回”（回答保持调用之前的样子，离开工具循环）.
    src = inspect.getsource(GRPOTrainer._tool_call_loop)
    assert "len(pct) - len(prompt_ids[i]) > self.max_completion_length" in src
    assert "del completions[idx_with_tool][completions_len_before[idx] :]" in src
    assert "idxs_with_tool = [idx for idx, o in zip(idxs_with_tool, overlong, strict=True) if not o]" in src


def test_trl_has_no_option_to_train_on_tool_results():
    # offpolicy.md: “TRL 不提供‘不遮’的开关”: GRPOConfig's only tool option is the iteration cap.
    import dataclasses

    from trl import GRPOConfig

    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    assert [n for n in names if "tool" in n] == ["max_tool_calling_iterations"]


def test_trl_rollout_func_masks_only_with_env_mask():
    # offpolicy.md: “用 rollout_func 自己写多轮生成时，要在返回值里给 "env_mask"，否则 tool_mask 是 None，环境写的 token 也进损失”.
    src = " ".join(inspect.getsource(GRPOTrainer._generate).split())
    assert 'tool_mask = extra_fields.pop("env_mask", None)' in src
    score = " ".join(inspect.getsource(GRPOTrainer._generate_and_score_completions).split())
    assert "mask = completion_mask if tool_mask is None else completion_mask * tool_mask" in score


def test_trl_tool_mask_covers_the_template_tokens_around_the_tool_result():
    # offpolicy.md: “tool_mask = 0 还盖住模板插入的 token：工具消息的头尾和下一轮 assistant 的开头；
    # 常见错误：“TRL 与 verl 都直接拼接 token id”（不把对话解码再重新分词）.
    suffix = " ".join(inspect.getsource(GRPOTrainer._get_tool_suffix_ids).split())
    assert "add_generation_prompt=True" in suffix
    loop = " ".join(inspect.getsource(GRPOTrainer._tool_call_loop).split())
    assert "tool_length = prompt_completion_tool_length - prompt_length - completion_length" in loop
    assert "(using concatenated IDs, no re-tokenization)" in loop
    # verl 的 ContinuousTokenBuilder 把模型生成的 token id 直接接在运行中的 token 流后面
    import importlib.util
    from pathlib import Path

    verl_root = Path(importlib.util.find_spec("verl").origin).parent
    builder = (verl_root / "utils/tokenizer/continuous_token.py").read_text(encoding="utf-8")
    assert "merged_token_ids = list(runtime_token_ids) + list(appended_token_ids)" in builder
    assert "Boundary tokens are not model-generated and therefore must not carry loss or model logprobs." in " ".join(
        (MergeResult.__doc__ or "").split()
    )
