"""Code listings on the chapter pages (hooks/listings.py): the code, without its multi-line docstrings.

The hook rewrites `--8<-- "path.py:section"` into a pymdownx.snippets line-range include that leaves out the
docstrings spanning more than one line. These tests expand both includes with pymdownx.snippets itself, with the
options of mkdocs.yml, so they check what the pages show. The tests that run the pages' code (conftest.py) still
expand the section as written, docstrings included.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import io
import re
import textwrap
import tokenize
from pathlib import Path

import pytest
from mkdocs.config import load_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# the same includes as /work/shared/tools/listing_docstrings.py counts: a .py file and a section name
INCLUDE = re.compile(r'^[ \t]*-+8<-+[ \t]+"(?P<path>[^"]+?\.py):(?P<section>[A-Za-z][-\w]*)"[ \t]*$')
MAX_DOCSTRING_SHARE = 0.10


def _load_hook():
    spec = importlib.util.spec_from_file_location("listings_hook", ROOT / "hooks" / "listings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


listings = _load_hook()


@functools.cache
def _snippets_options() -> dict:
    return load_config(str(ROOT / "mkdocs.yml"))["mdx_configs"]["pymdownx.snippets"]


def expand(pre, line: str) -> list[str]:
    """The lines pymdownx.snippets puts on the page for one include line."""
    pre.seen, pre.bases, pre.failed = set(), None, set()
    return pre.parse_snippets([line])


def string_lines(lines: list[str]) -> int:
    """Lines inside triple-quoted strings, counted as the shared tool counts them."""
    count = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            if tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''")):
                count += tok.end[0] - tok.start[0] + 1
    except (tokenize.TokenError, IndentationError):
        pass
    return count


def book_listings():
    """(page, original include, rewritten include) for every section include of a .py file in docs/*.md."""
    pre = listings.snippet_preprocessor(_snippets_options())
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        rewritten = listings.rewrite(text, pre)
        for before, after in zip(text.split("\n"), rewritten.split("\n"), strict=True):
            if INCLUDE.match(before):
                yield page.name, before, after


# --- the hook on a fixture ------------------------------------------------------------------------

FIXTURE = '''\
"""Module docstring,
over two lines."""

import math


# --8<-- [start:demo]
def loss(x: float) -> float:
    r"""Loss of `x`.

    $$ \\ell(x) = x^2 $$

    Args:
        x: a number.
    """

    y = x * x  # the square
    return y


def one_liner() -> int:
    """Stays: one line."""
    return 1


class Config:
    """A config."""

    lr: float = 0.1
    """Learning rate,
    over two lines."""
    steps: int = 3

    def run(self) -> str:
        """Run.

        Returns:
            a word.
        """
        text = """not a docstring:
        code"""
        return text


def only_docstring():
    """The whole body,
    so it stays."""
# --8<-- [end:demo]

# --8<-- [start:short]
def short() -> int:
    """One line."""
    return 2
# --8<-- [end:short]
'''

EXPECTED = '''\
def loss(x: float) -> float:
    y = x * x  # the square
    return y


def one_liner() -> int:
    """Stays: one line."""
    return 1


class Config:
    """A config."""

    lr: float = 0.1
    steps: int = 3

    def run(self) -> str:
        text = """not a docstring:
        code"""
        return text


def only_docstring():
    """The whole body,
    so it stays."""'''


@pytest.fixture
def fixture_pre(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(FIXTURE, encoding="utf-8")
    (tmp_path / "notes.md").write_text("# 标题\n", encoding="utf-8")
    options = {**_snippets_options(), "base_path": [str(tmp_path)]}
    return listings.snippet_preprocessor(options)


def test_multiline_docstrings_leave_the_listing_and_the_code_stays(fixture_pre):
    line = '--8<-- "pkg/mod.py:demo"'
    new = listings.rewrite(line, fixture_pre)
    assert re.fullmatch(r'--8<-- "pkg/mod\.py:\d+:\d+(,\d+:\d+)+"', new), new
    assert "\n".join(expand(fixture_pre, new)) == EXPECTED
    # what is left is the section's lines in order, minus the docstrings only
    before = expand(fixture_pre, line)
    after = expand(fixture_pre, new)
    it = iter(before)
    assert all(any(a == b for b in it) for a in after)
    assert '    """Stays: one line."""' in after and '    """A config."""' in after


def test_indented_and_block_includes_are_rewritten_too(fixture_pre):
    md = '!!! note\n\n    ```python\n    --8<-- "pkg/mod.py:demo"\n    ```\n\n--8<--\npkg/mod.py:demo\n--8<--\n'
    new = listings.rewrite(md, fixture_pre)
    assert new.count("pkg/mod.py:demo") == 0 and len(new.split("\n")) == len(md.split("\n"))
    assert new.split("\n")[3].startswith('    --8<-- "pkg/mod.py:')


def test_other_includes_stay_as_written(fixture_pre):
    md = "\n".join(
        [
            '--8<-- "pkg/mod.py:short"',  # a one-line docstring: nothing to leave out
            ';--8<-- "pkg/mod.py:demo"',  # escaped
            '--8<-- "pkg/mod.py:3:5"',  # explicit lines
            '--8<-- "pkg/mod.py"',  # the whole file
            '--8<-- "notes.md"',
            '--8<-- "pkg/mod.py:no_such_section"',  # snippets reports it (check_paths)
            '--8<-- "pkg/missing.py:demo"',
            'text `--8<-- "pkg/mod.py:demo"` in a sentence',
        ]
    )
    assert listings.rewrite(md, fixture_pre) == md


def test_docstring_lines_handles_non_ascii_columns():
    src = 'def f():\n    """中文摘要。\n\n    Args: 无。\n    """  # 注释\n    return "中文"\n'
    assert listings.docstring_lines(src) == {2, 3, 4, 5}


# --- the book -------------------------------------------------------------------------------------


def test_hook_is_registered_before_the_other_hooks():
    hooks = list(load_config(str(ROOT / "mkdocs.yml"))["hooks"])  # names, in mkdocs.yml's order
    assert hooks[0] == "hooks/listings.py", hooks


def test_docstrings_are_under_a_tenth_of_the_listed_code():
    shown = docs = 0
    rows = []
    for page, _, after in book_listings():
        lines = expand(listings.snippet_preprocessor(_snippets_options()), after)
        n, d = len(lines), string_lines(lines)
        shown, docs = shown + n, docs + d
        rows.append((d / max(n, 1), n, page, after))
    assert rows, "the chapter pages include code from the package"
    worst = "\n".join(f"{s:4.0%} {n:4d} lines  {p}  {a}" for s, n, p, a in sorted(rows, reverse=True)[:5])
    assert docs / shown < MAX_DOCSTRING_SHARE, f"docstring lines {docs}/{shown} of the listings; worst:\n{worst}"


def test_listings_show_the_same_code_without_docstrings():
    """Every rewritten listing is its section minus whole docstrings (and the blank line after one), in order;
    if the section parses as Python, so does the listing."""
    pre = listings.snippet_preprocessor(_snippets_options())
    for page, before, after in book_listings():
        full, shown = expand(pre, before), expand(pre, after)
        if before == after:
            assert full == shown
            continue
        in_string = set()
        with_strings = "\n".join(full) + "\n"
        for tok in tokenize.generate_tokens(io.StringIO(with_strings).readline):
            if tok.type == tokenize.STRING:
                in_string.update(range(tok.start[0] - 1, tok.end[0]))
        k = 0
        for line in shown:
            while full[k] != line:
                assert k in in_string or not full[k].strip(), f"{page}: {before} lost code line {full[k]!r}"
                k += 1
            k += 1
        for rest in range(k, len(full)):
            assert rest in in_string or not full[rest].strip(), f"{page}: {before} lost code line {full[rest]!r}"
        try:
            ast.parse(textwrap.dedent("\n".join(full)))
        except SyntaxError:
            continue
        ast.parse(textwrap.dedent("\n".join(shown)))
