"""docs/your-run-settings.md: the TRL / verl columns of the recipe table and TRL's batch semantics, against the pins."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from trl import GRPOConfig, GRPOTrainer

from rlhf_toy.studies.recipes import RECIPES

from .pinned import LIBS, config, default_config, source, trainer_mixed_precision


def _package_file(relative: str) -> Path:
    package, _, rest = relative.partition("/")
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / rest


def _cited_line(source_text: str) -> tuple[Path, int]:
    match = re.search(r"((?:trl|verl)/[\w/.]+):(\d+)", source_text)
    assert match, f"no file:line in {source_text!r}"
    return _package_file(match[1]), int(match[2])


def test_the_library_columns_name_the_pinned_versions():
    # your-run-settings.md, recipe table: columns “TRL 1.16 默认” and “verl 0.9.1 默认”.
    assert LIBS["trl"] == "1.16.0" and LIBS["verl"] == "0.9.1"
    for name, version in (("TRL 1.16 默认", "trl 1.16.0"), ("verl 0.9.1 默认", "verl 0.9.1")):
        assert all(cell.source.startswith(version) for cell in RECIPES[name].values())


def test_trl_column_is_grpo_config_defaults():
    # your-run-settings.md, recipe table, column “TRL 1.16 默认” (trl/trainer/grpo_config.py, lines in the cells).
    args, trl = default_config(GRPOConfig), RECIPES["TRL 1.16 默认"]
    assert args.num_generations == trl["num_generations"].value
    assert args.generation_batch_size // args.num_generations == trl["prompts_per_generation"].value
    per_optimizer_step = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
    assert per_optimizer_step // args.num_generations == trl["prompts_per_step"].value
    assert args.learning_rate == trl["learning_rate"].value
    assert args.beta == trl["beta"].value == 0.0
    # the KL term is computed only when beta != 0 (grpo_trainer.py:3098), so the default places it nowhere
    text = source(GRPOTrainer._compute_loss)
    assert text.index("if self.beta != 0.0:") < text.index("per_token_kl = (")
    assert trl["kl_placement"].value.startswith("none")
    assert args.epsilon == trl["epsilon"].value
    assert args.epsilon_high is None  # grpo_trainer.py:946 falls back to epsilon
    assert "self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon" in (
        _package_file("trl/trainer/grpo_trainer.py").read_text(encoding="utf-8")
    )
    assert args.temperature == trl["temperature"].value
    assert args.max_completion_length == trl["max_completion_length"].value
    assert args.num_iterations == trl["num_iterations"].value
    assert args.steps_per_generation == trl["steps_per_generation"].value
    assert args.loss_type == trl["loss_aggregation"].value


def test_trl_cells_cite_the_lines_that_define_them():
    # your-run-settings.md, “出处” box under the recipe table: each TRL cell names file:line of trl 1.16.0.
    for setting, cell in RECIPES["TRL 1.16 默认"].items():
        path, line = _cited_line(cell.source)
        text = path.read_text(encoding="utf-8").splitlines()[line - 1]
        key = {"prompts_per_step": "per_device_train_batch_size", "loss_aggregation": "loss_type"}.get(setting, setting)
        key = {"prompts_per_generation": "generation_batch_size"}.get(setting, key)
        key = {"kl_placement": "if self.beta != 0.0:", "epsilon_high": "epsilon_high"}.get(setting, key)
        key = {"steps_per_generation": "self.steps_per_generation = self.gradient_accumulation_steps"}.get(setting, key)
        assert key in text, f"{setting}: line {line} of {path.name} is {text!r}"


def test_verl_column_is_the_default_config():
    # your-run-settings.md, recipe table, column “verl 0.9.1 默认” (the flattened default config shipped in the wheel).
    cfg = yaml.safe_load(_package_file("verl/trainer/config/_generated_ppo_trainer.yaml").read_text(encoding="utf-8"))
    rollout = yaml.safe_load(_package_file("verl/trainer/config/rollout/rollout.yaml").read_text(encoding="utf-8"))
    actor, verl = cfg["actor_rollout_ref"]["actor"], RECIPES["verl 0.9.1 默认"]
    assert rollout["n"] == verl["num_generations"].value
    assert cfg["data"]["train_batch_size"] == verl["prompts_per_generation"].value
    assert actor["ppo_mini_batch_size"] == verl["prompts_per_step"].value
    assert actor["optim"]["lr"] == verl["learning_rate"].value
    # effective beta is 0: neither the KL loss nor the KL-in-reward is on by default
    assert (actor["use_kl_loss"], cfg["algorithm"]["use_kl_in_reward"]) == (False, False)
    assert verl["beta"].value == f"0（use_kl_loss=false；打开时 {actor['kl_loss_coef']}）"
    assert actor["kl_loss_type"] == "low_var_kl" and verl["kl_placement"].value.startswith("none")
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"]) == (verl["epsilon"].value, verl["epsilon_high"].value)
    assert cfg["actor_rollout_ref"]["rollout"]["temperature"] == verl["temperature"].value
    assert cfg["data"]["max_response_length"] == verl["max_completion_length"].value
    assert actor["ppo_epochs"] == verl["num_iterations"].value
    assert cfg["data"]["train_batch_size"] // actor["ppo_mini_batch_size"] == verl["steps_per_generation"].value
    assert actor["loss_agg_mode"] == verl["loss_aggregation"].value
    assert cfg["algorithm"]["adv_estimator"] == "gae"  # page: GRPO needs algorithm.adv_estimator=grpo
    assert cfg["actor_rollout_ref"]["rollout"]["name"] == "???"  # page: rollout.name has no default (line 293)


def test_verl_cells_cite_the_lines_that_define_them():
    # your-run-settings.md, “出处” box: each verl cell names file:line of verl 0.9.1.
    keys = {"num_generations": "n:", "prompts_per_generation": "train_batch_size",
            "prompts_per_step": "ppo_mini_batch_size", "learning_rate": "lr:", "beta": "use_kl_loss", "kl_placement": "kl_loss_type", "epsilon": "clip_ratio_low",
            "epsilon_high": "clip_ratio_high", "temperature": "temperature", "max_completion_length": "max_response_length",
            "num_iterations": "ppo_epochs", "steps_per_generation": "ppo_mini_batch_size",
            "loss_aggregation": "loss_agg_mode"}  # fmt: skip
    for setting, cell in RECIPES["verl 0.9.1 默认"].items():
        path, line = _cited_line(cell.source)
        text = path.read_text(encoding="utf-8").splitlines()[line - 1]
        assert keys[setting] in text, f"{setting}: line {line} of {path.name} is {text!r}"


def test_per_device_train_batch_size_counts_completions():
    # your-run-settings.md, “TRL 的批”: per_device_train_batch_size counts completions, not prompts; the default
    # 8 with num_generations=8 is one prompt per step on one process (grpo_config.py:1100).
    args = config(GRPOConfig, per_device_train_batch_size=8, num_generations=8)
    assert (args.generation_batch_size, args.steps_per_generation) == (8, 1)
    args = config(GRPOConfig, per_device_train_batch_size=16, num_generations=4)
    assert args.generation_batch_size // args.num_generations == 4


def test_generation_batch_must_divide_by_num_generations():
    # your-run-settings.md, “TRL 的批”: the generation batch must hold whole groups (grpo_config.py:1131).
    with pytest.raises(ValueError, match="must be divisible by num_generations"):
        config(GRPOConfig, per_device_train_batch_size=6, num_generations=4)
    args = config(GRPOConfig, per_device_train_batch_size=6, num_generations=4, steps_per_generation=2)
    assert args.generation_batch_size == 12


def test_steps_per_generation_and_generation_batch_size():
    # your-run-settings.md, “TRL 的批”: generation_batch_size = per_device_train_batch_size × processes ×
    # steps_per_generation; giving one sets the other; giving both is an error (grpo_config.py:1098-1115).
    args = config(GRPOConfig, per_device_train_batch_size=8, num_generations=8, steps_per_generation=4)
    assert args.generation_batch_size == 32
    args = config(GRPOConfig, per_device_train_batch_size=8, num_generations=8, generation_batch_size=64)
    assert args.steps_per_generation == 8
    with pytest.raises(ValueError, match="can not be both configured"):
        config(GRPOConfig, per_device_train_batch_size=8, steps_per_generation=2, generation_batch_size=16)
    with pytest.raises(ValueError, match="must be divisible by the global batch size"):
        config(GRPOConfig, per_device_train_batch_size=8, num_generations=4, generation_batch_size=12)


def test_steps_per_generation_defaults_to_gradient_accumulation_steps():
    # your-run-settings.md, “TRL 的批”: “steps_per_generation 不设时取 gradient_accumulation_steps” (grpo_config.py:1099);
    # the two may also be set together (only steps_per_generation / generation_batch_size exclude each other, :1106).
    args = config(GRPOConfig, per_device_train_batch_size=8, num_generations=8, gradient_accumulation_steps=4)
    assert (args.steps_per_generation, args.generation_batch_size) == (4, 32)
    args = config(
        GRPOConfig,
        per_device_train_batch_size=8,
        num_generations=8,
        steps_per_generation=4,
        gradient_accumulation_steps=2,
    )
    assert (args.steps_per_generation, args.gradient_accumulation_steps, args.generation_batch_size) == (4, 2, 32)


def test_a_generation_is_reused_steps_per_generation_times_num_iterations():
    # your-run-settings.md, “TRL 的批”: TRL generates once every steps_per_generation × num_iterations micro-steps and
    # feeds slice step % steps_per_generation of the buffer (grpo_trainer.py:1538-1546, _prepare_inputs).
    text = source(GRPOTrainer._prepare_inputs)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in text
    assert "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]" in text


def test_fsdp_sharding_strategies_shard_what_the_page_says():
    # your-run-settings.md, footnote on FSDP: FULL_SHARD shards parameters, gradients and optimizer states; SHARD_GRAD_OP
    # shards gradients and optimizer states, parameters only outside computation; NO_SHARD replicates like DDP
    # (torch 2.13.0, torch/distributed/fsdp/api.py:32-53, the ShardingStrategy docstring).
    import inspect

    from torch.distributed.fsdp import ShardingStrategy

    from rlhf_toy.models.memory import FSDP_EQUIVALENT

    doc = re.sub(r"\s+", " ", inspect.getdoc(ShardingStrategy))
    assert "``FULL_SHARD``: Parameters, gradients, and optimizer states are sharded." in doc
    assert "``SHARD_GRAD_OP``: Gradients and optimizer states are sharded during computation" in doc
    assert "parameters are sharded outside computation" in doc
    assert "``NO_SHARD``: Parameters, gradients, and optimizer states are not sharded" in doc
    assert "similar to PyTorch's :class:`DistributedDataParallel`" in doc
    assert set(FSDP_EQUIVALENT) <= set(ShardingStrategy.__members__)


def test_more_steps_per_generation_than_accumulation_means_several_optimizer_steps_per_generation():
    # your-run-settings.md, “TRL 的批”: “steps_per_generation 大于 gradient_accumulation_steps 时，一次生成要走好几个
    # 优化步，后面几步的样本已经是异策略的”. Run for real: chapter 10's tiny Qwen2, steps_per_generation=4, GA=1,
    # 4 optimizer steps → one call of _generate_and_score_completions (grpo_trainer.py:1538-1546), and the batch
    # carries old_per_token_logps, computed only when a generation spans several steps (grpo_trainer.py:2642-2643).
    from rlhf_toy.integrations.trl import make_model, make_tokenizer, prompt_dataset, reward_function
    from rlhf_toy.tasks.addition import AdditionTask

    task = AdditionTask(seed=0)
    args = config(
        GRPOConfig, per_device_train_batch_size=4, num_generations=4, steps_per_generation=4, max_steps=4,
        max_completion_length=4, bf16=False, gradient_checkpointing=False, logging_steps=1, save_strategy="no",
        disable_tqdm=True,
    )  # fmt: skip
    assert args.gradient_accumulation_steps == 1
    trainer = GRPOTrainer(
        model=make_model(), reward_funcs=reward_function(task), args=args,
        train_dataset=prompt_dataset(task.train[:16]), processing_class=make_tokenizer(),
    )  # fmt: skip
    generations, optimizer_steps, batches, prompts = [], [], [], []
    generate = trainer._generate_and_score_completions

    def counting_generate(inputs):
        out = generate(inputs)
        generations.append(len(inputs))
        prompts.append([repr(x["prompt"]) for x in inputs])
        batches.append(out)
        return out

    trainer._generate_and_score_completions = counting_generate
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    trainer.optimizer.register_step_post_hook(lambda *_: optimizer_steps.append(1))
    try:
        trainer.train()
    finally:  # accelerate keeps mixed_precision="no" in a process-wide singleton; later tests build their own
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)
    assert trainer.state.global_step == 4 and len(optimizer_steps) == 4  # four optimizer steps …
    assert generations == [16]  # … on one generation of 16 completions (4 prompts × G = 4):
    # RepeatSampler(mini_repeat_count=G, batch_size=generation_batch_size // G) (grpo_trainer.py:1309-1316): the
    # rows counted by per_device_train_batch_size × steps_per_generation are completions, 4 distinct prompts × G
    assert sorted(Counter(prompts[0]).values()) == [4, 4, 4, 4]
    assert batches[0].get("old_per_token_logps") is not None  # the later steps need the sampling policy's log-probs
    assert "if self.args.gradient_accumulation_steps % generate_every != 0 or (" in source(GRPOTrainer)


def test_trl_loads_the_model_in_fp32_and_runs_bf16_autocast():
    # your-run-settings.md, memory section: “TRL 默认按 fp32 加载模型（trl/trainer/utils.py:1332），bf16=True 是
    # autocast（base_config.py:108）”: the weights are fp32 and are themselves the master copy.
    from trl.trainer.utils import create_model_from_path

    assert 'dtype = kwargs.get("dtype", "float32")' in source(create_model_from_path)
    args = default_config(GRPOConfig)
    assert args.bf16 is True and args.model_init_kwargs is None
    assert trainer_mixed_precision(args) == "bf16"  # accelerate's autocast, the weights stay as loaded


def test_trl_turns_on_gradient_checkpointing_by_default():
    # your-run-settings.md, memory section: “TRL 还默认打开梯度检查点（gradient_checkpointing=True）”
    # (trl 1.16.0, trl/trainer/base_config.py:62-63; GRPOConfig inherits it).
    from trl.trainer.base_config import _BaseConfig

    assert "gradient_checkpointing" not in GRPOConfig.__dict__.get("__annotations__", {})  # not overridden
    assert _BaseConfig.__dataclass_fields__["gradient_checkpointing"].default is True
    assert default_config(GRPOConfig).gradient_checkpointing is True


def test_trl_builds_a_full_reference_model_in_the_policy_dtype_when_beta_is_nonzero():
    # your-run-settings.md: “β > 0 时还要一份参考模型的权重（TRL 默认 fp32，+4Ψ；LoRA 时不需要）”
    # (trl 1.16.0, trl/trainer/grpo_trainer.py:984-1003: None when beta == 0 or PEFT, else create_model_from_path
    # with dtype=self.model.dtype, which is fp32 under the defaults, trl/trainer/utils.py:1332).
    text = source(GRPOTrainer.__init__)
    no_ref = text.index(
        "if self.beta == 0.0: # If beta is 0.0, the reference model is not needed self.ref_model = None"
    )
    peft = text.index("elif is_peft_model(model):", no_ref)
    assert text.index("self.ref_model = None", peft) < text.index("else:", peft)
    dtype = text.index('model_init_kwargs.setdefault("dtype", self.model.dtype)', peft)
    assert dtype < text.index("self.ref_model = create_model_from_path(", peft)


def test_fsdp_has_five_strategies_and_none_shards_only_the_optimizer():
    # your-run-settings.md: “ShardingStrategy 有五种；没有对应 ZeRO-1 的” (torch 2.13.0, torch/distributed/fsdp/api.py:32-66).
    import inspect

    from torch.distributed.fsdp import ShardingStrategy

    assert list(ShardingStrategy.__members__) == [
        "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2",
    ]  # fmt: skip
    doc = re.sub(r"\s+", " ", inspect.getdoc(ShardingStrategy))
    # every strategy that shards anything shards gradients too; none is "optimizer states only" (ZeRO-1)
    assert "Gradients and optimizer states are sharded" in doc and "optimizer states are sharded" in doc
    assert "only optimizer" not in doc.lower()


def test_beta_zero_loads_no_reference_model_and_logs_no_kl():
    # your-run-settings.md, paragraph under “哪些能从玩具带过去” and the β cell of CARRIES_OVER:
    # β = 0 builds no reference model (trl/trainer/grpo_trainer.py:984-986), with peft the adapter is
    # disabled instead of building one (:987-990), and `kl` is logged only when β != 0 (:3267-3268).
    init = source(GRPOTrainer.__init__)
    assert "if self.beta == 0.0: # If beta is 0.0, the reference model is not needed self.ref_model = None" in init
    assert "elif is_peft_model(model): # If PEFT is used, the reference model is not needed" in init
    loss = source(GRPOTrainer._compute_loss)
    assert 'if self.beta != 0.0: self._metrics[mode]["kl"].append(' in loss
    assert loss.count('self._metrics[mode]["kl"]') == 1


def test_trl_points_to_r1_beta():
    # your-run-settings.md: “R1-Zero 取 0.001”; TRL's help text for `beta` says the same (grpo_config.py:681-687),
    # and the recipe table's R1-Zero column holds that value.
    help_text = GRPOConfig.__dataclass_fields__["beta"].metadata["help"]
    assert "DeepSeek-R1" in help_text and "`0.001`" in help_text
    assert RECIPES["DeepSeek-R1-Zero"]["beta"].value == 0.001
    zero = {name for name, recipe in RECIPES.items() if recipe["beta"].value == 0.0}
    assert zero == {"DAPO", "Dr. GRPO", "TRL 1.16 默认"}
