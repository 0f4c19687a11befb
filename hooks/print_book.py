"""MkDocs hook: what the print page (and so the PDF) contains.

mkdocs-print-site-plugin puts every nav item on its print page; its `exclude` option (mkdocs.yml) leaves out the
notebooks and the API reference, but their section heading (笔记本) would still open an empty chapter. This hook
drops nav sections all of whose pages are excluded from the plugin's list (it runs after the plugin's on_nav).
"""

from __future__ import annotations

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
    plugin.renderer.items = [
        item
        for item in plugin.renderer.items
        if not item.is_section or any(not exclude(p.file.src_path, patterns) for p in _pages(item))
    ]
    return nav
