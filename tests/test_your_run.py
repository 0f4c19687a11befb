"""Chapter 13 (docs/your-run.md): the byte-level BPE tokenizer and chat template, the answer parser, the loss mask
under a template, the three classic template mistakes (each with a test that shows the failure), LoRA's parameter
count and merge, and the cached LoRA-vs-full run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _scripts import load_script

from rlhf_toy.exercises.your_run import chat_completion_mask, lora_trainable_parameters
from rlhf_toy.integrations import chat  # needs transformers/tokenizers: make test installs them
from rlhf_toy.tasks.addition import AdditionTask
from rlhf_toy.tasks.answers import extract_boxed, parse_answer

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("trl")  # one worker pays the transformers import once


@pytest.fixture(scope="module")
def tokenizer():
    return chat.train_chat_tokenizer(AdditionTask(seed=0, balanced=True).train[:2000])


# ---- the answer parser ----


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"23 + 58 = 81. The answer is \boxed{81}.", 81),
        (r"\boxed{80} no wait \boxed{81}", 81),  # the last box is the conclusion
        (r"\boxed{ 81 }", 81),  # spaces inside the box
        (r"\boxed{1,000}", 1000),  # thousands separator
        (r"\boxed{12,345,678}", 12_345_678),
        (r"\boxed{8,1}", None),  # a comma that is not a thousands separator: not one integer
        (r"\boxed{23,58}", None),  # the two operands, not 2358
        (r"\boxed{81,}", None),
        (r"\boxed{1,00}", None),
        (r"\boxed{-7}", -7),
        (r"\boxed{81.5}", None),  # not an integer
        (r"\boxed{x}", None),
        (r"\boxed{}", None),  # empty box
        (r"the answer is \boxed{81", None),  # cut off inside the box: no fallback to the marker
        (r"\boxed{\frac{1}{2}}", None),  # nested braces are read, but it is not an integer
        ("The answer is 81.", 81),  # marker fallback
        ("答案：81", 81),
        ("Answer: 81, or maybe 82", 81),  # the first integer after the marker
        ("Answer: 81,82", None),  # not 8182
        ("Answer: 81.5", None),  # a decimal is not an integer answer
        ("Answer: 81.", 81),  # a full stop ends the sentence
        ("The answer is 8,1.", None),
        ("The answer is 1,000.", 1000),
        ("23 + 58 = ?", None),  # no box, no marker: never guess the last number
        ("", None),
    ],
)
def test_parse_answer_edge_cases(text, expected):
    assert parse_answer(text) == expected


def test_extract_boxed_reads_nested_braces_and_refuses_non_strings():
    assert extract_boxed(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    with pytest.raises(ValueError, match="text"):
        extract_boxed(81)


# ---- tokenizer and template ----


def test_tokenizer_is_deterministic_and_byte_level(tokenizer):
    again = chat.train_chat_tokenizer(AdditionTask(seed=0, balanced=True).train[:2000])
    assert again.get_vocab() == tokenizer.get_vocab()
    assert len(tokenizer) == 400
    # byte level: text the corpus never saw still encodes and decodes back exactly, with no unknown token
    text = "Grüße, 你好! 12345"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_template_matches_the_corpus_rendering_and_ends_with_the_generation_prompt(tokenizer):
    messages = chat.conversation(23, 58)
    for gen in (True, False):
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
        assert rendered == chat._render(messages, gen)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n")


def test_mask_covers_exactly_the_completion_and_its_end_of_turn(tokenizer):
    messages = chat.conversation(23, 58, chat.worked_answer(23, 58))
    ids, mask = chat.prompt_completion_ids(tokenizer, messages)
    # the split tokenisation equals tokenising the whole text up to the end of turn (no merge across the boundary)
    whole = tokenizer.apply_chat_template(messages, tokenize=False).removesuffix("\n")
    assert ids == tokenizer(whole, add_special_tokens=False)["input_ids"]
    completion = [t for t, m in zip(ids, mask, strict=True) if m]
    assert tokenizer.decode(completion) == chat.worked_answer(23, 58) + "<|im_end|>"
    assert completion[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id
    # the exercise's reference gives the same mask on the rendered conversation
    header = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    full = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)["input_ids"]
    assert full[: len(ids)] == ids
    assert chat_completion_mask(full, header, tokenizer.eos_token_id) == mask + [0] * (len(full) - len(ids))


def test_prompt_completion_ids_refuses_a_conversation_without_an_answer(tokenizer):
    with pytest.raises(ValueError, match="assistant"):
        chat.prompt_completion_ids(tokenizer, chat.conversation(1, 2))


# ---- the three classic mistakes, each shown failing ----


def test_mistake_template_applied_twice(tokenizer):
    messages = chat.conversation(23, 58)
    once = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    # the rendered text put back into a user message (e.g. a dataset column already rendered, then rendered by TRL)
    twice = tokenizer.apply_chat_template(
        [{"role": "user", "content": once}], add_generation_prompt=True, tokenize=False
    )
    assert once.count("<|im_start|>") == 3
    assert twice.count("<|im_start|>") == 5  # two assistant headers: the model sees a turn that never happened
    assert twice.count("<|im_start|>assistant\n") == 2


def _trl_mask(completion_ids: list[int], eos_token_ids: list[int]) -> list[int]:
    """TRL 1.16's completion mask (grpo_trainer.py:1881-1885): ones up to and including the first EOS."""
    ids = torch.tensor([completion_ids])
    is_eos = torch.isin(ids, torch.tensor(eos_token_ids))
    eos_idx = torch.full((1,), ids.size(1), dtype=torch.long)
    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    return (torch.arange(ids.size(1)) <= eos_idx.unsqueeze(1)).int()[0].tolist()


def test_mistake_eos_is_not_the_end_of_turn_token():
    problems = AdditionTask(seed=0, balanced=True).train[:2000]
    right = chat.train_chat_tokenizer(problems)
    wrong = chat.train_chat_tokenizer(problems, eos_token="<|endoftext|>")  # a base model's EOS
    # a completion that ends its turn and then keeps writing a new user turn
    text = chat.worked_answer(23, 58) + "<|im_end|>\n<|im_start|>user\nWhat is 1 + 1?"
    ids = right(text, add_special_tokens=False)["input_ids"]
    assert ids == wrong(text, add_special_tokens=False)["input_ids"]
    n_answer = len(right(chat.worked_answer(23, 58), add_special_tokens=False)["input_ids"]) + 1
    assert sum(_trl_mask(ids, [right.eos_token_id])) == n_answer  # stops at <|im_end|>
    assert sum(_trl_mask(ids, [wrong.eos_token_id])) == len(ids)  # never stops: the next turn is trained too


def test_mistake_generation_prompt_missing(tokenizer):
    messages = chat.conversation(23, 58)
    with_gen = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    without = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert with_gen == without + "<|im_start|>assistant\n"
    # the model then has to write the header itself: the completion (what TRL masks in) holds template tokens
    header = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    completion = header + tokenizer(chat.worked_answer(23, 58), add_special_tokens=False)["input_ids"]
    completion += [tokenizer.eos_token_id]
    assert sum(_trl_mask(completion, [tokenizer.eos_token_id])) == len(completion)
    assert len(header) == 3  # three template tokens trained as if the model chose them
    # and the reward parser still finds the answer, so nothing in the reward shows the mistake
    assert chat.chat_reward([tokenizer.decode(completion, skip_special_tokens=True)], [23], [58]) == [1.0]


def test_chat_reward_reads_conversational_completions():
    completions = [
        [{"role": "assistant", "content": r"\boxed{81}"}],
        [{"role": "assistant", "content": "81"}],  # no box, no marker
        [{"role": "assistant", "content": "The answer is 81."}],
    ]
    assert chat.chat_reward(completions, [23] * 3, [58] * 3) == [1.0, 0.0, 1.0]


# ---- LoRA ----


@pytest.fixture(scope="module")
def lora():
    from rlhf_toy.integrations import lora

    return lora


def _adapted(lora, r=8):
    from peft import get_peft_model

    from rlhf_toy.integrations.trl import make_model

    model = get_peft_model(make_model(seed=0), lora.lora_config(r=r))
    torch.manual_seed(1)
    with torch.no_grad():  # B starts at zero; give the adapter non-zero weights as after training
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return model


def test_lora_trainable_count_is_r_times_in_plus_out(lora):
    model = _adapted(lora)
    shapes = [
        tuple(m.base_layer.weight.shape)
        for name, m in model.named_modules()
        if hasattr(m, "base_layer") and name.endswith(lora.LINEAR_LAYERS)
    ]
    assert len(shapes) == 2 * 7
    trainable, total = lora.count_parameters(model)
    assert trainable == lora_trainable_parameters(shapes, r=8) == 17_664
    assert total == 75_792 + trainable


def test_merge_and_unload_equals_the_adapter_model(lora):
    model = _adapted(lora).eval()
    ids = torch.randint(3, 16, (4, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        with model.disable_adapter():
            base = model(input_ids=ids).logits
        merged = model.merge_and_unload()(input_ids=ids).logits
    assert (adapted - base).abs().max() > 1e-2  # the adapter does change the outputs
    torch.testing.assert_close(merged, adapted, atol=1e-5, rtol=1e-5)


def test_lora_config_refuses_rank_zero(lora):
    with pytest.raises(ValueError, match="r"):
        lora.lora_config(r=0)


# ---- the cache ----


def _script():
    return load_script("run_lora")


def test_cache_comes_from_this_code_and_config():
    run_lora = _script()
    cache = json.loads((ROOT / "docs" / "data" / "lora.json").read_text(encoding="utf-8"))
    assert cache["code_hash"] == run_lora.code_hash(), "rerun scripts/run_lora.py and commit docs/data/lora.json"
    assert cache["config"] == json.loads(json.dumps(run_lora.config()))
    assert cache["runs"]["lora"]["trainable"] == 17_664
    assert cache["runs"]["full"]["trainable"] == 75_792


# ---- putting it together: load from a path, GRPOTrainer with LoRA (section “把它们放在一起”) ----


@pytest.fixture(scope="module")
def pretrained():
    pytest.importorskip("trl")
    from rlhf_toy.integrations import pretrained

    return pretrained


def test_build_grpo_trainer_loads_from_the_path_and_trains_only_lora(pretrained, tokenizer, tmp_path):
    # The page's run trains two steps and prints that only LoRA tensors changed (checked by the page's own
    # expected output); here: the directory round trip and the configuration, without training again.
    task = AdditionTask(seed=0, balanced=True)
    problems = task.train[:2]
    path = pretrained.save_tiny_checkpoint(str(tmp_path), task, problems, sft_steps=0)
    trainer = pretrained.build_grpo_trainer(path, problems, num_generations=4, max_steps=2)
    loaded = trainer.processing_class
    assert loaded.chat_template == tokenizer.chat_template == chat.CHAT_TEMPLATE
    assert (loaded.eos_token, loaded.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert loaded.get_vocab() == tokenizer.get_vocab()  # same vocabulary and ids ...
    # ... but transformers 5.24 reloads a qwen2 directory as Qwen2Tokenizer, which pre-tokenizes digits one by one
    # (the page's box “与 TRL / peft 的差异”; the claim test checks the library's rule)
    assert type(loaded).__name__ == "Qwen2Tokenizer"
    assert (tokenizer.tokenize(" = 81."), loaded.tokenize(" = 81.")) == (["Ġ=", "Ġ81", "."], ["Ġ=", "Ġ", "8", "1", "."])
    assert (trainer.args.per_device_train_batch_size, trainer.args.num_generations) == (8, 4)
    assert trainer.args.beta == 0.0  # the default is the book's advice (ch. 6); the page passes 0.04 to show kl
    assert trainer.args.generation_batch_size == 8  # P × G completions per generation, one optimizer step each
    assert (trainer.args.use_cpu, trainer.args.bf16, trainer.args.gradient_checkpointing) == (True, False, False)
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert len(trainable) == 28 and all("lora_A" in n or "lora_B" in n for n in trainable)  # 14 adapters × (A, B)
    assert trainer.model.get_base_model().config.vocab_size == len(tokenizer)


def test_cpu_settings_are_chapter_10s(pretrained, tmp_path):
    # “与第 10 章相同的 CPU 设置”: every key of CPU_SETTINGS resolves to the value trl_grpo_config gives it.
    from trl import GRPOConfig as TRLGRPOConfig

    from rlhf_toy.integrations.trl import trl_grpo_config
    from rlhf_toy.train.grpo import GRPOConfig

    chapter_10 = trl_grpo_config(GRPOConfig(), AdditionTask(seed=0), output_dir=str(tmp_path))
    ours = TRLGRPOConfig(output_dir=str(tmp_path), **pretrained.CPU_SETTINGS)
    assert {k: getattr(ours, k) for k in pretrained.CPU_SETTINGS} == {
        k: getattr(chapter_10, k) for k in pretrained.CPU_SETTINGS
    }


def test_without_sft_every_reward_is_zero_and_nothing_changes(pretrained, tmp_path):
    # The control behind the page's “随机初始化的模型写不出 \boxed{}，奖励全是 0，两步里参数一动不动”:
    # the same two steps from the randomly initialised model (sft_steps=0).
    task = AdditionTask(seed=0, balanced=True)
    problems = task.train[:2]
    path = pretrained.save_tiny_checkpoint(str(tmp_path), task, problems, sft_steps=0)
    trainer = pretrained.build_grpo_trainer(path, problems, num_generations=4, max_steps=2, beta=0.04)  # as the page
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    logs = trainer.state.log_history[:-1]
    assert [log["reward"] for log in logs] == [0.0, 0.0]
    assert [log["frac_reward_zero_std"] for log in logs] == [1.0, 1.0]
    assert all(torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())


def test_sft_on_worked_answers_lowers_the_loss_and_checks_its_input(pretrained, tokenizer):
    problems = AdditionTask(seed=0, balanced=True).train[:2]
    model = pretrained.make_chat_model(tokenizer)
    losses = pretrained.sft_on_worked_answers(model, tokenizer, problems, steps=60)
    assert len(losses) == 60 and losses[-1] < 0.1 * losses[0]
    with pytest.raises(ValueError, match=r"problems 的形状是 \(2,\)"):
        pretrained.sft_on_worked_answers(model, tokenizer, problems[0], steps=1)
    with pytest.raises(ValueError, match="steps"):
        pretrained.sft_on_worked_answers(model, tokenizer, problems, steps=-1)


def test_build_grpo_trainer_checks_its_input(pretrained):
    problems = AdditionTask(seed=0, balanced=True).train[:2]
    with pytest.raises(ValueError, match=r"problems 的形状是 \(2, 2, 1\)"):
        pretrained.build_grpo_trainer("unused", problems[..., None])
    with pytest.raises(ValueError, match="num_generations"):
        pretrained.build_grpo_trainer("unused", problems, num_generations=1)


def test_run_settings_drops_only_the_cpu_and_float32_switches_when_cpu_is_false(pretrained):
    assert pretrained.run_settings(True) == pretrained.CPU_SETTINGS
    gpu = pretrained.run_settings(cpu=False)
    assert "use_cpu" not in gpu and "bf16" not in gpu
    assert gpu == {k: v for k, v in pretrained.CPU_SETTINGS.items() if k not in ("use_cpu", "bf16")}
    assert pretrained.CPU_SETTINGS["use_cpu"] is True  # 不改动共享的字典
    with pytest.raises(ValueError, match="cpu 应是 bool"):
        pretrained.run_settings("no")
    problems = AdditionTask(seed=0, balanced=True).train[:2]
    with pytest.raises(ValueError, match="cpu 应是 bool"):
        pretrained.build_grpo_trainer("unused", problems, cpu=1)
