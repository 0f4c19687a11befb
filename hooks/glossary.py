"""MkDocs hook: the glossary page (术语表) generated from the one terminology file, docs/terms.yml.

* `glossary.md` is a virtual page (nothing to maintain twice); put it in the nav as `glossary.md`.
* Each term links to where the book first defines it: `defined_in` from terms.yml, or else the first
  chapter in nav order that writes the term in bold (**优势函数**), or else the first chapter that uses it.
  That occurrence gets the anchor `term-<key>` at build time, so the link lands on the sentence.
* A term used before the reader has met its definition (on an earlier page of the reading path, or earlier on
  the defining page) links to the definition at its first use, with a dotted underline (class `term-ref`).
* The defining page is tagged with its terms for Material's search (tags are boosted), so typing a term
  finds where it is defined first; terms no chapter uses yet are tagged on the glossary itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

from _glossary_terms import Term, add_anchor, first_occurrence, link_forward_uses, load_terms
from mkdocs.structure.files import File
from mkdocs.utils import meta as md_meta

log = logging.getLogger("mkdocs.hooks.glossary")

TERMS_FILE = "terms.yml"  # inside docs_dir
GLOSSARY = "glossary.md"

_terms: list[Term] = []
_targets: dict[str, tuple[str, str]] = {}  # term key -> (src_uri, anchor or "")
_anchors_by_page: dict[str, list[Term]] = {}
_titles: dict[str, str] = {}
_order: list[str] = []  # the reading path: the home page, then the chapters in nav order


def on_config(config):
    global _terms
    _terms = load_terms(Path(config["docs_dir"]) / TERMS_FILE)


def on_files(files, config):
    if files.get_file_from_path(GLOSSARY) is None:
        files.append(File.generated(config, GLOSSARY, content="# 术语表\n"))
    return files


def _chapter_sources(nav):
    for page in nav.pages:
        f = page.file
        api = f.src_uri.startswith("api/")
        if f.src_uri.endswith(".md") and f.src_uri not in (GLOSSARY, "index.md") and not api and f.abs_src_path:
            _titles[f.src_uri] = page.title or f.src_uri
            text = Path(f.abs_src_path).read_text(encoding="utf-8-sig")
            yield f.src_uri, md_meta.get_data(text)[0]


def on_nav(nav, config, files):
    _targets.clear()
    _anchors_by_page.clear()
    sources = list(_chapter_sources(nav))
    _order[:] = [p.file.src_uri for p in nav.pages if p.file.src_uri == "index.md"] + [uri for uri, _ in sources]
    for page in nav.pages:
        _titles.setdefault(page.file.src_uri, page.title or page.file.src_uri)
    in_nav = {page.file.src_uri for page in nav.pages}
    for term in _terms:
        uri, _, anchor = (term.defined_in or "").partition("#")
        if uri in in_nav:  # a `defined_in` page that this site does not build (a test site) is looked up instead
            _targets[term.key] = (uri, anchor)
            continue
        found = [(uri, first_occurrence(md, term)) for uri, md in sources]
        found = [(uri, occ) for uri, occ in found if occ]
        bold = [(uri, occ) for uri, occ in found if occ.bold]
        if bold or found:
            uri = (bold or found)[0][0]
            _targets[term.key] = (uri, term.anchor)
            _anchors_by_page.setdefault(uri, []).append(term)
    return nav


def _tag_for_search(page, terms: list[Term]) -> None:
    """Material's search index gives page.meta.tags a large boost: tagging the defining page with its
    terms (Chinese and English) ranks it first when a reader types the term. (The tags plugin is not
    enabled, so no tag chips appear on the page.)"""
    tags = page.meta.get("tags")
    tags = list(tags) if isinstance(tags, list) else []
    for term in terms:
        for word in (term.zh, *term.also, term.en):
            if word not in tags:
                tags.append(word)
    page.meta["tags"] = tags


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    defined_here = [t for t in _terms if _targets.get(t.key, (GLOSSARY, ""))[0] == uri]
    if defined_here:
        _tag_for_search(page, defined_here)
    if uri == GLOSSARY:
        return render_glossary(page)
    for term in _anchors_by_page.get(uri, []):
        occ = first_occurrence(markdown, term)
        if occ is None:  # the page changed since on_nav (mkdocs serve): link to the page only
            _targets[term.key] = (uri, "")
            continue
        markdown = add_anchor(markdown, occ, term.anchor)
    # Define before use: a term the reader meets before its definition links to it (dotted underline).
    return link_forward_uses(markdown, uri, _order, _targets, _terms)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_glossary(page) -> str:
    out = [
        "# 术语表",
        "",
        "全书统一的术语写法（英文 ⇄ 中文 ⇄ 记号）。“首次定义”链接到书中第一次定义该术语的句子。",
        "本页由术语文件 `docs/terms.yml` 生成；新术语请加进该文件和 `docs/jieba_userdict.txt`。",
        "",
        "| English | 中文 | 记号 / 代码名 | 首次定义 |",
        "|---|---|---|---|",
    ]
    for t in _terms:
        zh = t.zh + (f"（{'、'.join(t.also)}）" if t.also else "")
        sym = " ".join([t.symbol] + [f"`{c}`" for c in t.code]).strip()
        target = _targets.get(t.key)
        if target:
            uri, anchor = target
            link = f"[{_cell(_titles.get(uri, uri))}]({uri}{'#' + anchor if anchor else ''})"
        else:
            link = "—"
        row = f'| <span id="{t.anchor}">{_cell(t.en)}</span> | {_cell(zh)} | {_cell(sym)} | {link} |'
        out.append(row)
    out += ["", "## 不要这样写", "", "| 不要写 | 应写作 | 说明 |", "|---|---|---|"]
    for t in _terms:
        if t.variants:
            out.append(f"| {'、'.join(t.variants)} | {t.zh} | {_cell(t.note)} |")
    out += [
        "",
        "“提示”（指 prompt 时）、“完成”（指 completion 时）也不要用；这两条太常见，不做自动检查。",
        "",
    ]
    return "\n".join(out)
