"""MkDocs hook: what the print page (and so the PDF) contains.

mkdocs-print-site-plugin puts every nav item on its print page; its `exclude` option (mkdocs.yml) leaves out the
notebooks and the API reference, but their section headings (笔记本, and API 参考 inside 附录) would still open an
empty chapter. This hook drops nav sections all of whose pages are excluded, at any depth, from the plugin's list
(it runs after the plugin's on_nav). A nested section is replaced by a copy with fewer children: the site's own nav
objects are not changed.
"""

from __future__ import annotations

from mkdocs.structure.nav import Section
from mkdocs_print_site_plugin.exclude import exclude


def _pages(item):
    if item.is_page:
        yield item
    for child in getattr(item, "children", None) or []:
        yield from _pages(child)


def on_nav(nav, config, files):
    plugin = config["plugins"].get("print-site")
    if plugin is None or not plugin.config.get("enabled"):
        return nav
    patterns = plugin.config.get("exclude", [])
    plugin.renderer.items = _printed(plugin.renderer.items, patterns)
    return nav


def _printed(items, patterns):
    out = []
    for item in items:
        if not item.is_section:
            out.append(item)
        elif any(not exclude(p.file.src_path, patterns) for p in _pages(item)):
            children = _printed(item.children, patterns)
            if children == item.children:  # nothing dropped below: the section as it is
                out.append(item)
            else:
                out.append(Section(item.title, children))
    return out
