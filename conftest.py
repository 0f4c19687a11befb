"""Repository-level pytest configuration.

pytest-codeblocks reads raw Markdown, so a ```python block whose body is a
`--8<-- "src/rlhf_toy/...:section"` include would be executed as that literal line. Here every
Markdown file is first run through pymdownx.snippets with the same options as mkdocs.yml, so the
tests execute the code a reader sees on the page. (The page shows it without its multi-line docstrings,
hooks/listings.py; the tests execute the whole section, docstrings included.)
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import markdown
import pytest
import pytest_codeblocks.plugin as codeblocks_plugin
import torch
from pytest_codeblocks.main import extract_from_buffer

# Pages print numbers to the last digit and the tests compare them: importing rlhf_toy pins ATen's, MKL's and
# oneDNN's instruction sets and the thread count (src/rlhf_toy/numerics.env) before any tensor is computed
# (torch reads them at first use, not at import). The Makefile exports the same settings, so notebook kernels
# and subprocesses inherit them.
import rlhf_toy  # noqa: F401  (imported for this side effect)

ROOT = Path(__file__).parent

# The book's tensors are tiny: one intra-op thread is faster than two threads fighting over two cores,
# and results do not depend on it (the seed-parity test passes either way).
torch.set_num_threads(1)


def expand_snippets(text: str) -> str:
    """Return `text` with every `--8<--` include replaced by the included source."""
    md = markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={
            "pymdownx.snippets": {"base_path": [str(ROOT)], "check_paths": True, "dedent_subsections": True}
        },
    )
    return "\n".join(md.preprocessors["snippet"].run(text.split("\n")))


def _extract_expanded(f, encoding="utf-8", *args, **kwargs):
    text = Path(f).read_text(encoding=encoding)
    return extract_from_buffer(io.StringIO(expand_snippets(text)), *args, **kwargs)


codeblocks_plugin.extract_from_file = _extract_expanded


def pytest_runtest_setup(item):
    """Committed notebooks show the full run; CI re-executes them in their short version.

    nbmake starts a fresh kernel per notebook, which inherits this process's environment, so
    DQN_QUICK=1 (the seed notebook's switch) is set for notebook items only. A notebook reads it
    as `QUICK = os.environ.get("DQN_QUICK", "") not in ("", "0")`.
    """
    if item.path.suffix == ".ipynb":
        item.stash[_QUICK_BEFORE] = os.environ.get("DQN_QUICK")
        os.environ["DQN_QUICK"] = "1"


def pytest_runtest_teardown(item):
    if item.path.suffix == ".ipynb":
        before = item.stash.get(_QUICK_BEFORE, None)
        if before is None:
            os.environ.pop("DQN_QUICK", None)
        else:
            os.environ["DQN_QUICK"] = before


_QUICK_BEFORE = pytest.StashKey[str | None]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """On an xdist worker with `--dist loadgroup`, every test marked `xdist_group` must carry its group in its node id
    (that is how xdist 3.8 sends a group to one worker). pytest 9.2's structured node ids silently broke this
    (pytest-xdist#1386): each worker then built the site, imported TRL and trained the same warm starts again."""
    if not getattr(config.option, "loadgroup", False):
        return
    lost = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(f"--dist loadgroup lost the xdist_group of {len(lost)} tests, e.g. {lost[0]}")
