"""MkDocs hook: chapter figures load lazily (`loading="lazy"`, `decoding="async"`).

A chapter page's figures sit below the first screen; the browser fetches each one only when the reader scrolls
near it (native lazy loading, no script), so opening a chapter costs its HTML and fonts, not every figure on it.
Only `<img>` tags pointing at the book's own figures (`figures/*.svg`, `data/*.svg`) are touched; an image that
already says how to load is left as it is. scripts/build_pdf.py switches them back to eager loading before printing.
"""

from __future__ import annotations

import re

_FIGURE_IMG = re.compile(r'<img(?![^>]*\bloading=)(?=[^>]*\bsrc="[^"]*(?:figures|data)/[^"/]+\.svg")')


def on_page_content(html: str, **kwargs) -> str:
    return _FIGURE_IMG.sub('<img loading="lazy" decoding="async"', html)
