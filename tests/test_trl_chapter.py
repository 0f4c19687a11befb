"""Chapter 10: the chapter-9 task on TRL's own trainers. Real TRL steps (quick mode), one process and two;
the bridge reuses the chapter-9 tokenizer ids and reward; the page's numbers come from a cache that matches the code."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _scripts import load_script

from rlhf_toy.demos.tiny_lm import grpo_config
from rlhf_toy.integrations import trl as trl_bridge  # needs TRL: make test installs it (fails, not skips, without)
from rlhf_toy.tasks.addition import EOS, PAD, AdditionTask, encode

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("trl")  # one worker pays TRL's import once


def _run_trl_script():
    return load_script("run_trl")


def test_tokenizer_gives_the_chapter_9_ids():
    tokenizer = trl_bridge.make_tokenizer()
    task = AdditionTask(seed=0)
    for (a, b), row in zip(task.heldout.tolist(), task.heldout_prompts().tolist(), strict=True):
        ids = tokenizer(f"<bos>{a}+{b}=", add_special_tokens=False)["input_ids"]
        assert ids == [t for t in row if t != PAD]
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)


def test_reward_function_is_chapter_9s_reward():
    task = AdditionTask(seed=0, balanced=True)
    problems = task.draw(64)
    generator = torch.Generator().manual_seed(0)
    completions = torch.randint(3, 13, (64, task.max_completion_length), generator=generator)
    for i, (a, b) in enumerate(problems.tolist()):  # a third exactly right, the rest random digits
        if i % 3 == 0:
            answer = encode(str(a + b)) + [EOS]
            completions[i] = torch.tensor(answer + [PAD] * (task.max_completion_length - len(answer)))
    reward = trl_bridge.reward_function(task)
    a, b = problems.T.tolist()
    unpadded = [[t for t in row if t != PAD] for row in completions.tolist()]  # TRL passes unpadded lists
    got = reward(prompts=None, completions=None, completion_ids=unpadded, a=a, b=b)
    want = task.reward(task.encode_prompts(problems), completions).tolist()
    assert got == want and sum(got) >= 21


def test_grpo_config_maps_field_by_field():
    task = AdditionTask(seed=0)
    ours = grpo_config(quick=True, max_completion_length=task.max_completion_length)
    theirs = trl_bridge.trl_grpo_config(ours, task, output_dir="/tmp/rlhf_toy_test_trl")
    for name in (
        "num_generations",
        "epsilon",
        "epsilon_high",
        "beta",
        "learning_rate",
        "num_iterations",
        "scale_rewards",
        "loss_type",
        "importance_sampling_level",
        "max_completion_length",
    ):
        assert getattr(theirs, name) == getattr(ours, name), name
    assert theirs.max_steps == ours.steps
    assert theirs.per_device_train_batch_size == task.batch_size * ours.num_generations
    assert theirs.use_bias_correction_kl is False  # TRL 1.16 defaults to True; our grpo_loss uses plain k3


def test_grpo_trainer_takes_real_steps_in_one_process():
    from rlhf_toy.demos.trl import run_trl_grpo

    result = run_trl_grpo(quick=True)
    assert result["num_processes"] == 1
    assert len(result["rewards"]) == 3 and all(0.0 <= r <= 1.0 for r in result["rewards"])
    parts = result["seconds_by_part"]
    assert set(parts) == {"生成", "打分", "其余准备", "前向与损失", "反向传播", "其余"}
    assert all(v >= 0 for k, v in parts.items() if k != "其余")


def test_dpo_trainer_takes_real_steps():
    from rlhf_toy.demos.trl import run_trl_dpo

    result = run_trl_dpo(quick=True)
    assert result["pairs"] > 0 and len(result["logs"]) == 3
    assert all("rewards/margins" in log for log in result["logs"])


def test_two_processes_both_take_part_and_end_with_identical_parameters(tmp_path):
    from rlhf_toy.integrations.trl import make_model

    make_model(seed=1).save_pretrained(tmp_path)  # --init-from reaches both processes
    out = subprocess.run(
        [sys.executable, "-m", "rlhf_toy", "trl", "grpo", "--quick", "--processes", "2", "--init-from", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 个进程；热启动模型从目录载入" in out.stdout
    digests = json.loads(out.stdout.split("各进程参数摘要 ")[1].splitlines()[0].replace("'", '"'))
    assert len(digests) == 2 and digests[0] == digests[1]


def test_cache_comes_from_this_code_and_config():
    run_trl = _run_trl_script()
    cache = json.loads((ROOT / "docs" / "data" / "trl.json").read_text(encoding="utf-8"))
    assert cache["config"] == json.loads(json.dumps(run_trl.config()))
    assert cache["code_hash"] == run_trl.code_hash(), "rerun scripts/run_trl.py and commit docs/data/trl.json"
    assert cache["grpo"]["2"]["num_processes"] == 2
    assert len(set(cache["grpo"]["2"]["parameter_digests"])) == 1


def test_unpinned_isa_control_leaves_mkl_on_its_compatible_branch():
    # docs/trl.md labels the cached "unpinned" bf16 control as "only ATen and oneDNN lifted, MKL still COMPATIBLE"
    # and cites the MKL_CBWR=AUTO comparison as measured outside the cache. If UNPINNED_ISA ever lifts MKL too,
    # that wording (and the footnote) must change.
    from rlhf_toy.numerics import numeric_env

    unpinned = _run_trl_script().UNPINNED_ISA
    assert set(unpinned) == {"ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"}
    assert numeric_env()["MKL_CBWR"] == "COMPATIBLE"


# --- claims on docs/trl.md about TRL 1.16.0, verl 0.9.1 and accelerate 1.15.0 ---


def test_config_map_names_real_options():
    # docs/trl.md, "配置对照" table: the TRL and verl columns name options that exist at the pinned versions
    import dataclasses

    from omegaconf import OmegaConf
    from trl import GRPOConfig

    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert {
        "num_generations",
        "scale_rewards",
        "epsilon",
        "epsilon_high",
        "beta",
        "use_bias_correction_kl",
        "loss_type",
        "importance_sampling_level",
        "num_iterations",
        "max_completion_length",
        "learning_rate",
    } <= trl_fields
    assert not {"dynamic_sampling", "filter_groups"} & trl_fields  # "没有对应选项"
    verl = Path(importlib.util.find_spec("verl").origin).parent  # not imported: `import verl` needs ray
    tree = OmegaConf.load(verl / "trainer" / "config" / "_generated_ppo_trainer.yaml")
    for key in (
        "actor_rollout_ref.rollout.n",
        "algorithm.norm_adv_by_std_in_grpo",
        "actor_rollout_ref.actor.clip_ratio_low",
        "actor_rollout_ref.actor.clip_ratio_high",
        "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_coef",
        "actor_rollout_ref.actor.kl_loss_type",
        "actor_rollout_ref.actor.loss_agg_mode",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
        "actor_rollout_ref.actor.ppo_epochs",
        "data.max_response_length",
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.actor.grad_clip",
        "algorithm.filter_groups.enable",
    ):
        assert OmegaConf.select(tree, key, default=KeyError) is not KeyError, key
    assert OmegaConf.select(tree, "actor_rollout_ref.actor.kl_loss_type") == "low_var_kl"
    assert OmegaConf.select(tree, "actor_rollout_ref.actor.grad_clip") == 1.0  # 梯度范数上限 row
    assert OmegaConf.select(tree, "algorithm.adv_estimator") == "gae"  # GRPO needs algorithm.adv_estimator=grpo


def test_trainers_keep_the_default_max_grad_norm():
    # docs/trl.md, 与 TRL 的差异: the TRL trainers limit the global gradient norm to 1.0; the book's loops do not
    from trl import DPOConfig, SFTConfig

    task = AdditionTask(seed=0, balanced=True)
    ours = grpo_config(quick=True, max_completion_length=task.max_completion_length)
    assert trl_bridge.trl_grpo_config(ours, task, output_dir="/tmp/rlhf_toy_test_trl").max_grad_norm == 1.0
    common = {"output_dir": "/tmp/rlhf_toy_test_trl", "use_cpu": True, "report_to": "none"}
    assert SFTConfig(**common).max_grad_norm == 1.0
    assert DPOConfig(**common).max_grad_norm == 1.0


def test_the_bridge_turns_off_trl_bf16_and_gradient_checkpointing_defaults():
    # docs/trl.md, 配置对照: TRL 1.16's three configs change several TrainingArguments defaults: learning_rate,
    # logging_steps, bf16=True (on CPU accelerate then wraps every forward in bf16 autocast) and
    # gradient_checkpointing=True; GRPOConfig also remove_unused_columns. The bridge sets the learning rate and the
    # logging interval explicitly and turns the other two off: the book's runs are float32 like chapter 9.
    import dataclasses
    import inspect

    from transformers import TrainingArguments
    from trl import DPOConfig, GRPOConfig, SFTConfig

    from rlhf_toy.demos import trl as trl_demo

    def changed(config):
        base = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}
        return {f.name for f in dataclasses.fields(config) if f.name in base and f.default != base[f.name]}

    assert changed(GRPOConfig) == {
        "learning_rate",
        "logging_steps",
        "bf16",
        "gradient_checkpointing",
        "remove_unused_columns",
    }
    assert (
        changed(SFTConfig) == changed(DPOConfig) == {"learning_rate", "logging_steps", "bf16", "gradient_checkpointing"}
    )
    assert TrainingArguments.learning_rate == 5e-5
    assert (GRPOConfig.learning_rate, SFTConfig.learning_rate, DPOConfig.learning_rate) == (1e-6, 2e-5, 1e-6)
    common = {"output_dir": "/tmp/rlhf_toy_test_trl", "use_cpu": True, "report_to": "none"}
    for config in (GRPOConfig, SFTConfig, DPOConfig):
        default = config(**common)
        assert default.bf16 is True and default.gradient_checkpointing is True, config.__name__
    task = AdditionTask(seed=0, balanced=True)
    ours = grpo_config(quick=True, max_completion_length=task.max_completion_length)
    args = trl_bridge.trl_grpo_config(ours, task, output_dir="/tmp/rlhf_toy_test_trl")
    assert args.bf16 is False and args.gradient_checkpointing is False
    assert args.learning_rate == ours.learning_rate and args.logging_steps == 1
    assert args.mixed_precision == "no"  # what transformers hands to accelerate (bf16 would give "bf16")
    # the SFT warm start and the DPO run pass the same two settings (their configs are built inside the demos)
    for function in (trl_demo.sft_warm_start, trl_demo.run_trl_dpo):
        source = inspect.getsource(function)
        assert "bf16=False" in source and "gradient_checkpointing=False" in source, function.__name__
        assert "learning_rate=" in source and "logging_steps=" in source, function.__name__


def test_bridge_optimizer_is_fused_adamw_equal_to_chapter_9_adam():
    # docs/trl.md, 一个进程 (梯度范数): TRL's optimizer is torch's fused AdamW (optim="adamw_torch_fused") with the same
    # betas and eps as chapter 9's fused Adam; with weight decay 0 (Trainer.create_optimizer puts args.weight_decay in
    # the parameter groups) three steps of each give the same parameters
    from transformers import Trainer

    from rlhf_toy.train.grpo import train_grpo

    task = AdditionTask(seed=0, balanced=True)
    ours = grpo_config(quick=True, max_completion_length=task.max_completion_length)
    args = trl_bridge.trl_grpo_config(ours, task, output_dir="/tmp/rlhf_toy_test_trl")
    assert args.optim == "adamw_torch_fused" and args.weight_decay == 0.0
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    assert cls is torch.optim.AdamW and kwargs["fused"] is True
    assert kwargs["betas"] == (0.9, 0.999) and kwargs["eps"] == 1e-8
    import inspect

    assert "torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)" in inspect.getsource(train_grpo)
    assert '"weight_decay": self.args.weight_decay,' in inspect.getsource(Trainer.create_optimizer)
    default = torch.optim.Adam([torch.zeros(1)]).defaults
    assert default["betas"] == (0.9, 0.999) and default["eps"] == 1e-8
    torch.manual_seed(0)
    start, grads = torch.randn(50), [torch.randn(50) for _ in range(3)]
    results = []
    for make in (
        lambda p: torch.optim.Adam([p], lr=0.1, fused=True),
        lambda p: cls([{"params": [p], "weight_decay": args.weight_decay}], **{**kwargs, "lr": 0.1}),
    ):
        p = start.clone().requires_grad_()
        optimizer = make(p)
        for g in grads:
            p.grad = g.clone()
            optimizer.step()
        results.append(p.detach())
    assert torch.equal(results[0], results[1])


def test_grpo_trainer_generates_with_transformers_and_patches_a_fused_head():
    # docs/trl.md, 一步的时间花在哪: without vLLM, GRPOTrainer generates with the model's own `generate`, and it patches
    # the model with TRL's fused LM head that also computes the entropy
    import inspect

    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer)
    assert "prompt_completion_ids = unwrapped_model.generate(" in source
    assert "add_fused_lm_head(" in source and 'outputs=("log_probs", "entropy"),' in source


def test_bf16_on_cpu_wraps_every_forward_in_autocast(tmp_path):
    # docs/trl.md, 与 TRL 的差异 (bf16): with TRL's default bf16=True, accelerate on CPU turns on native AMP and
    # wraps the model's forward in a bf16 autocast context. Run in a subprocess: AcceleratorState is a singleton.
    script = tmp_path / "amp.py"
    script.write_text(
        "import torch\n"
        "from accelerate import Accelerator\n"
        "accelerator = Accelerator(cpu=True, mixed_precision='bf16')\n"
        "model = accelerator.prepare(torch.nn.Linear(4, 4))\n"
        "print('native_amp', accelerator.native_amp, 'wrapped', hasattr(model, '_original_forward'))\n",
        encoding="utf-8",
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=True)
    assert "native_amp True wrapped True" in out.stdout


def test_launcher_mixed_precision_flag_is_only_an_environment_default(monkeypatch):
    # docs/trl.md, 两个进程: `accelerate launch --mixed_precision no` only exports ACCELERATE_MIXED_PRECISION=no;
    # TrainingArguments reads it and then lets the config's bf16 (TRL default True) override it
    import inspect

    from accelerate.utils import launch
    from trl import GRPOConfig

    assert 'current_env["ACCELERATE_MIXED_PRECISION"] = str(mixed_precision)' in inspect.getsource(launch)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    assert GRPOConfig(output_dir="/tmp/rlhf_toy_test_trl", use_cpu=True, report_to="none").mixed_precision == "bf16"
    task = AdditionTask(seed=0, balanced=True)
    ours = grpo_config(quick=True, max_completion_length=task.max_completion_length)
    assert trl_bridge.trl_grpo_config(ours, task, output_dir="/tmp/rlhf_toy_test_trl").mixed_precision == "no"


def test_grpo_generates_once_per_steps_per_generation_and_hands_out_slices():
    # docs/trl.md, 两个进程 (各自一半的批): GRPOTrainer generates every steps_per_generation x num_iterations
    # micro-steps, shuffles the generation batch, splits it into steps_per_generation slices and uses one per step
    import inspect

    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._prepare_inputs)
    for line in (
        "generate_every = self.args.steps_per_generation * self.num_iterations",
        "generation_batch = shuffle_sequence_dict(generation_batch)",
        "split_tensor_dict(generation_batch, self.args.steps_per_generation)",
        "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]",
    ):
        assert line in source, line


def test_dpo_log_values_are_window_means_of_summed_logps():
    # docs/trl.md, 一个进程 (DPO 日志): loss and the DPO metrics in a log entry are means over the steps since the
    # previous log (grad_norm is the last step's); logps/* is the completion's summed log-probability, batch-averaged
    import inspect

    from transformers import Trainer
    from trl import DPOTrainer

    assert "metrics = {key: sum(val) / len(val) for key, val in self._metrics[mode].items()}" in inspect.getsource(
        DPOTrainer.log
    )
    assert 'logs["loss"] = tr_loss_scalar / (self.state.global_step - self._globalstep_last_logged)' in (
        inspect.getsource(Trainer)
    )
    source = inspect.getsource(DPOTrainer)
    assert "logps = per_token_logps.sum(dim=1)  # sum over sequence length" in source
    # rewards/chosen is beta times the change of the chosen answers' log-probability relative to the reference model
    assert "chosen_logratios = chosen_logps - ref_chosen_logps" in source
    assert "chosen_rewards = self.beta * chosen_logratios.detach()" in source
    assert 'self._metrics[mode]["rewards/chosen"].append(agg_chosen_rewards.mean().item())' in source
    assert 'self._metrics[mode]["logps/chosen"].append(self.accelerator.gather(chosen_logps).mean().item())' in source


def test_vllm_options_and_defaults():
    # docs/trl.md, "规模变大后什么会变": use_vllm off by default, colocate mode, IS correction on, sequence_mask
    from trl import GRPOConfig

    config = GRPOConfig(output_dir="/tmp/rlhf_toy_test_trl", use_cpu=True, report_to="none")
    assert (config.use_vllm, config.vllm_mode) == (False, "colocate")
    assert config.vllm_importance_sampling_correction is True
    assert config.vllm_importance_sampling_mode == "sequence_mask"
    assert config.vllm_importance_sampling_clip_max == 3.0
    doc = GRPOConfig.__doc__
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        assert f'`"{mode}"`' in doc, mode
    from trl import SFTConfig
    from trl.experimental.async_grpo import AsyncGRPOConfig  # noqa: F401  ("trl.experimental.async_grpo")

    sft = SFTConfig(output_dir="/tmp/rlhf_toy_test_trl", use_cpu=True, report_to="none")
    assert (sft.packing, sft.padding_free) == (False, False)
    configs = Path(importlib.util.find_spec("trl").origin).parent / "accelerate_configs"
    assert {"zero1.yaml", "zero2.yaml", "zero3.yaml", "fsdp1.yaml", "fsdp2.yaml"} <= {p.name for p in configs.iterdir()}


def test_grpo_refuses_a_batch_that_splits_a_group():
    # docs/trl.md, 常见错误: per_device_train_batch_size x processes must be a multiple of num_generations
    from trl import GRPOConfig

    # x steps_per_generation (defaults to gradient_accumulation_steps)
    with pytest.raises(ValueError, match=r"must be divisible by num_generations"):
        GRPOConfig(
            output_dir="/tmp/rlhf_toy_test_trl",
            use_cpu=True,
            report_to="none",
            per_device_train_batch_size=6,
            num_generations=4,
        )
    config = GRPOConfig(
        output_dir="/tmp/rlhf_toy_test_trl",
        use_cpu=True,
        report_to="none",
        per_device_train_batch_size=6,
        num_generations=4,
        gradient_accumulation_steps=2,
    )
    assert (config.steps_per_generation, config.generation_batch_size) == (2, 12)


def test_rewards_are_gathered_and_completions_decoded_without_special_tokens():
    # docs/trl.md: rewards of all processes are gathered before group advantages; completions text drops EOS
    import inspect

    from trl import GRPOTrainer

    assert "rewards_per_func = gather(rewards_per_func)" in inspect.getsource(GRPOTrainer._calculate_rewards)
    assert "batch_decode(completion_ids, skip_special_tokens=True)" in inspect.getsource(GRPOTrainer._generate)


def test_dpo_appends_eos():
    # docs/trl.md, 与 TRL 的差异: DPOTrainer appends EOS to chosen/rejected that do not end with it
    import inspect

    from trl import DPOTrainer

    source = inspect.getsource(DPOTrainer)
    assert 'example["chosen"] = example["chosen"] + eos_token' in source
    assert 'example["rejected"] = example["rejected"] + eos_token' in source


def test_cpu_flag_starts_one_process(tmp_path):
    # docs/trl.md, 两个进程: `accelerate launch --num_processes 2 --cpu` starts ONE process, silently
    script = tmp_path / "world.py"
    script.write_text("import os; print('WORLD_SIZE', os.environ.get('WORLD_SIZE'))\n", encoding="utf-8")
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    out = subprocess.run(
        [accelerate, "launch", "--num_processes", "2", "--cpu", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert out.count("WORLD_SIZE") == 1 and "WORLD_SIZE None" in out  # the launcher does not set WORLD_SIZE


def test_launcher_options_exist():
    # docs/trl.md: the multi-GPU / multi-node options of accelerate launch
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    help_text = subprocess.run([accelerate, "launch", "--help"], capture_output=True, text=True, check=True).stdout
    for option in (
        "--multi_gpu",
        "--num_processes",
        "--num_machines",
        "--machine_rank",
        "--main_process_ip",
        "--main_process_port",
        "--config_file",
        "--module",
    ):
        assert option in help_text, option


def test_timing_prose_follows_the_cached_measurements():
    """trl.md states the timing results in words, not numbers (the numbers are printed by its blocks from
    docs/data/trl.json); these are the words, checked against the cache so a rerun that contradicts them fails."""
    cache = json.loads((ROOT / "docs" / "data" / "trl.json").read_text(encoding="utf-8"))
    one, two = cache["grpo"]["1"]["seconds_by_part"], cache["grpo"]["2"]["seconds_by_part"]
    total = sum(one.values())
    # “一步里占大头的是生成、前向与反向传播；打分……只占一两个百分点”；“生成不到一步的三分之一”
    assert (one["生成"] + one["前向与损失"] + one["反向传播"]) / total > 0.8
    assert one["打分"] / total < 0.03 and one["生成"] / total < 1 / 3
    # “其余准备在 2 个进程时比 1 个进程时多”
    assert two["其余准备"] > one["其余准备"]
    m = cache["speed_control"]["means"]
    # “TRL 的默认设置比本章的设置慢约三倍。只开 bf16 时慢两倍多，只开梯度检查点时只慢一点”
    assert 2.5 < m["trl_defaults"] / m["trl_float32"] < 3.5
    assert 2.0 < m["trl_bf16_only"] / m["trl_float32"] < 3.0
    assert 1.0 < m["trl_checkpointing_only"] / m["trl_float32"] < 1.5
    # “差距里最大的一块是两个模型的前向加反向传播之差，按平均数与中位数都接近一半”
    for key in ("means", "seconds"):
        s = cache["speed_control"][key]
        gap = s["trl_float32"] - s["ours"]
        blocks = {
            "model": s["qwen2_forward_backward"] - s["ours_forward_backward"],
            "head": s["qwen2_fused_head_forward_backward"] - s["qwen2_forward_backward"],
            "generate": s["qwen2_generate"] - s["ours_sample"],
        }
        blocks["rest"] = gap - sum(blocks.values())
        assert max(blocks, key=blocks.get) == "model" and 0.35 < blocks["model"] / gap < 0.6
    # “bf16 的前向加反向传播比 float32 慢得多；只放开 ATen 与 oneDNN 之后，bf16 反而用时更少”
    isa = cache["bf16_isa"]
    assert isa["pinned"]["bf16"] / isa["pinned"]["float32"] > 2
    assert isa["unpinned"]["bf16"] / isa["unpinned"]["float32"] < 1
    # “2 个进程每步比 1 个进程快，但远没有快一倍……离 2 很远”；“测量时机器几乎空闲”；
    # “每个进程的生成、前向与损失、反向传播，都没有减到 1 个进程时的一半”
    control = cache["process_control"]
    assert 1.0 < control["means"]["1"] / control["means"]["2"] < 1.6
    assert max(control["loadavg_before"][0], control["loadavg_after"][0]) < 2.5
    for part in ("生成", "前向与损失", "反向传播"):
        assert two[part] > one[part] / 2
