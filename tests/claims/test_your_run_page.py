"""docs/your-run.md: what the page says about TRL 1.16, transformers 5.24 and peft 0.21, checked against them."""

from __future__ import annotations

import inspect
import tempfile

import peft
import pytest
import torch
from peft import get_peft_model
from trl import GRPOConfig, GRPOTrainer
from trl.data_utils import is_conversational
from trl.trainer.utils import use_adapter

from rlhf_toy.integrations import chat
from rlhf_toy.integrations.lora import lora_config
from rlhf_toy.integrations.trl import make_model, make_tokenizer, prompt_dataset, reward_function
from rlhf_toy.tasks.addition import AdditionTask

from .pinned import LIBS, source

pytestmark = pytest.mark.xdist_group("trl")


def _args(**kw):
    return GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="rlhf_toy_claims_"),
        use_cpu=True,
        report_to="none",
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        bf16=False,
        gradient_checkpointing=False,
        **kw,
    )


def test_peft_is_the_pinned_version():
    # your-run.md: “本章描述的版本是 TRL 1.16.0、transformers 5.24.0、tokenizers 0.23.3、peft 0.21.2（见首页）”
    assert peft.__version__ == LIBS["peft"] == "0.21.2"


def test_a_conversational_prompt_is_rendered_with_the_generation_prompt():
    # your-run.md: “数据集的 prompt 列是消息列表时，TRL 认出它是对话格式（is_conversational，trl/data_utils.py:126），
    # 生成前用分词器的模板渲染，add_generation_prompt=True（grpo_trainer.py:1686, 1737-1745）”
    task = AdditionTask(seed=0, balanced=True)
    tokenizer = chat.train_chat_tokenizer(task.train[:2000])
    data = chat.chat_prompt_dataset(task.train[:4])
    assert is_conversational(data[0])
    assert "add_generation_prompt=True" in source(GRPOTrainer._tokenize_prompts)
    trainer = GRPOTrainer(
        model=_chat_model(tokenizer),
        reward_funcs=chat.chat_reward,
        args=_args(),
        train_dataset=data,
        processing_class=tokenizer,
    )
    prompts = [row["prompt"] for row in data]
    prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
    for ids, messages in zip(prompt_ids, prompts, strict=True):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    # the stop tokens: generation_config's EOS ids plus the tokenizer's EOS (grpo_trainer.py:409-416)
    assert tokenizer.eos_token_id in trainer.eos_token_ids
    init = source(GRPOTrainer.__init__)
    assert "eos_token_ids = model.generation_config.eos_token_id" in init
    assert "eos_token_ids = [self._tokenizer.eos_token_id, *eos_token_ids]" in init


def test_conversational_completions_reach_the_reward_as_assistant_messages():
    # your-run.md: “对话格式时，奖励函数收到的每条 completions 是 [{"role": "assistant", "content": 文本}]，
    # 文本解码时去掉特殊 token（grpo_trainer.py:2229-2247）”; tiny-lm.md, “换成 TRL 与你的模型”: “prompt 列是消息列表
    # （对话格式）时，completions 里每条回答也是消息列表：[{"role": "assistant", "content": 文本}]”
    text = source(GRPOTrainer._generate)
    assert 'completions = [[{"role": "assistant", "content": content}] for content in contents]' in text
    assert "contents = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)" in text


def test_one_real_step_hands_the_reward_conversations_in_and_assistant_messages_out():
    # your-run.md: the same two sentences, run for real: one GRPOTrainer step on the conversational dataset
    task = AdditionTask(seed=0, balanced=True)
    tokenizer = chat.train_chat_tokenizer(task.train[:2000])
    seen = {}

    def recording_reward(prompts, completions, **kwargs):
        seen.update(prompts=prompts, completions=completions)
        return chat.chat_reward(completions, **kwargs)

    trainer = GRPOTrainer(
        model=_chat_model(tokenizer),
        reward_funcs=recording_reward,
        args=_args(max_steps=1, logging_steps=1, disable_tqdm=True, save_strategy="no"),
        train_dataset=chat.chat_prompt_dataset(task.train[:4]),
        processing_class=tokenizer,
    )
    trainer.train()
    conversations = [chat.conversation(a, b) for a, b in task.train[:4].tolist()]
    assert len(seen["prompts"]) == 4 and all(p in conversations for p in seen["prompts"])  # the messages, unrendered
    assert all(
        isinstance(c, list) and len(c) == 1 and c[0]["role"] == "assistant" and isinstance(c[0]["content"], str)
        for c in seen["completions"]
    )
    assert all("<|im_end|>" not in c[0]["content"] for c in seen["completions"])  # special tokens are dropped


def test_completion_mask_ends_at_the_first_stop_token():
    # your-run.md: “TRL 的 completion_mask 到第一个 EOS（含）为止”（grpo_trainer.py:1881-1885）
    text = source(GRPOTrainer._generate_single_turn)
    assert "is_eos = torch.isin(completion_ids, torch.tensor(self.eos_token_ids, device=device))" in text
    assert "completion_mask = (sequence_indices <= eos_idx.unsqueeze(1)).int()" in text


def _chat_model(tokenizer):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def test_with_a_lora_config_there_is_no_reference_copy_and_the_reference_is_the_adapter_disabled():
    # your-run.md: “给了 peft_config，TRL 用 get_peft_model 包模型（grpo_trainer.py:476），不另建参考模型
    # （ref_model = None，grpo_trainer.py:987-990）；β > 0 时参考的对数概率在 use_adapter(model, None) 里算，
    # 即 model.disable_adapter()（grpo_trainer.py:2724-2728，trainer/utils.py:1442-1444）”
    task = AdditionTask(seed=0, balanced=True, batch_size=1)
    base = make_model(seed=0)
    base_copy = make_model(seed=0)
    trainer = GRPOTrainer(
        model=base,
        reward_funcs=reward_function(task),
        args=_args(beta=0.04),
        train_dataset=prompt_dataset(task.train[:4]),
        processing_class=make_tokenizer(),
        peft_config=lora_config(),
    )
    assert trainer.ref_model is None
    assert isinstance(trainer.model, peft.PeftModel)
    assert "ref" not in trainer.model.peft_config  # a fresh adapter: no "ref" copy (that is for a pretrained one)
    assert 'with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):' in source(
        GRPOTrainer._generate_and_score_completions
    )
    assert "with model.disable_adapter():" in source(use_adapter)
    model = trainer.model
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)  # as after some training
        ids = torch.randint(3, 16, (2, 7), generator=torch.Generator().manual_seed(0))
        with use_adapter(model, None):
            ref = model(input_ids=ids).logits
        assert torch.equal(ref, base_copy(input_ids=ids).logits)  # the frozen base, bit for bit
        assert not torch.allclose(model(input_ids=ids).logits, ref)


def test_full_fine_tuning_with_beta_builds_the_reference_from_the_model_path():
    # your-run.md: “全参数微调且 β > 0 时，TRL 按模型配置里的名字或路径再载入一份参考模型
    # （create_model_from_path(get_config_model_id(...))，grpo_trainer.py:991-1003）”
    text = source(GRPOTrainer.__init__)
    assert (
        "self.ref_model = create_model_from_path(get_config_model_id(self.model.config), **model_init_kwargs)" in text
    )


def test_peft_wraps_with_get_peft_model():
    # your-run.md: “把它交给 GRPOTrainer(peft_config=...)，TRL 用 get_peft_model 把模型包起来”（grpo_trainer.py:476）
    text = source(GRPOTrainer.__init__)
    assert "model = get_peft_model(model, peft_config, **get_peft_model_kwargs)" in text
    assert inspect.isfunction(get_peft_model)


def test_a_pretrained_adapter_gets_a_ref_copy_when_beta_is_positive():
    # your-run.md, box “已经训练过的适配器”: a PeftModel passed in with beta > 0 gets a copy of its adapter named
    # "ref", used as the reference (grpo_trainer.py:478-507)
    text = source(GRPOTrainer.__init__)
    assert "elif is_peft_model(model) and args.beta != 0.0:" in text
    assert 'model.add_adapter("ref", default_config)' in text


def test_peft_starts_with_b_zero_and_a_random_so_the_adapter_changes_nothing():
    # your-run.md: “A 随机初始化，B 初始化为 0，所以刚装上适配器时 BA = 0，模型与原模型完全相同”
    # (peft 0.21.2 tuners/lora/layer.py:335-343, LoraLayer.reset_lora_parameters with init_lora_weights=True:
    # kaiming-uniform A, zero B)
    model = get_peft_model(make_model(seed=0), lora_config())
    a = [p for n, p in model.named_parameters() if "lora_A" in n]
    b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert len(a) == len(b) == 14
    assert all(torch.count_nonzero(p) == 0 for p in b)
    assert all(torch.count_nonzero(p) == p.numel() for p in a)
    ids = torch.tensor([[1, 5, 6, 13, 8, 11, 14]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, make_model(seed=0)(input_ids=ids).logits)


def test_full_fine_tuning_with_beta_fails_for_a_model_built_in_memory():
    # your-run.md, box “本章的 LoRA 运行”: the in-memory model has no path in its config, so with beta > 0 and no
    # peft_config GRPOTrainer cannot build the reference model (it raises OSError); with peft_config it can.
    task = AdditionTask(seed=0, balanced=True, batch_size=1)
    model = make_model(seed=0)
    assert model.config._name_or_path == ""
    with pytest.raises(OSError):
        GRPOTrainer(
            model=model,
            reward_funcs=reward_function(task),
            args=_args(beta=0.04),
            train_dataset=prompt_dataset(task.train[:4]),
            processing_class=make_tokenizer(),
        )


def test_completions_are_parsed_when_the_tokenizer_has_a_response_template():
    # your-run.md: “分词器带 response_template（或 response_schema），或给了 tools 时，TRL 改用 parse_response 解析回答，
    # 消息里可能还有 tool_calls 等字段”（grpo_trainer.py:2229-2247, _generate; tools set a response template via
    # add_response_schema, grpo_trainer.py:760-766）. The chapter's tokenizer has neither, so it takes the decode branch.
    text = source(GRPOTrainer._generate)
    assert 'getattr(self._tokenizer, "response_template", None) is not None' in text
    assert 'getattr(self._tokenizer, "response_schema", None) is not None' in text
    assert "[parse_response(self._tokenizer, ids, prefix=prompt_ids[i], tools=per_prompt_tools[i])]" in text
    assert "processing_class = add_response_schema(processing_class)" in source(GRPOTrainer.__init__)
    tokenizer = chat.train_chat_tokenizer(AdditionTask(seed=0, balanced=True).train[:200])
    assert getattr(tokenizer, "response_template", None) is None
    assert getattr(tokenizer, "response_schema", None) is None


def test_string_prompts_are_tokenized_as_they_are_without_a_generation_prompt():
    # your-run.md, “漏了生成提示”: only a conversational prompt gets add_generation_prompt=True
    # (grpo_trainer.py:1737-1746); a prompt passed as a string is tokenized as it is (grpo_trainer.py:1757)
    text = source(GRPOTrainer._tokenize_prompts)
    assert "add_generation_prompt=True" in text
    assert 'prompt_ids = self.processing_class(text=prompts)["input_ids"]' in text


def test_the_full_fine_tuning_reference_is_reloaded_from_the_path_not_copied_from_the_object():
    # your-run.md, box “本章的 LoRA 运行”: the reference is re-loaded from config._name_or_path
    # (grpo_trainer.py:991-1003; trl/trainer/utils.py:1384-1396, get_config_model_id); a model changed in memory
    # after loading gets the old weights as its reference, with no error.
    from transformers import Qwen2ForCausalLM

    task = AdditionTask(seed=0, balanced=True, batch_size=1)
    path = tempfile.mkdtemp(prefix="rlhf_toy_claims_ref_")
    make_model(seed=0).save_pretrained(path)
    model = Qwen2ForCausalLM.from_pretrained(path)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)  # "trained in memory", not saved
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_function(task),
        args=_args(beta=0.04),
        train_dataset=prompt_dataset(task.train[:4]),
        processing_class=make_tokenizer(),
    )
    ids = torch.tensor([[1, 5, 6, 13, 8, 11, 14]])
    with torch.no_grad():
        ref = trainer.ref_model(input_ids=ids).logits
        assert not torch.allclose(ref, trainer.model(input_ids=ids).logits)
        assert torch.equal(ref, Qwen2ForCausalLM.from_pretrained(path)(input_ids=ids).logits)


def test_sft_on_messages_trains_on_every_token_unless_assistant_only_loss():
    # your-run.md: “对话格式的 messages 数据集默认在整段上算损失；要只算助手的回答，得设 assistant_only_loss=True，
    # 模板里要有 {% generation %} 标记；常见模型的模板 TRL 换上自带的训练模板，不认识的模板报 ValueError”
    # (trl 1.16 sft_config.py:97-106 and 261-273, defaults; sft_trainer.py:939-942; chat_template_utils.py:1077-1250,
    # get_training_chat_template raises ValueError for a template it does not know)
    from trl import SFTConfig, SFTTrainer
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    config = SFTConfig(output_dir=tempfile.mkdtemp(prefix="rlhf_toy_claims_sft_"), use_cpu=True, report_to="none")
    assert config.assistant_only_loss is False
    assert config.completion_only_loss is None
    assert "self.chat_template = get_training_chat_template(processing_class)" in source(SFTTrainer.__init__)
    tokenizer = chat.train_chat_tokenizer(AdditionTask(seed=0, balanced=True).train[:200])
    assert not has_generation_markers(tokenizer.chat_template)
    with pytest.raises(ValueError):
        get_training_chat_template(tokenizer)


def test_a_bare_lora_config_adapts_only_q_and_v_with_alpha_8_on_qwen2():
    # your-run.md: “不写 target_modules 时，peft 0.21.2 对 Qwen2、Qwen3 只挂 q_proj、v_proj，lora_alpha 默认 8”
    # (peft tuners/lora/config.py:632, 652-653; utils/constants.py:103-104)
    from peft import LoraConfig

    model = get_peft_model(make_model(seed=0), LoraConfig(task_type="CAUSAL_LM"))
    config = model.peft_config["default"]
    assert sorted(config.target_modules) == ["q_proj", "v_proj"]
    assert (config.r, config.lora_alpha, config.lora_dropout) == (8, 8, 0.0)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 3_072
    ours = get_peft_model(make_model(seed=0), lora_config())
    assert sum(p.numel() for p in ours.parameters() if p.requires_grad) == 17_664


def test_the_lora_and_full_runs_inherit_max_grad_norm_1():
    # your-run.md, 同样的预算：“梯度范数的上限也都是 transformers 默认的 `max_grad_norm=1.0`”
    # (transformers 5.24 training_args.py: max_grad_norm: float = field(default=1.0, ...); GRPOConfig does not override it)
    from trl import GRPOConfig

    assert GRPOConfig(output_dir="/tmp/unused", report_to=[], use_cpu=True, bf16=False).max_grad_norm == 1.0


def test_the_logged_keys_the_end_to_end_run_prints():
    # your-run.md, “把它们放在一起” (the list under the run): frac_reward_zero_std is the fraction of groups whose
    # rewards have std 0 (grpo_trainer.py:2788, 2830); kl is logged only when beta != 0 (:3267-3268); with one
    # optimizer step per generation the old log-probs are the current ones, detached, so the ratio is 1 and
    # clip_ratio/region_mean is 0 (:3065-3066, :3276-3279); completions/clipped_ratio is the fraction whose last
    # token is neither a stop token nor padding (:2302-2304).
    score = source(GRPOTrainer._generate_and_score_completions)
    assert "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))" in score
    assert 'self._metrics[mode]["frac_reward_zero_std"].append(is_std_zero.float().mean().item())' in score
    generate = source(GRPOTrainer._generate)  # grpo_trainer.py:2193
    assert (
        'self._metrics[mode]["completions/mean_length"].append(agg_completion_lengths.float().mean().item())'
        in generate
    )
    assert (
        "is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids], device=device)" in generate
    )
    assert 'self._metrics[mode]["completions/clipped_ratio"].append(agg_is_truncated.float().mean().item())' in generate
    loss = source(GRPOTrainer._compute_loss)
    assert 'if self.beta != 0.0: self._metrics[mode]["kl"].append(global_masked_mean(per_token_kl))' in loss
    assert (
        "old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps" in loss
    )
    assert "is_region_clipped = is_low_clipped | is_high_clipped" in loss
    # With num_iterations=1 and steps_per_generation=1 (the run's settings) TRL stores no old log-probs.
    args = _args(max_steps=2)
    assert (args.num_iterations, args.steps_per_generation) == (1, 1)


def test_a_qwen2_directory_reloads_the_tokenizer_as_qwen2_tokenizer(tmp_path):
    # your-run.md, box “存下再载入，分词器换了预分词”: transformers 5.24.0's AutoTokenizer ignores the saved
    # tokenizer_class for model_type qwen2 (models/auto/tokenization_auto.py:392-424, qwen2 in
    # MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS; :864-899 picks the registered class) and Qwen2Tokenizer rebuilds the
    # pre-tokenizer with Qwen2's regex, one digit per piece (models/qwen2/tokenization_qwen2.py:33, 75-86);
    # vocabulary, merges and chat template are kept.
    from transformers import AutoTokenizer
    from transformers.models.auto import tokenization_auto
    from transformers.models.qwen2 import tokenization_qwen2

    assert "qwen2" in tokenization_auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
    assert r"|\p{N}|" in tokenization_qwen2.PRETOKENIZE_REGEX
    from rlhf_toy.integrations.pretrained import make_chat_model

    tokenizer = chat.train_chat_tokenizer(AdditionTask(seed=0, balanced=True).train[:2000])
    tokenizer.save_pretrained(tmp_path)
    assert type(AutoTokenizer.from_pretrained(tmp_path)).__name__ == "TokenizersBackend"  # no config.json: kept
    make_chat_model(tokenizer).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded).__name__ == "Qwen2Tokenizer"
    assert loaded.get_vocab() == tokenizer.get_vocab() and loaded.chat_template == tokenizer.chat_template
    assert tokenizer.tokenize(" 81") == ["Ġ81"] and loaded.tokenize(" 81") == ["Ġ", "8", "1"]
