"""House rules for the chapter pages that no other tool checks.

pytest-codeblocks runs only fences whose info string is exactly `python` (or `sh`/`bash`) and silently
skips the rest, so every fence here must be either a tested `python` block or a display-only kind
chosen on purpose (`py` for code shown but not run, `console` for commands, `text` for outputs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mkdocs.config import load_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)(?P<info>.*)$")
ALLOWED_INFO = {"python", "py", "console", "text", "yaml", "toml", "json", "markdown", "html", "diff", ""}


def fences(path: Path) -> list[tuple[int, str, str]]:
    """(line number, fence characters, info string) of every opening fence."""
    found, open_fence = [], None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        m = FENCE.match(line)
        if not m:
            continue
        if open_fence is None:
            open_fence = m["fence"]
            found.append((n, m["fence"], m["info"].strip()))
        elif m["fence"].startswith(open_fence[0]) and len(m["fence"]) >= len(open_fence) and not m["info"].strip():
            open_fence = None
    return found


def chapter_pages() -> list[Path]:
    nav = load_config(str(ROOT / "mkdocs.yml"))["nav"]
    section = next(item["正文"] for item in nav if isinstance(item, dict) and "正文" in item)
    return [DOCS / next(iter(entry.values())) for entry in section]


MARKDOWN = sorted(DOCS.rglob("*.md"))


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(DOCS)))
def test_no_code_fence_is_silently_skipped(page):
    for n, fence, info in fences(page):
        where = f"{page.relative_to(ROOT)}:{n}"
        assert fence.startswith("`"), f"{where}: use backtick fences (~~~ blocks are never tested)"
        assert info in ALLOWED_INFO, (
            f"{where}: fence info {info!r} is skipped by pytest-codeblocks; use exactly `python` (tested), "
            "`py` (display only, on purpose), `console` (commands) or `text`"
        )


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(DOCS)))
def test_no_code_block_is_marked_skip(page):
    text = page.read_text(encoding="utf-8")
    assert "pytest.mark.skip" not in text and "pytest-codeblocks:skip" not in text, page.name


@pytest.mark.parametrize("page", chapter_pages(), ids=lambda p: p.name)
def test_chapter_has_tested_code_checked_output_and_exercises(page):
    text = page.read_text(encoding="utf-8")
    infos = [info for _, _, info in fences(page)]
    assert infos.count("python") >= 3, "a chapter shows its code and runs it"
    assert '--8<-- "src/rlhf_toy/' in text, "algorithm code is included from the package, never pasted"
    assert "<!--pytest-codeblocks:expected-output-->" in text, "numbers on the page are checked"
    exercises = text.split("## 练习", 1)
    assert len(exercises) == 2, "a chapter ends with 练习"
    answers = re.findall(r'^\s*\?\?\? success "参考答案"', exercises[1], flags=re.M)
    assert len(answers) >= 2, "at least two exercises with folded answers"
    assert exercises[1].count("```python") >= 2, "answers are checked by tested code"
    assert "notebooks/" in text, "a chapter links its notebook"


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    kept, open_fence = [], None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        m = FENCE.match(line)
        if open_fence is None and m:
            open_fence = m["fence"]
        elif open_fence is not None:
            if (
                m
                and m["fence"].startswith(open_fence[0])
                and len(m["fence"]) >= len(open_fence)
                and not m["info"].strip()
            ):
                open_fence = None
        else:
            kept.append((n, line))
    return kept


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(DOCS)))
def test_no_tab_in_prose(page):
    # A TAB in prose is almost always a `\t` eaten by a non-raw Python string: `$R_{\text{length}}$` became
    # `$R_{<TAB>ext{length}}$` on reasoning.md, which MathJax prints as R with the subscript "ext length".
    bad = [n for n, line in prose_lines(page) if "\t" in line]
    assert not bad, f"{page.relative_to(ROOT)}: TAB character on line(s) {bad} (a lost `\\t`, e.g. in `\\text`?)"


FOOTNOTE_DEFINITION = re.compile(r"^\[\^[^\]]+\]:")


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(DOCS)))
def test_no_paragraph_is_swallowed_by_a_footnote(page):
    # Python-Markdown's footnotes extension continues a definition over every following non-blank line, indented
    # or not: a body paragraph written right under `[^x]: ...` vanishes from the page into footnote x.
    lines = page.read_text(encoding="utf-8").splitlines()
    swallowed = [
        n + 2
        for n, line in enumerate(lines[:-1])
        if FOOTNOTE_DEFINITION.match(line)
        and lines[n + 1].strip()
        and not FOOTNOTE_DEFINITION.match(lines[n + 1])
        and not lines[n + 1].startswith("    ")
    ]
    assert not swallowed, (
        f"{page.relative_to(ROOT)}: line(s) {swallowed} follow a footnote definition without a blank line"
    )
