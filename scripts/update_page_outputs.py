"""Re-run a page's code blocks and write what they print into its expected-output blocks.

    .venv/bin/python scripts/update_page_outputs.py docs/ppo.md docs/tiny-lm.md   # rewrite in place
    .venv/bin/python scripts/update_page_outputs.py --check docs/ppo.md           # only list what would change

For when the code behind a page changed on purpose (a fix that moves the numbers). The blocks run exactly as
`make test` runs them: snippets expanded by the root conftest, pytest-codeblocks' own extractor, each block
`exec`-ed in a fresh namespace under the pinned numeric settings. Only the text between an
`<!--pytest-codeblocks:expected-output-->` marker's fence lines changes; the prose that quotes a number does not,
so read the diff and fix the sentences by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!--[-\s]*pytest-codeblocks:expected-output[-\s]*-->")


def _conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports rlhf_toy first: the pinned numeric settings apply
    return module


def fresh_outputs(page: Path) -> list[tuple[str, str]]:
    """(expected, printed) for every python block of `page` that has an expected output, in page order."""
    from pytest_codeblocks.main import extract_from_buffer

    blocks = extract_from_buffer(io.StringIO(_conftest().expand_snippets(page.read_text(encoding="utf-8"))))
    pairs = []
    for block in blocks:
        if block.syntax != "python" or any("skip" in mark for mark in block.marks):
            if block.expected_output is not None:
                pairs.append((block.expected_output, block.expected_output))
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(block.code, {"__MODULE__": "__main__"})
        if block.expected_output is not None:
            pairs.append((block.expected_output, out.getvalue()))
    return pairs


def rewrite(text: str, outputs: list[str]) -> str:
    """`text` with the body of the i-th expected-output fence replaced by `outputs[i]` (indentation kept)."""
    lines = text.split("\n")
    result, i, k = [], 0, 0
    while i < len(lines):
        result.append(lines[i])
        if MARKER.search(lines[i].strip()):
            i += 1
            while lines[i].strip() == "":
                result.append(lines[i])
                i += 1
            fence = lines[i]
            indent = fence[: len(fence) - len(fence.lstrip())]
            ticks = fence.strip()[: len(fence.strip()) - len(fence.strip().lstrip("`"))]
            result.append(fence)
            i += 1
            while not lines[i].strip().startswith(ticks):
                i += 1
            result.extend(indent + line if line else line for line in outputs[k].rstrip("\n").split("\n"))
            result.append(lines[i])
            k += 1
        i += 1
    if k != len(outputs):
        raise RuntimeError(f"found {k} expected-output blocks, the page's code has {len(outputs)}")
    return "\n".join(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="list the blocks that would change, write nothing")
    args = parser.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    changed = 0
    for page in args.pages:
        pairs = fresh_outputs(page)
        stale = [(old, new) for old, new in pairs if old != new]
        for old, new in stale:
            print(f"{page}: expected\n{old}--- now prints\n{new}")
        changed += bool(stale)
        if stale and not args.check:
            page.write_text(rewrite(page.read_text(encoding="utf-8"), [new for _, new in pairs]), encoding="utf-8")
    print(f"{changed} of {len(args.pages)} pages {'would change' if args.check else 'rewritten'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
