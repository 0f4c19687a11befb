"""MkDocs hook: lighter, offline, MathJax-3-friendly notebook pages (mkdocs-jupyter 0.26.3).

mkdocs-jupyter inlines ~590 KB of JupyterLab CSS into every notebook page (its template has no option to
drop it: `theme` only picks light/dark, `include_requirejs` is about RequireJS). This hook

1. prunes that CSS to the rules whose selectors can match the page (every class a selector names must
   occur in the page's HTML), drops unused custom properties and @keyframes, and inlines the result
   (one `<style>`, typically 20-30 KB instead of 590 KB);
2. removes nbconvert's MathJax-2 leftovers (`<script src="">`, `text/x-mathjax-config`) and the lazy
   mermaid import from cdnjs (we have no mermaid output; it would load from another host);
3. makes nbconvert write math in Markdown cells the way pymdownx.arithmatex does on chapter pages
   (`<span class="arithmatex">\\(...\\)</span>`), so one MathJax configuration typesets both, prose dollar
   signs never become math, and hooks/search_exclude_math.py keeps the LaTeX out of search.

Because (3) changes what mkdocs-jupyter renders, its render cache is redirected to a directory named after
this hook's version (and the docs directory, so that two sites never share one).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re

import tinycss2
from nbconvert.filters.markdown_mistune import IPythonRenderer

log = logging.getLogger("mkdocs.hooks.notebook_slim")
VERSION = "slim-1"

# --- 3. math as arithmatex markup -------------------------------------------------------------------


def _inline_math(self, body: str) -> str:
    return f'<span class="arithmatex">\\({self.escape_html(body)}\\)</span>'


def _block_math(self, body: str) -> str:
    return f'<span class="arithmatex arithmatex-display">\\[{self.escape_html(body)}\\]</span>'


def _latex_environment(self, name: str, body: str) -> str:
    name, body = self.escape_html(name), self.escape_html(body)
    return f'<span class="arithmatex arithmatex-display">\\begin{{{name}}}{body}\\end{{{name}}}</span>'


IPythonRenderer.inline_math = _inline_math
IPythonRenderer.block_math = _block_math
IPythonRenderer.latex_environment = _latex_environment


def on_config(config):
    plugin = config.plugins.get("mkdocs-jupyter")
    if plugin is not None:
        # One cache directory per docs_dir: mkdocs-jupyter evicts every cache file its own build did not use,
        # so two builds sharing a directory (the site and the lab site in tests/site, built in parallel)
        # deleted each other's entries mid-build (FileNotFoundError).
        base = plugin.config["cache_dir"].rstrip("/")
        tag = f"{VERSION}-{hashlib.sha1(str(config.docs_dir).encode()).hexdigest()[:8]}"
        if not base.endswith(tag):
            plugin.config["cache_dir"] = f"{base}/{tag}"
    return config


# --- 1. CSS pruning ---------------------------------------------------------------------------------

_STYLE = re.compile(r"<style\b([^>]*)>(.*?)</style>\s*", re.S)
_CLASS_ATTR = re.compile(r'class="([^"]*)"')
_SEL_CLASS = re.compile(r"\.(-?[_a-zA-Z][-_a-zA-Z0-9]*)")
_VAR_USE = re.compile(r"var\(\s*(--[-_a-zA-Z0-9]+)")
_ALWAYS = {"jupyter-wrapper", "jp-Notebook"}


def _selector_ok(selector: str, classes: set[str]) -> bool:
    """Keep a selector if every class it names is on the page. Selectors naming no class at all
    (pygments' bare `pre`, JupyterLab's bare `table`) would restyle the whole Material page: dropped."""
    # :not(.x) matches without .x, and :is(.x, .y) needs only one of them: ignore classes inside pseudo-classes
    bare = selector
    while True:
        stripped = re.sub(r":[-a-z]+\([^()]*\)", "", bare)
        if stripped == bare:
            break
        bare = stripped
    names = _SEL_CLASS.findall(bare)
    return bool(names) and all(c in classes for c in names)


def _split_selectors(prelude: str) -> list[str]:
    """Split a selector list at top-level commas (not those inside :is(...), :not(...), [...])."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(prelude):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(prelude[start:i].strip())
            start = i + 1
    parts.append(prelude[start:].strip())
    return [p for p in parts if p]


def _parse(rules, classes: set[str]) -> list:
    """Pruned rules as ("rule", selectors, [(name, value)]), ("media", prelude, [...]) or ("raw", text)."""
    out = []
    for rule in rules:
        if rule.type == "qualified-rule":
            selectors = _split_selectors(tinycss2.serialize(rule.prelude))
            kept = [s for s in selectors if _selector_ok(s, classes)]
            if kept:
                decls = [
                    (
                        d.name if d.name.startswith("--") else d.lower_name,
                        tinycss2.serialize(d.value).strip() + (" !important" if d.important else ""),
                    )
                    for d in tinycss2.parse_blocks_contents(rule.content, skip_comments=True, skip_whitespace=True)
                    if d.type == "declaration"
                ]
                out.append(("rule", ",".join(kept), decls))
        elif rule.type == "at-rule":
            kw = rule.lower_at_keyword
            if kw == "media" and rule.content is not None:
                inner = _parse(tinycss2.parse_rule_list(rule.content, True, True), classes)
                if inner:
                    out.append(("media", tinycss2.serialize(rule.prelude).strip(), inner))
            elif kw.endswith("keyframes"):
                out.append(("keyframes", tinycss2.serialize(rule.prelude).strip(), tinycss2.serialize([rule])))
            # @charset, @font-face, @supports, @import: dropped
    return out


def _walk(items):
    for item in items:
        if item[0] == "media":
            yield from _walk(item[2])
        else:
            yield item


def _serialize(items, used_vars: set[str], used_kf: set[str]) -> str:
    out = []
    for item in items:
        if item[0] == "rule":
            decls = [f"{n}:{v}" for n, v in item[2] if not n.startswith("--") or n in used_vars]
            if decls:
                out.append(f"{item[1]}{{{';'.join(decls)}}}")
        elif item[0] == "media":
            inner = _serialize(item[2], used_vars, used_kf)
            if inner:
                out.append(f"@media {item[1]}{{{inner}}}")
        elif item[0] == "keyframes" and item[1] in used_kf:
            out.append(item[2])
    return "".join(out)


@functools.lru_cache(maxsize=8)
def _parse_stylesheet(css: str):
    return tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True)  # ~1 s for 590 KB


def prune_css(css: str, html: str) -> str:
    """The part of `css` that can apply to `html` (see module docstring)."""
    classes = set(_ALWAYS)
    for value in _CLASS_ATTR.findall(html):
        classes.update(value.split())
    items = _parse(_parse_stylesheet(css), classes)
    rules = [i for i in _walk(items) if i[0] == "rule"]
    defs: dict[str, list[str]] = {}
    todo: set[str] = set()
    used_kf: set[str] = set()
    for _, _, decls in rules:
        for name, value in decls:
            if name.startswith("--"):
                defs.setdefault(name, []).append(value)
            else:
                todo.update(_VAR_USE.findall(value))
                if name.startswith("animation"):
                    used_kf.update(re.findall(r"[-_a-zA-Z][-_a-zA-Z0-9]*", value))
    used: set[str] = set()
    while todo:
        v = todo.pop()
        if v not in used:
            used.add(v)
            for value in defs.get(v, []):
                todo.update(set(_VAR_USE.findall(value)) - used)
    return _serialize(items, used, used_kf)


# --- 2. leftovers -----------------------------------------------------------------------------------

_LEFTOVERS = [
    re.compile(r"<!-- Load mathjax -->\s*<script src=\"\">\s*</script>\s*", re.S),
    re.compile(r"<!-- MathJax configuration -->\s*<script type=\"text/x-mathjax-config\">.*?</script>\s*", re.S),
    re.compile(r"<script type=\"module\">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*</script>\s*", re.S),
    re.compile(r"<script src=\"\">\s*</script>\s*"),
]


def on_page_content(html, page, config, files):
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    for pattern in _LEFTOVERS:
        html = pattern.sub("", html)
    first = _STYLE.search(html)
    if first is None:
        return html
    # Only the `type="text/css"` blocks are real CSS (JupyterLab, pygments, theme); the plain <style> blocks
    # are mermaid's (no mermaid here) and a Python-list repr of the pygments CSS that nbconvert leaks.
    css = "\n".join(m.group(2) for m in _STYLE.finditer(html) if "text/css" in m.group(1))
    body = _STYLE.sub("", html)
    pruned = prune_css(css, body)
    log.debug("%s: notebook CSS %d -> %d bytes", page.file.src_uri, len(css), len(pruned))
    return body[: first.start()] + f'<style type="text/css">{pruned}</style>\n' + body[first.start() :]
