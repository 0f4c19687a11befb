"""docs/reasoning.md: what the page says about TRL's reward functions, checked against the pinned TRL."""

from __future__ import annotations

import importlib.util
import inspect

import pytest
from trl import GRPOConfig, GRPOTrainer
from trl.rewards import accuracy_reward, reasoning_accuracy_reward, think_format_reward

from .pinned import default_config, source


def chat(*texts: str) -> list[list[dict[str, str]]]:
    return [[{"role": "assistant", "content": t}] for t in texts]


def test_reward_functions_take_conversational_completions_and_kwargs():
    # reasoning.md: “它们收的是对话格式的回答（每条是一个消息列表，读 completion[0]["content"]）、
    # 标准答案列 solution 与 **kwargs”；“两者都返回每条一个数的列表：think_format_reward 是浮点数，
    # accuracy_reward 是浮点数或 None”.
    params = inspect.signature(accuracy_reward).parameters
    assert list(params) == ["completions", "solution", "log_extra", "kwargs"]
    assert list(inspect.signature(think_format_reward).parameters) == ["completions", "kwargs"]
    assert 'completion[0]["content"]' in source(accuracy_reward)
    assert 'completion[0]["content"]' in source(think_format_reward)
    assert inspect.signature(think_format_reward).return_annotation in ("list[float]", list[float])
    assert inspect.signature(accuracy_reward).return_annotation in ("list[float | None]", list[float | None])


def test_think_format_reward_checks_only_the_tags():
    # reasoning.md: “think_format_reward 只看标签：以 <think> 开头、有 </think>、后面不再出现 <think> 就给 1.0，
    # 空的思考 <think></think> 与 </think> 之后什么也没有都得 1.0；开头多一个空格就得 0.0”.
    rewards = think_format_reward(
        chat(
            "<think>a</think>42",
            "<think></think>42",
            "<think>a</think>",
            "42",
            " <think>a</think>42",
            "<think>a<think>b</think>1",
        )
    )
    assert rewards == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert "^<think>(?!.*<think>)(.*?)</think>.*$" in source(think_format_reward)


def test_accuracy_reward_needs_math_verify_and_it_is_not_pinned():
    # reasoning.md: “accuracy_reward 用 math_verify 解析并比较答案；本书钉住的环境没有装 math_verify，调用它会抛 ImportError”.
    text = source(accuracy_reward)
    assert "parse(" in text and "verify(gold_parsed, answer_parsed" in text
    assert importlib.util.find_spec("math_verify") is None
    with pytest.raises(ImportError, match="math_verify"):
        accuracy_reward(chat(r"\boxed{1}"), ["1"])


def test_accuracy_reward_returns_none_for_unparseable_gold_and_passes_first_match():
    # reasoning.md: “标准答案解析不出来时返回 None（这道题被跳过），否则 1.0 或 0.0；它在整条回答里找答案，
    # 不去掉思考部分；按优先级先找 \boxed{}”. This checks only the options TRL passes to math_verify.parse.
    # What they mean (within the best priority group the rightmost match is tried, and first_match stops after it)
    # is math_verify's behaviour; math_verify is not installed here, so the page cites its source in a footnote.
    text = source(accuracy_reward)
    assert "reward = None" in text
    assert 'extraction_mode="first_match"' in text and "boxed_match_priority=0" in text
    assert "</think>" not in text


def test_reasoning_accuracy_reward_splits_at_the_delimiter():
    # reasoning.md: “reasoning_accuracy_reward 先在 </think>（reasoning_delimiters 的默认值）处切开，
    # 只验证之后的部分；没有这个分隔符时直接给 0.0”.
    text = source(reasoning_accuracy_reward)
    assert 'reasoning_delimiters = ["</think>"]' in text
    assert "content = content.split(delim)[-1]" in text
    assert "rewards.append(0.0)" in text


def test_several_reward_functions_are_summed_with_reward_weights():
    # reasoning.md: “GRPOTrainer 把几个奖励函数按 reward_weights 加权求和（默认全为 1），None 当作缺失（nansum）；
    # 本章的 r_acc + 0.2 r_fmt 对应 reward_funcs=[答案, 格式]、reward_weights=[1.0, 0.2]”.
    assert default_config(GRPOConfig).reward_weights is None
    assert default_config(GRPOConfig).multi_objective_aggregation == "sum_then_normalize"
    text = source(GRPOTrainer._generate_and_score_completions)
    assert "rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)" in text
    assert "self.reward_weights = torch.ones(len(reward_funcs), dtype=torch.float32)" in source(GRPOTrainer.__init__)
    calc = source(GRPOTrainer._calculate_rewards)
    assert "reward if reward is not None else torch.nan" in calc


def test_soft_overlong_punishment_lives_in_trl_rewards():
    # reasoning.md: “DAPO 的软超长惩罚在 TRL 里是 trl.rewards.get_soft_overlong_punishment”（本章复用第 6 章的同一个式子）.
    from trl.rewards import get_soft_overlong_punishment

    assert list(inspect.signature(get_soft_overlong_punishment).parameters) == [
        "max_completion_len",
        "soft_punish_cache",
    ]


def test_trl_options_for_truncation_length_and_aggregation():
    # reasoning.md: “accuracy_reward 解析回答时用 LatexExtractionConfig(..., try_extract_without_anchor=False)”；
    # “GRPOConfig.mask_truncated_completions（默认 False；打开后最后一个 token 不是 EOS 或填充符的回答不进损失）”；
    # “TRL 1.16 还有 get_cosine_scaled_reward(max_len, ...)……它本身就是答案奖励（内部调用 accuracy_reward……），
    # 按长度的余弦把答对的分从 1 降到 0.5、答错的从 −1 升到 −0.5（答错时越长扣得越少）”；
    # “多个奖励默认先加权求和再做组内归一化（sum_then_normalize），也可以 normalize_then_sum”.
    from trl.rewards import get_cosine_scaled_reward
    from trl.rewards.accuracy_rewards import _CosineScaledReward

    assert "try_extract_without_anchor=False" in source(accuracy_reward)
    assert default_config(GRPOConfig).mask_truncated_completions is False
    text = source(GRPOTrainer._generate_and_score_completions)
    assert "if self.mask_truncated_completions:" in text
    assert "eos_and_pad = [*self.eos_token_ids, self._tokenizer.pad_token_id]" in text
    assert "is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids_list]" in text
    assert "completion_mask = completion_mask * (~is_truncated).unsqueeze(1).int()" in text
    assert list(inspect.signature(get_cosine_scaled_reward).parameters)[0] == "max_len"
    cosine = inspect.signature(get_cosine_scaled_reward).parameters
    assert [
        cosine[k].default for k in ("min_value_wrong", "max_value_wrong", "min_value_correct", "max_value_correct")
    ] == [
        -1.0,
        -0.5,
        0.5,
        1.0,
    ]
    call = source(_CosineScaledReward.__call__)
    assert "is_correct = accuracy_reward(completions, solution)" in call
    assert "min_value, max_value = self.max_value_wrong, self.min_value_wrong" in call
    assert "progress = min(len(ids) / self.max_len, 1.0)" in call
    assert default_config(GRPOConfig).multi_objective_aggregation == "sum_then_normalize"
    assert 'elif self.multi_objective_aggregation == "normalize_then_sum":' in text
    # “normalize_then_sum：先在组内把每个奖励各自标准化，按 reward_weights 加权求和，再在整批上标准化一次；
    # 最后这一步不看 scale_rewards”.
    branch = text[text.index('elif self.multi_objective_aggregation == "normalize_then_sum":') :]
    branch = branch[: branch.index("is_std_zero")]
    assert "std_k = nanstd(grouped, dim=1, keepdim=True)" in branch
    assert "reward_k = (grouped - mean_k) / (std_k + 1e-4)" in branch
    assert "rewards = (reward_k * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)" in branch
    assert "std_rewards = nanstd(rewards).expand_as(rewards)" in branch
    assert "advantages = (rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4)" in branch
    assert "scale_rewards" not in branch


def test_grpo_scales_advantages_by_the_group_std_by_default():
    # reasoning.md: “GRPO 按组内标准差缩放优势（scale_rewards="group"，本章与 TRL 的默认）”：
    # 答案全错（或全对）的组里格式分的优势与 w_fmt 无关.
    assert default_config(GRPOConfig).scale_rewards == "group"
    text = source(GRPOTrainer._generate_and_score_completions)
    assert "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)" in text
    assert "advantages = rewards - mean_grouped_rewards" in text
    assert "advantages = advantages / (std_rewards + 1e-4)" in text
