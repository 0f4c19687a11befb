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
