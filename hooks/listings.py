"""MkDocs hook: code listings on the chapter pages show the code, not the docstrings.

A chapter includes a function from the package with a pymdownx.snippets section include,
`--8<-- "src/rlhf_toy/losses/grpo.py:grpo_loss"`. The section holds the whole function, and its Google-style
docstring (Args/Returns, raw $$…$$ TeX that MathJax does not render inside a code block) would be most of the
listing. The docstring is documentation for the API page (mkdocstrings renders it there); on the chapter page
the prose around the listing already says what the code does.

`on_page_markdown` rewrites each section include of a `.py` file into the equivalent line-range include,
`--8<-- "src/rlhf_toy/losses/grpo.py:41:44,58:97"`, which pymdownx.snippets (13.x: comma-separated ranges,
`dedent_subsections` dedents the ranges together as it dedents a section) expands to the section's lines
without the docstrings that span more than one line. A one-line docstring stays: it is the summary.
Docstrings are found with `ast` (module, class and function docstrings, and the attribute docstrings that
mkdocstrings reads: a string right after an assignment); a blank line right after a dropped docstring goes with it.

Nothing else changes: the directive in the Markdown still names the section, the section markers and the
source stay as they are, and the tests (conftest.py) still execute the whole section. Any path works, as
the hook resolves it with the same pymdownx.snippets options as the page (mkdocs.yml `markdown_extensions`).
The print page / PDF and llms-full.txt are made from the page HTML, so they show the same listings.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import markdown as _markdown

_SNIPPETS = "pymdownx.snippets"
_preprocessor = None  # a SnippetPreprocessor with the site's options, for its parsing and path resolution


def on_config(config):
    global _preprocessor
    if _SNIPPETS in config["markdown_extensions"]:
        _preprocessor = snippet_preprocessor(config["mdx_configs"].get(_SNIPPETS, {}))
    else:
        _preprocessor = None
    _docstring_lines.cache_clear()
    return config


def on_page_markdown(markdown, page, config, files):
    if _preprocessor is None:
        return markdown
    return rewrite(markdown, _preprocessor)


def snippet_preprocessor(options: dict):
    """pymdownx.snippets' preprocessor configured with `options` (the same dict as in mkdocs.yml)."""
    md = _markdown.Markdown(extensions=[_SNIPPETS], extension_configs={_SNIPPETS: dict(options)})
    return md.preprocessors["snippet"]


def rewrite(text: str, pre) -> str:
    """`text` with every section include of a .py file turned into line ranges that leave out multi-line docstrings.

    Lines are matched with pymdownx.snippets' own expressions (inline includes, and paths inside a block
    `--8<--` … `--8<--`); escaped (`;--8<--`) includes and everything else stay as they are.
    """
    lines = text.split("\n")
    block = False
    for i, line in enumerate(lines):
        m = pre.RE_ALL_SNIPPETS.match(line)
        if m:
            if m.group("escape"):
                continue
            if m.group("inline_marker"):
                if block:  # snippets ignores an inline include inside a block
                    continue
                quoted = m.group("snippet")
                path = _ranges_for(quoted[1:-1].strip(), pre)
                if path is not None:
                    start, end = m.span("snippet")
                    lines[i] = line[:start] + quoted[0] + path + quoted[-1] + line[end:]
            else:
                block = not block
            continue
        if block:
            m = pre.RE_SNIPPET.match(line)
            path = m.group("snippet").strip()
            if path and not path.startswith(";"):
                new = _ranges_for(path, pre)
                if new is not None:
                    lines[i] = m.group("space") + new
    return "\n".join(lines)


def _ranges_for(spec: str, pre) -> str | None:
    """The line-range spec to use instead of section spec `spec`, or None to keep it."""
    target = pre.parse_snippet_target(spec)
    if target is None or not target["section"] or not target["path"].endswith(".py"):
        return None
    if target["path"].lower().startswith(("http://", "https://")):
        return None
    found = pre.get_snippet_path(target["path"])
    if found is None:
        return None  # snippets reports the missing file itself (check_paths)
    source = Path(found)
    kept = section_lines(pre.read_lines(str(source)), target["section"], pre)
    if kept is None:
        return None  # no such section: snippets reports it
    stat = source.stat()
    drop = _docstring_lines(str(source), stat.st_mtime_ns, stat.st_size)
    shown = [n for n in kept if n not in drop]
    if len(shown) == len(kept) or not shown:
        return None
    return target["path"] + ":" + ",".join(f"{a}:{b}" for a, b in _runs(shown))


def section_lines(lines: list[str], section: str, pre) -> list[int] | None:
    """1-based numbers of the lines pymdownx.snippets includes for `section` (its `extract_section`, line by line):
    from the first start marker to the next end marker, without the markers of other sections inside it."""
    kept, start = [], False
    for n, line in enumerate(lines, 1):
        m = pre.match_section(line)
        if m and m.group("escape"):
            pass  # an escaped marker is content
        elif m is not None and m.group("name") == section:
            if m.group("type") == "start":
                start = True
                continue
            if start:
                return kept
            return None  # an end before any start: snippets includes nothing
        elif m is not None and start:
            continue
        if start:
            kept.append(n)
    return kept if start else None


@functools.lru_cache(maxsize=256)
def _docstring_lines(path: str, mtime_ns: int, size: int) -> frozenset[int]:
    """Lines of `path` to leave out of listings (cached per file version)."""
    return frozenset(docstring_lines(Path(path).read_text(encoding="utf-8")))


def docstring_lines(source: str) -> set[int]:
    """1-based numbers of the lines of every docstring in `source` that spans more than one line.

    Docstrings: the first statement of a module, class or function if it is a string, and a string statement
    right after an assignment (an attribute docstring); not one that is the whole body of its class or function.
    A docstring counts only if it has its lines to itself (nothing but blanks before it on its first line and
    after it on its last, a comment aside); the blank line right after it goes with it.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    raw = source.split("\n")
    lines = [line.encode("utf-8") for line in raw]  # ast's column offsets count UTF-8 bytes
    drop: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        has_docstring = isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        for k, stmt in enumerate(body):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                continue
            if not isinstance(stmt.value.value, str):
                continue
            first, last = stmt.lineno, stmt.end_lineno
            if last == first:
                continue
            if not ((k == 0 and has_docstring) or (k > 0 and isinstance(body[k - 1], (ast.Assign, ast.AnnAssign)))):
                continue
            if len(body) == 1 and not isinstance(node, ast.Module):
                continue  # the docstring is the whole body: without it the listing would not be Python
            before = lines[first - 1][: stmt.col_offset]
            after = lines[last - 1][stmt.end_col_offset :].strip()
            if before.strip() or (after and not after.startswith(b"#")):
                continue
            drop.update(range(first, last + 1))
            if last < len(raw) and not raw[last].strip():
                drop.add(last + 1)
    return drop


def _runs(numbers: list[int]):
    """(first, last) of each run of consecutive numbers in the sorted list."""
    first = prev = numbers[0]
    for n in numbers[1:]:
        if n != prev + 1:
            yield first, prev
            first = n
        prev = n
    yield first, prev
