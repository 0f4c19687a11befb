"""Helpers for the claim tests: the pinned versions, TRL configs with their defaults, library source text."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import re
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements file, names lower-cased with `_` as `-`; a `+local` tag dropped."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", line)
        if match:
            out[match[1].lower().replace("_", "-")] = match[2].split("+")[0]
    return out


LIBS = pins(ROOT / "requirements-libs.txt")
LOCK = pins(ROOT / "requirements-lock.txt")


@functools.cache
def default_config(config_class):
    """A TRL config with every default (TRL's configs pass transformers' deprecated gradient_checkpointing args)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        return config_class(output_dir=tempfile.mkdtemp(prefix="rlhf_toy_claims_"), use_cpu=True, report_to="none")


def trainer_mixed_precision(args) -> str:
    """The mixed precision accelerate actually runs with for these `TrainingArguments` (e.g. `"bf16"` on CPU):
    a plain transformers `Trainer` built on a one-layer Qwen2, nothing trained."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, Trainer

    qwen2 = Qwen2Config(
        vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Trainer(model=Qwen2ForCausalLM(qwen2), args=args).accelerator.mixed_precision


def assert_refuses_cpu_only_machine_without_use_cpu(config_class):
    """On a CPU-only machine TRL's config raises unless `use_cpu=True`; with it, bf16 stays on (pages: “只有 CPU 的机器上，
    默认配置不设 use_cpu=True 就报错；设了之后按 bf16 自动混合精度跑”). Skips where a GPU or MPS device exists."""
    import pytest
    import torch

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("the claim is about a CPU-only machine")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="use_cpu"):
            config_class(output_dir=tempfile.mkdtemp(prefix="rlhf_toy_claims_"), report_to="none")
    assert config(config_class).bf16 is True


def config(config_class, **kwargs):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        return config_class(
            output_dir=tempfile.mkdtemp(prefix="rlhf_toy_claims_"), use_cpu=True, report_to="none", **kwargs
        )


def source(obj) -> str:
    """The source of a class or function, with whitespace runs collapsed (robust to re-wrapping)."""
    return re.sub(r"\s+", " ", inspect.getsource(obj))


def module_source(dotted: str) -> str:
    """The source of a module found without importing it (verl modules that need ray or a GPU stack at import)."""
    spec = importlib.util.find_spec(dotted)
    assert spec is not None and spec.origin, f"{dotted} is not installed"
    return re.sub(r"\s+", " ", Path(spec.origin).read_text(encoding="utf-8"))


def module_exists(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:
        return False
