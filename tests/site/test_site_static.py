"""Static checks of the built site (no browser): links and anchors, nothing loaded from another host,
edit/勘误 links and dates, search index without LaTeX, notebook pages without the 600 KB of JupyterLab CSS."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from bs4 import BeautifulSoup
from sitecheck import page_paths, static_problems


def test_links_anchors_and_offsite_loads(site_dir):
    problems = static_problems(site_dir)
    assert not problems, "\n".join(problems)


def test_no_web_fonts_requested(site_dir):
    """theme.font is false: no Google Fonts link anywhere (HTML or CSS)."""
    hits = []
    for f in list(site_dir.rglob("*.html")) + list(site_dir.rglob("*.css")):
        text = f.read_text(encoding="utf-8", errors="replace")
        if "fonts.googleapis.com" in text or "fonts.gstatic.com" in text:
            hits.append(str(f.relative_to(site_dir)))
    assert not hits, f"Google Fonts referenced in {hits}"


def test_every_page_has_date_and_errata_link(site_dir, mkdocs_config):
    repo = mkdocs_config["extra"]["repository"]
    problems = []
    for path in page_paths(site_dir):
        if path == "404.html":
            continue
        html = (site_dir / path / ("" if path.endswith(".html") else "index.html")).read_text(encoding="utf-8")
        aside = re.search(r'<aside class="page-meta".*?</aside>', html, re.S)
        meta = BeautifulSoup(aside.group(0), "html.parser").aside if aside else None
        if meta is None:
            problems.append(f"{path or '/'}: no page-meta footer")
            continue
        date = meta.select_one("time")
        if not date or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date.get("datetime", "")):
            problems.append(f"{path}: no last-updated date")
        errata = meta.select_one("a.page-meta__errata")
        url = urlparse(errata["href"]) if errata else None
        if not url or url.netloc != "github.com" or url.path != f"/{repo}/issues/new":
            problems.append(f"{path}: errata link {errata and errata['href']!r} is not an issue form of {repo}")
            continue
        q = parse_qs(url.query)
        title, body = q.get("title", [""])[0], q.get("body", [""])[0]
        if f"（{path or '/'}）" not in title or f"/{path}" not in body:
            problems.append(f"{path}: errata issue does not name the page: title={title!r}")
        edit = meta.select_one("a.page-meta__edit")
        if not edit or not edit["href"].startswith(f"https://github.com/{repo}/edit/"):
            problems.append(f"{path}: no edit link")
    assert not problems, "\n".join(problems)


def test_repo_url_not_set(mkdocs_config):
    """repo_url makes Material fetch api.github.com from the reader's browser (stars/forks widget)."""
    assert "repo_url" not in mkdocs_config


_TEX = re.compile(r"\\\(|\\\[|\\begin\{|\\frac|\\hat\b|\\pi_|\\log\\|\$[^$\s][^$]*\\[a-zA-Z]+[^$]*\$")


def test_search_index_has_no_latex_outside_code(site_dir):
    """Math (display and inline, chapters, docstrings, notebooks) is kept out of the search index."""
    docs = json.loads((site_dir / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    leaks = []
    for d in docs:
        text = re.sub(r"<pre>.*?</pre>|<code>.*?</code>", " ", d["text"], flags=re.S)
        m = _TEX.search(text)
        if m:
            leaks.append(f"{d['location']}: …{text[max(0, m.start() - 30) : m.end() + 30]}…")
    assert not leaks, "LaTeX in search index:\n" + "\n".join(leaks[:20])


def test_notebook_pages_are_light(site_dir):
    """The ~590 KB of inline JupyterLab CSS is pruned to what the page uses (hooks/notebook_slim.py)."""
    heavy = []
    for html in (site_dir / "notebooks").rglob("index.html"):
        text = html.read_text(encoding="utf-8")
        css = sum(len(m) for m in re.findall(r"<style[^>]*>(.*?)</style>", text, re.S))
        if css > 60_000 or "text/x-mathjax-config" in text or '<script src="">' in text:
            heavy.append(f"{html.relative_to(site_dir)}: {css} bytes of inline CSS")
    assert not heavy, heavy


def test_chapter_figures_load_lazily(site_dir):
    """hooks/lazy_figures.py: every figure of the book on a built page is fetched only when scrolled near (page weight)."""
    eager = []
    for f in site_dir.rglob("index.html"):
        if f.parent.name == "print_page":
            continue  # the print page's figures are switched to eager loading by scripts/build_pdf.py
        for tag in re.findall(
            r'<img\b[^>]*\bsrc="[^"]*(?:figures|data)/[^"/]+\.svg"[^>]*>', f.read_text(encoding="utf-8")
        ):
            if 'loading="lazy"' not in tag:
                eager.append(f"{f.relative_to(site_dir)}: {tag[:120]}")
    assert not eager, "\n".join(eager)


def test_old_api_anchors_land_on_a_link_to_the_new_place(site_dir):
    """The API reference was one page (api.md, URL api/); it is now api/index.md (same URL) plus one page per layer.
    Every anchor the one page had, before and after the package was organised in layers (tests/data/
    api_anchors_one_page.txt), is an element of api/index.html whose table row links to that object on its
    layer page, where the object's heading has the new dotted path as its id (hooks/api_index.py)."""
    listed = Path(__file__).resolve().parents[1] / "data" / "api_anchors_one_page.txt"
    old = [line.strip() for line in listed.read_text(encoding="utf-8").splitlines() if line.startswith("rlhf_toy")]
    assert len(old) > 300
    index = BeautifulSoup((site_dir / "api" / "index.html").read_text(encoding="utf-8"), "html.parser")
    ids_on: dict[str, set[str]] = {}
    problems = []
    for anchor in old:
        el = index.find(id=anchor)
        row = el.find_parent("tr") if el else None
        link = row.find("a", href=True) if row else None
        if link is None:
            problems.append(f"api/#{anchor}: no table row with a link")
            continue
        page, _, frag = link["href"].partition("#")
        if page not in ids_on:
            html = site_dir / "api" / page / "index.html"
            soup = BeautifulSoup(html.read_text(encoding="utf-8"), "html.parser") if page and html.is_file() else None
            ids_on[page] = {t["id"] for t in soup.find_all(id=True)} if soup else set()
        if not frag.startswith("rlhf_toy.") or frag not in ids_on[page] or not index.find("span", id=frag):
            problems.append(f"api/#{anchor}: its row links to {link['href']!r}, not to an object heading")
    assert not problems, "\n".join(problems[:20])
