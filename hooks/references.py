"""MkDocs hook: the references page and the links to it, around the mkdocs-bibtex plugin.

Citations on a page are keys in brackets, `[@rafailov2023dpo]`, next to the paper's name and its first-mention
link. The `bibtex` plugin (mkdocs-bibtex, pinned) turns each into a footnote `[^ref-KEY]` whose text is the
entry of docs/references.bib formatted by pybtex's plain style (authors, title, venue, year, arXiv / DOI link);
with Material's `content.footnote.tooltips` the reference shows on hover. This hook (its on_page_markdown runs
after the plugin's: hooks come after plugins)

* appends to each such footnote a link to the entry on the references page (`references.md#ref-KEY`);
* fills the references page (docs/references.md, at the marker `<!-- bibliography -->`) with every entry,
  formatted by the same pybtex style, each with an anchor `ref-KEY` and the pages that cite it.

Which keys a page cites is read from the page sources (the same `[@KEY]` pattern the plugin looks for), so the
references page is complete whatever order MkDocs renders the pages in. tests/test_bibliography.py checks that
every paper a page names is in the bibliography and every entry is cited.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from pybtex.backends.markdown import Backend
from pybtex.database import parse_file
from pybtex.style.formatting.plain import Style

CITE = re.compile(r"\[@([\w-]+)\]")
FOOTNOTE = re.compile(r"^\[\^ref-([\w-]+)\]: (.*)$", re.M)
MARKER = "<!-- bibliography -->"
PAGE = "references.md"

_titles: dict[str, str] = {}
_cited_by: dict[str, list[str]] = {}


def _bib_path(config) -> Path:
    plugin = config["plugins"]["bibtex"]
    return Path(config["config_file_path"]).parent / plugin.config.bib_file


def on_nav(nav, config, files):
    _titles.clear()
    _cited_by.clear()
    for page in nav.pages:
        _titles[page.file.src_uri] = page.title
    for f in files.documentation_pages():
        if not f.src_uri.endswith(".md") or f.src_uri == PAGE or not f.abs_src_path:
            continue
        for key in dict.fromkeys(CITE.findall(Path(f.abs_src_path).read_text(encoding="utf-8"))):
            _cited_by.setdefault(key, []).append(f.src_uri)
    return nav


def _link(src_uri: str, target: str) -> str:
    return posixpath.relpath(target, posixpath.dirname(src_uri) or ".")


def on_page_markdown(markdown, page, config, files):
    src = page.file.src_uri
    if src == PAGE and MARKER in markdown:
        return markdown.replace(MARKER, _bibliography(config))
    to_refs = _link(src, PAGE)
    return FOOTNOTE.sub(lambda m: f"[^ref-{m[1]}]: {m[2]} [→ 参考文献]({to_refs}#ref-{m[1]})", markdown)


def _bibliography(config) -> str:
    data = parse_file(str(_bib_path(config)))
    style, backend = Style(), Backend()
    order = {uri: i for i, uri in enumerate(_titles)}
    lines = []
    for entry in style.format_bibliography(data):  # pybtex's plain order: author, year, title
        # the same clean-up mkdocs-bibtex applies to its footnotes: the Markdown backend escapes ( ) . and "\(" would
        # become inline math for pymdownx.arithmatex
        text = entry.text.render(backend).replace("\n", " ")
        text = text.replace("\\(", "(").replace("\\)", ")").replace("\\.", ".")
        pages = sorted(_cited_by.get(entry.key, []), key=lambda u: order.get(u, len(order)))
        where = "、".join(f"[{_titles.get(u, u)}]({u})" for u in pages)
        lines.append(f'1. <span id="ref-{entry.key}"></span>{text}' + (f" 引用于：{where}。" if where else ""))
    return "\n".join(lines) + "\n"
