"""MkDocs hook: the author's fast preview, `make serve` = `mkdocs serve --dirty` (issue #26, item 6).

A full build takes about 30 s; `make serve` used to redo it on every save. Under `--dirty` MkDocs renders only
the pages whose source is newer than their output (the rest of the site stays in the serve directory), and
`make serve` also sets RLHF_TOY_WHOLE_BOOK=false, which turns off the two plugins that aggregate every page
(print-site: the print page, which does not support dirty builds; llmstxt: /llms.txt and /llms-full.txt).
This hook makes the dirty rebuild render a page exactly as `mkdocs build` does
(tests/site/test_site_preview.py compares the <article> of re-rendered chapters with the strict build's):

* only documentation pages (docs/**.md, notebooks) changed since the previous build -> MkDocs' dirty build;
  anything else that is watched changed (src/, which snippets and mkdocstrings read; overrides/, hooks/,
  mkdocs.yml, docs/terms.yml, references.bib, figures, ...) -> every page is rebuilt, as without --dirty;
* references.md (which lists the pages citing each entry) is rebuilt when a page's citations change; the
  glossary, a generated page, always is (MkDocs rebuilds generated files);
* autorefs cross-references (a chapter's link to an API entry): the anchors the pages not re-rendered
  registered in earlier builds are carried over, so a re-rendered chapter resolves every link;
* Material's search index keeps the other pages' entries (Material does this itself under --dirty); this hook
  drops the previous entries of every re-rendered page, not only of the first.

Inactive unless the command is `mkdocs serve --dirty` (so `mkdocs build`, the tests and CI are untouched).
MkDocs loads a hook module once per process, so the state below survives `mkdocs serve`'s rebuilds.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from mkdocs.plugins import event_priority

log = logging.getLogger("mkdocs.hooks.preview")

REFERENCES = "references.md"  # lists the pages that cite each entry (hooks/references.py)
CITE = re.compile(r"\[@([\w-]+)\]")  # as in hooks/references.py

_active = False
_snapshot: dict[str, float] | None = None  # mtimes of every watched file at the previous build
_anchors: dict[str, dict] = {}  # autorefs' maps after the previous build
_rendered: set[str] = set()  # URLs of the pages rendered by the current build
_cites: dict[str, tuple[str, ...]] = {}  # page source -> the keys it cites


def on_startup(command, dirty):
    global _active, _snapshot
    _active = command == "serve" and dirty
    _snapshot = None
    _anchors.clear()
    _cites.clear()


def _cited(path: str) -> tuple[str, ...]:
    if not path.endswith(".md"):
        return ()
    return tuple(dict.fromkeys(CITE.findall(Path(path).read_text(encoding="utf-8"))))


def _scan(config) -> dict[str, float]:
    roots = [config.docs_dir, *config.watch]
    out = {os.path.abspath(config.config_file_path): os.stat(config.config_file_path).st_mtime}
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = os.path.abspath(os.path.join(dirpath, name))
                try:
                    out[path] = os.stat(path).st_mtime
                except OSError:
                    pass
    return out


@event_priority(-100)  # after mkdocs-jupyter and the glossary hook have put their files in
def on_files(files, config):
    global _snapshot
    if not _active:
        return files
    now = _scan(config)
    pages = {os.path.abspath(f.abs_src_path) for f in files.documentation_pages() if f.abs_src_path}
    if _snapshot is None:  # first build: MkDocs compares with the (usually empty) serve directory
        changed = set()
    else:
        changed = {p for p in now.keys() | _snapshot.keys() if now.get(p) != _snapshot.get(p)}
    _snapshot = now
    others = sorted(changed - pages)
    if others:
        log.info("preview: %s changed -> rebuilding every page", Path(others[0]).name)
        for f in files:
            f.is_modified = _true
    first, cites_changed = not _cites, False
    for path in pages if first else changed & pages:
        cited = _cited(path)
        cites_changed |= not first and _cites.get(path, ()) != cited
        _cites[path] = cited
    if cites_changed:
        for f in files:
            if f.src_uri == REFERENCES:
                f.is_modified = _true
    return files


def _true() -> bool:
    return True


def _page_of(url: str) -> str:
    return url.split("#", 1)[0]


def on_env(env, config, files):  # priority 0: before autorefs (-50) resolves the cross-references
    if not _active:
        return env
    _rendered.clear()
    _rendered.update(f.page.url for f in files if f.page is not None and f.page.content is not None)
    autorefs = config.plugins.get("autorefs")
    if autorefs is None:
        return env
    for name in ("_primary_url_map", "_secondary_url_map"):
        current = getattr(autorefs, name, None)
        if current is None:
            log.warning("preview: mkdocs-autorefs has no %s; cross-page links may not resolve", name)
            continue
        for identifier, urls in _anchors.get(name, {}).items():
            kept = [u for u in urls if _page_of(u) not in _rendered]
            merged = current.setdefault(identifier, [])
            merged.extend(u for u in kept if u not in merged)
            if not merged:
                del current[identifier]
        _anchors[name] = {k: list(v) for k, v in current.items()}
    titles = getattr(autorefs, "_title_map", None)
    if titles is not None:
        for identifier, title in _anchors.get("_title_map", {}).items():
            titles.setdefault(identifier, title)
        _anchors["_title_map"] = dict(titles)
    return env


@event_priority(10)  # before Material's search plugin writes the index
def on_post_build(config):
    if not _active:
        return
    search = config.plugins.get("material/search")
    prev = getattr(search, "search_index_prev", None)
    if prev is not None:
        prev.entries = [e for e in prev.entries if _page_of(e["location"]) not in _rendered]
