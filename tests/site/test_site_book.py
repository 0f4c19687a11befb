"""The built site as a book: edition and PDF link in every footer, llms.txt, references page, print page."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

from bs4 import BeautifulSoup
from sitecheck import BUILT_LATER, PRINT_PAGE, page_paths

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))
from edition import book_version  # noqa: E402


def _html(site_dir: Path, path: str) -> str:
    return (site_dir / path / ("" if path.endswith(".html") else "index.html")).read_text(encoding="utf-8")


def mkdocs_config_site_url() -> str:
    """site_url as the build saw it (SITE_URL, else the default in mkdocs.yml)."""
    import os

    return os.environ.get("SITE_URL", "http://127.0.0.1:8000/")


def _nav_pages(nav) -> list[tuple[str, str]]:
    out = []
    for item in nav:
        if isinstance(item, str):  # a section's index page (API 参考: api/index.md)
            out.append(("", item))
            continue
        for title, value in item.items():
            if isinstance(value, list):
                out += _nav_pages(value)
            else:
                out.append((title, value))
    return out


def test_every_page_shows_the_edition_and_links_the_pdf(site_dir, mkdocs_config):
    assert BUILT_LATER == {mkdocs_config["extra"]["pdf"]}
    want = f"第 {book_version()} 版"
    problems = []
    for path in page_paths(site_dir):
        soup = BeautifulSoup(_html(site_dir, path), "html.parser")
        edition = soup.select_one(".md-copyright__edition")
        link = edition.select_one("a.edition__pdf") if edition else None
        if not edition or want not in edition.get_text():
            problems.append(f"{path or '/'}: footer does not say {want}")
        # relative to the page; 404.html is served at any depth, so MkDocs writes its links from the site root
        depth = path.count("/") if not path.endswith(".html") else 0
        base = urlparse(mkdocs_config_site_url()).path if path == "404.html" else "../" * depth
        if not link or link["href"] != base + mkdocs_config["extra"]["pdf"]:
            problems.append(f"{path or '/'}: no 下载 PDF link to the site's {mkdocs_config['extra']['pdf']}")
    assert not problems, "\n".join(problems)


def test_llms_txt_lists_every_chapter(site_dir, mkdocs_config):
    llms = (site_dir / "llms.txt").read_text(encoding="utf-8")
    full = (site_dir / "llms-full.txt").read_text(encoding="utf-8")
    pages = [(t, p) for t, p in _nav_pages(mkdocs_config["nav"]) if p.endswith(".md") and not p.startswith("api/")]
    missing = [p for _, p in pages if f"/{p[:-3] if p != 'index.md' else ''}".rstrip("/") + "/" not in llms]
    assert not missing, f"llms.txt does not list {missing} (add them to the llmstxt sections in mkdocs.yml)"
    for _title, path in pages:
        if path.endswith(".md") and path not in ("index.md", "changelog.md"):
            h1 = BeautifulSoup(_html(site_dir, path[:-3] + "/"), "html.parser").h1.get_text(" ", strip=True)
            assert h1.replace("¶", "").strip()[:12] in full, f"llms-full.txt lacks {path} ({h1})"


def test_references_page_has_every_cited_key(site_dir):
    refs = _html(site_dir, "references/")
    anchors = set(re.findall(r'id="ref-([\w-]+)"', refs))
    cited = set()
    for path in page_paths(site_dir):
        cited |= set(re.findall(r'href="[^"]*references/#ref-([\w-]+)"', _html(site_dir, path)))
    assert cited, "no footnote links to the references page"
    assert cited <= anchors, f"cited but not on the references page: {sorted(cited - anchors)}"
    assert "\\(" not in BeautifulSoup(refs, "html.parser").get_text()


def test_print_page_is_built_but_not_searched(site_dir):
    assert (site_dir / PRINT_PAGE / "index.html").is_file()
    docs = json.loads((site_dir / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    assert not [d["location"] for d in docs if d["location"].startswith(PRINT_PAGE)]
