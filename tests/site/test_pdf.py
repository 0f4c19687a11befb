"""The book's PDF (make pdf -> site/rlhf-toy.pdf, scripts/build_pdf.py), opened with pypdf.

Printing the whole book takes minutes on two cores, so `make test` does not print it: the test reads the PDF
named by RLHF_TOY_PDF (.ci/run runs `make pdf` first and sets it) and skips without it. Checks: a real book's
page count, every font embedded (the Chinese text is drawn by the PDF itself, not by the reader's fonts), no raw TeX left in the text (MathJax had typeset it),
every chapter and appendix title in the text and in the bookmarks.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
# What untypeset math leaves in prose: pymdownx.arithmatex's \( \) and \[ \] delimiters, equation environments,
# \eqref. (Code listings legitimately show docstrings with $...$ TeX; src/ never uses these four.)
RAW_TEX = re.compile(r"\\\(|\\\[|\\eqref|\\begin\{equation")


def _fonts(obj, seen, out):
    """Every font dictionary reachable from a page's resources (XObjects included)."""
    obj = obj.get_object()
    if id(obj) in seen or not hasattr(obj, "get"):
        return
    seen.add(id(obj))
    for f in (obj.get("/Font") or {}).values():
        out.append(f.get_object())
    for x in (obj.get("/XObject") or {}).values():
        x = x.get_object()
        if x.get("/Resources"):
            _fonts(x["/Resources"], seen, out)


def _embedded(font) -> bool:
    desc = font.get("/FontDescriptor")
    if desc is None and font.get("/DescendantFonts"):
        desc = font["/DescendantFonts"][0].get_object().get("/FontDescriptor")
    desc = desc.get_object() if desc is not None else {}
    return any(k in desc for k in ("/FontFile", "/FontFile2", "/FontFile3"))


def _outline_titles(reader) -> list[str]:
    out = []

    def walk(items):
        for it in items:
            if isinstance(it, list):
                walk(it)
            else:
                out.append(it.title)

    walk(reader.outline)
    return out


def _norm(text: str) -> str:
    # Chromium maps some CJK glyphs to Kangxi radicals (⽤ for 用) in the text layer; NFKC folds them back
    # and writes the en dash of "Bradley–Terry" as U+2012 (figure dash): dashes compare equal
    return re.sub(r"[\u2010-\u2015]", "-", re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)))


def test_book_pdf(mkdocs_config):
    path = os.environ.get("RLHF_TOY_PDF")
    if not path:
        pytest.skip("set RLHF_TOY_PDF=site/rlhf-toy.pdf after `make pdf` (.ci/run does)")
    from pypdf import PdfReader

    reader = PdfReader(path)
    assert len(reader.pages) >= 150, f"{len(reader.pages)} pages: the print page lost chapters"
    fonts, seen = [], set()
    for page in reader.pages:
        _fonts(page["/Resources"], seen, fonts)
    # Skia (Chromium's PDF backend) writes CFF-outline OpenType fonts such as Noto Sans CJK as Type 3 fonts: the
    # glyph outlines are drawn inside the PDF. Every other font must carry its font file. Either way the PDF
    # shows the Chinese text on a machine without any CJK font.
    not_embedded = sorted(
        {str(f.get("/BaseFont")) for f in fonts if f.get("/Subtype") != "/Type3" and not _embedded(f)}
    )
    assert fonts and not not_embedded, f"fonts referenced but not embedded: {not_embedded}"
    # The text layer: poppler's pdftotext (C, seconds for the whole book) where installed, else pypdf (minutes).
    pdftotext = shutil.which("pdftotext")
    if pdftotext:
        text = subprocess.run(
            [pdftotext, "-enc", "UTF-8", path, "-"], capture_output=True, text=True, check=True
        ).stdout
    else:
        text = "\n".join(p.extract_text() or "" for p in reader.pages)
    leaks = sorted({text[max(0, m.start() - 30) : m.end() + 30] for m in RAW_TEX.finditer(text)})
    assert not leaks, f"raw TeX in the PDF text: {leaks[:5]}"
    n_cjk = sum(1 for c in text if "\u4e00" <= unicodedata.normalize("NFKC", c) <= "\u9fff")
    assert n_cjk > 50_000, f"only {n_cjk} Chinese characters in the text layer"
    flat, outline = _norm(text), _norm(" ".join(_outline_titles(reader)))
    site = Path(path).parent
    missing = []
    print_site = next(p["print-site"] for p in mkdocs_config["plugins"] if isinstance(p, dict) and "print-site" in p)
    excluded = print_site.get("exclude", [])  # pages left out of the print page (the claims ledger: a long table)
    for item in mkdocs_config["nav"]:
        for section, pages in item.items():
            for entry in pages if isinstance(pages, list) else [{section: pages}]:
                for _title, src in entry.items():
                    if not isinstance(src, str) or src.startswith(("notebooks/", "api/")):
                        continue  # notebooks and the API reference (a section of its own) are not in the PDF
                    if any(fnmatch.fnmatch(src, pattern) for pattern in excluded):
                        continue
                    html = site / ("" if src == "index.md" else src[:-3]) / "index.html"
                    h1 = BeautifulSoup(html.read_text(encoding="utf-8"), "html.parser").h1.get_text(strip=True)
                    h1 = _norm(h1.replace("¶", ""))
                    if h1 not in flat or h1 not in outline:
                        missing.append(h1)
    assert not missing, f"chapter titles missing from the PDF text or bookmarks: {missing}"
