"""MkDocs hook: the index of the API reference (api/index.md), generated from what the layer pages document.

The API reference is one page per layer of `rlhf_toy` (docs/api/*.md, each a list of `::: rlhf_toy....` blocks
that mkdocstrings renders); api/index.md is written by hand except for two placeholders this hook fills in:

* `<!-- api:modules -->`: per page of the reference, one line per module it documents: a link to the module and
  the first line of its docstring (read with griffe, which mkdocstrings uses too);
* `<!-- api:objects -->`: a table of every object the layer pages document (every `rlhf_toy...` heading id
  mkdocstrings wrote), linking to it. Each row carries as HTML ids the object's dotted path and, if the module was
  renamed when the package was organised in layers (issue #26), its path before that (OLD_MODULES). The API
  reference used to be the single page api.md, whose URL was api/, the URL of api/index.md now (no redirect is
  needed, and a redirect stub for api.md would overwrite this page: both are api/index.html). So old links
  `api/#rlhf_toy.kl.kl_estimate` and `api/#rlhf_toy.estimators.kl.kl_estimate` both land on the row that links
  to the object's new place (tests/site/test_site_static.py checks every anchor the one page had).

To know every documented object, api/index.md must be rendered after the other api/ pages: on_files moves it to
the end of the file list (MkDocs renders pages in that order); under `mkdocs serve --dirty` a change to any api/
page re-renders all of them. The links in the table are ordinary Markdown
links, so `mkdocs build --strict` (validation.anchors) checks that every object's new anchor exists.
"""

from __future__ import annotations

import html as _html
import logging
import os
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

log = logging.getLogger("mkdocs.hooks.api_index")

API_DIR = "api/"
INDEX = "api/index.md"
MODULES_MARK = "<!-- api:modules -->"
OBJECTS_MARK = "<!-- api:objects -->"

# Module paths before the package was organised in layers (commit 3cc4c23, issue #26): new -> old.
# rlhf_toy.dapo was split in two; its module anchor goes to the first of them (dynamic_sampling).
OLD_MODULES = {
    "rlhf_toy.estimators.advantages": "rlhf_toy.advantages",
    "rlhf_toy.estimators.kl": "rlhf_toy.kl",
    "rlhf_toy.estimators.importance": "rlhf_toy.importance",
    "rlhf_toy.estimators.entropy": "rlhf_toy.entropy",
    "rlhf_toy.estimators.rewards": "rlhf_toy.rewards",
    "rlhf_toy.estimators.pass_at_k": "rlhf_toy.pass_at_k",
    "rlhf_toy.estimators.dynamic_sampling": "rlhf_toy.dapo",
    "rlhf_toy.estimators.overlong": "rlhf_toy.dapo",
    "rlhf_toy.rollout.samplers": "rlhf_toy.samplers",
    "rlhf_toy.rollout.multi_turn": "rlhf_toy.tools_rollout",
    "rlhf_toy.rollout.best_of_n": "rlhf_toy.best_of_n",
    "rlhf_toy.tasks.teachers": "rlhf_toy.teachers",
    "rlhf_toy.losses.distillation": "rlhf_toy.distillation",
    "rlhf_toy.studies.kl_estimators": "rlhf_toy.kl_study",
    "rlhf_toy.studies.offpolicy": "rlhf_toy.offpolicy_study",
    "rlhf_toy.studies.forward_reverse_kl": "rlhf_toy.distill_modes",
    "rlhf_toy.studies.gradient_variance": "rlhf_toy.gradient_stats",
    "rlhf_toy.studies.comparison": "rlhf_toy.experiments.compare",
    "rlhf_toy.studies.overoptimisation": "rlhf_toy.experiments.overoptimisation",
    "rlhf_toy.studies.health": "rlhf_toy.experiments.health",
    "rlhf_toy.demos.comparison": "rlhf_toy.experiments.demo",
}

KINDS = {"module": "模块", "class": "类", "function": "函数", "method": "方法", "attribute": "属性"}

# mkdocstrings' heading: <h2 id="rlhf_toy.x.y" class="doc doc-heading"> <code class="... doc-symbol-function">
_HEADING = re.compile(
    r'<h([1-6]) id="(rlhf_toy(?:\.[A-Za-z_][A-Za-z_0-9]*)*)" class="doc doc-heading">\s*'
    r'<code class="doc-symbol doc-symbol-heading doc-symbol-(\w+)">'
)

# page src_uri -> [(dotted path, kind)], in page order; filled by on_page_content of the layer pages
_objects: dict[str, list[tuple[str, str]]] = {}
_order: list[str] = []  # layer pages in nav order
_titles: dict[str, str] = {}


def old_path(path: str) -> str | None:
    """The dotted path `path` had before the layers (None if its module kept its name)."""
    for new, old in sorted(OLD_MODULES.items(), key=lambda kv: -len(kv[0])):
        if path == new or path.startswith(new + "."):
            return old + path[len(new) :]
    return None


def _is_layer_page(src_uri: str) -> bool:
    return src_uri.startswith(API_DIR) and src_uri.endswith(".md") and src_uri != INDEX


_dirty_serve = False  # `mkdocs serve --dirty` (make serve's preview, hooks/preview.py)


def on_startup(command, dirty):
    global _dirty_serve
    _dirty_serve = command == "serve" and dirty


def on_files(files, config):
    index = files.get_file_from_path(INDEX)
    if index is not None:  # render it last: it lists what the other pages document
        files.remove(index)
        files.append(index)
    if _dirty_serve:  # a dirty rebuild renders only changed pages; the index needs every API page rendered with it
        api = [f for f in files.documentation_pages() if f.src_uri.startswith(API_DIR)]
        if any(f.is_modified() for f in api):
            for f in api:
                if Path(f.abs_dest_path).exists():
                    os.utime(f.abs_dest_path, (0, 0))
    return files


def on_nav(nav, config, files):
    _objects.clear()
    _order[:] = [p.file.src_uri for p in nav.pages if _is_layer_page(p.file.src_uri)]
    for p in nav.pages:
        _titles[p.file.src_uri] = p.title or p.file.src_uri
    return nav


def on_page_content(html, page, config, files):
    if _is_layer_page(page.file.src_uri):
        _objects[page.file.src_uri] = [(m.group(2), m.group(3)) for m in _HEADING.finditer(html)]
        _titles[page.file.src_uri] = page.title or _titles.get(page.file.src_uri, page.file.src_uri)
    return html


def _summaries(config, modules: list[str]) -> dict[str, str]:
    """First line of each module's docstring (griffe, static: nothing is imported)."""
    import griffe

    src = Path(config["config_file_path"]).parent / "src"  # mkdocstrings' `paths: [src]` in mkdocs.yml
    pkg = griffe.load("rlhf_toy", search_paths=[str(src)], allow_inspection=False)
    out = {}
    for mod in modules:
        try:
            doc = pkg[mod[len("rlhf_toy.") :]].docstring
        except (KeyError, griffe.AliasResolutionError):
            doc = None
        line = doc.value.strip().splitlines()[0].strip() if doc and doc.value.strip() else ""
        out[mod] = line
    return out


def _cell(text: str) -> str:
    """Table-cell-safe Markdown."""
    return text.replace("|", "\\|")


def _modules_md(config) -> str:
    mods = [(page, path) for page in _order for path, kind in _objects.get(page, []) if kind == "module"]
    summary = _summaries(config, [m for _, m in mods])
    out = []
    for page in _order:
        rel = page[len(API_DIR) :]
        rows = [m for p, m in mods if p == page]
        out += [f"### [{_titles.get(page, rel)}]({rel})", ""]
        out += [f"- [`{m}`]({rel}#{m})：{summary[m]}" if summary[m] else f"- [`{m}`]({rel}#{m})" for m in rows]
        out.append("")
    return "\n".join(out)


def _objects_md() -> str:
    out = ["| 对象 | 类别 | 所在页 | 分层以前的名字 |", "|---|---|---|---|"]
    new = {path for page in _order for path, _ in _objects.get(page, [])}
    seen: set[str] = set()
    for page in _order:
        rel = page[len(API_DIR) :]
        for path, kind in _objects.get(page, []):
            if path in seen:
                continue
            seen.add(path)
            old = old_path(path)
            ids = f'<span id="{_html.escape(path)}"></span>'
            if old and old not in new and old not in seen:  # rlhf_toy.dapo: only on the first of its two halves
                seen.add(old)
                ids += f'<span id="{_html.escape(old)}"></span>'
            old_text = f"`{old}`" if old else ""
            out.append(
                f"| {ids}[`{path}`]({rel}#{path}) | {KINDS.get(kind, kind)} | {_cell(_titles.get(page, rel))} | {old_text} |"
            )
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != INDEX:
        return markdown
    missing = [p for p in _order if p not in _objects]
    if missing or not _order:
        raise PluginError(f"api_index: {INDEX} is rendered before {missing or 'any API page'}; see hooks/api_index.py")
    if MODULES_MARK not in markdown or OBJECTS_MARK not in markdown:
        raise PluginError(f"api_index: {INDEX} needs the placeholders {MODULES_MARK} and {OBJECTS_MARK}")
    return markdown.replace(MODULES_MARK, _modules_md(config)).replace(OBJECTS_MARK, _objects_md())
