"""The built site in headless Chromium (Debian's /usr/bin/chromium driven by playwright; nothing is
downloaded). Every page is visited once per check group: desktop (requests, math, badge, fonts),
390 px (horizontal overflow), palettes (light/dark), search (every glossary term, Chinese and English)."""

from __future__ import annotations

import gzip
import re
import statistics
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from bs4 import BeautifulSoup
from sitecheck import (
    OVERFLOW_PROBE,
    PAGE_PROBE,
    external_request,
    overflow_problems,
    page_paths,
    page_problems,
    result_path,
    search,
    served_ams_chars,
    time_to_math,
    visit,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hooks"))
from _glossary_terms import load_terms  # noqa: E402

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


def _shot(page, shots_dir, name):
    if shots_dir:
        page.screenshot(path=str(shots_dir / f"{name}.png"), full_page=False)


MOBILE = 390


def test_every_page(browser, site_url, site_dir, mkdocs_config, shots_dir):
    """Each page once: at 1280 px no request leaves 127.0.0.1, every formula is typeset, visible and
    error-free, the Colab badge has the notebook's path, text uses the CJK system-font stack, chapter figures
    and notebook plots load and fit the column (`figure_problems`); then at 390 px nothing overflows sideways
    except code, math and tables, which scroll."""
    extra = mkdocs_config["extra"]
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN", color_scheme="light")
    page = ctx.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    problems, fonts, figures = [], set(), {}
    chapters, notebooks = _nav_pages(mkdocs_config, "正文"), _nav_pages(mkdocs_config, "笔记本")
    paths = page_paths(site_dir)
    ams_chars = served_ams_chars(site_dir)
    for path in paths:
        requests.clear()
        page.set_viewport_size({"width": 1280, "height": 900})
        visit(page, site_url + path)
        info = page.evaluate(PAGE_PROBE)
        if path in chapters or path in notebooks:  # figures load lazily: scroll each into view first
            page.evaluate(LOAD_LAZY_FIGURES)
            found, n = figure_problems(path, page.evaluate(FIGURE_PROBE), path in chapters)
            problems += found
            figures[path] = n
        page.set_viewport_size({"width": MOBILE, "height": 844})
        # the resize handler of math-setup.js is debounced by 100 ms; on a busy machine it can run much later, so
        # wait until it has checked the formulas at this width rather than a fixed time
        page.wait_for_function(f"document.documentElement.dataset.wideMathWidth === '{MOBILE}'", timeout=10_000)
        problems += overflow_problems(path or "/", page.evaluate(OVERFLOW_PROBE, MOBILE))
        external = sorted({u for u in requests if external_request(u)})
        problems += page_problems(
            path or "/", info, external, extra["repository"], extra.get("branch", "main"), ams_chars
        )
        fonts.add(info["body_font"])
    ctx.close()
    print("figures per chapter page:", {p: n for p, n in figures.items() if p in chapters})
    assert len(paths) >= 5 and len(chapters) >= 10 and len(notebooks) >= 10
    assert set(chapters + notebooks) <= set(figures), "every page of the nav was visited"
    assert not problems, "\n".join(problems)
    assert all(f.startswith('"PingFang SC"') and "Noto Sans CJK SC" in f for f in fonts), fonts


# Budgets of every page of the API reference (issue #26; the one-page reference was 2.7 MB, 8.5 s at 1280 px):
# gzipped bytes a page loads beyond what the home page loads (Material, MathJax, our CSS/JS), and seconds until
# its math is visible at 390 px (window.rlhfMath.visibleAt, as benchmarks/site_weight.py measures it). The test
# asserts the bytes and prints the seconds of one cold load; the median of several loads, which a 2-core machine
# running other work needs before a time means anything, is the benchmark's job (it took 70 s of every CI run here).
API_GZIP_BUDGET = 150_000
API_MATH_BUDGET_S = 2.0
API_RUNS = 1


def _gzip_size(site_dir: Path, url: str, base: str) -> int:
    rel = unquote(urlparse(url).path)[len(urlparse(base).path) :]
    f = site_dir / rel
    if f.is_dir() or rel.endswith("/") or not rel:
        f = f / "index.html"
    return len(gzip.compress(f.read_bytes(), 6)) if f.is_file() else 0


def test_api_pages_weight_and_time_to_math(browser, site_url, site_dir):
    """Each page of the API reference (api/) at 390 px: at most API_GZIP_BUDGET gzipped bytes beyond the assets
    the home page loads. The time until its math is visible (one cold load) is printed, not
    asserted: speed is a benchmark's job on this shared 2-core machine (`benchmarks/site_weight.py --also api/...`
    times pages against the API_MATH_BUDGET_S budget)."""
    mobile = {"width": MOBILE, "height": 844}
    shared = set(time_to_math(browser, site_url, mobile)["urls"])
    paths = [p for p in page_paths(site_dir) if p.startswith("api/")]
    assert len(paths) >= 7, paths
    report, problems = [], []
    for path in paths:
        runs = [time_to_math(browser, site_url + path, mobile) for _ in range(API_RUNS)]
        own = {u for r in runs for u in r["urls"] if u.startswith(site_url) and u not in shared}
        gz = sum(_gzip_size(site_dir, u, site_url) for u in own)
        t = statistics.median(r["t"] for r in runs)
        each = ", ".join(f"{r['t']:.2f}" for r in runs)
        report.append(
            f"{path:18} {gz / 1e3:6.1f} KB gzipped beyond shared ({len(own)} files), math visible {t:.2f} s "
            f"(runs {each}; typesetting {runs[0]['start']:.2f}-{runs[0]['end']:.2f} s)"
        )
        if gz > API_GZIP_BUDGET:
            problems.append(
                f"{path}: {gz / 1e3:.0f} KB gzipped beyond shared assets, over {API_GZIP_BUDGET / 1e3:.0f} KB"
            )
        if t > API_MATH_BUDGET_S:
            report[-1] += f"  (over the {API_MATH_BUDGET_S} s budget on this run)"
    print("\n".join(report))
    assert not problems, "\n".join(problems + report)


def _palette_pages(site_dir):
    """A chapter with the most formulas and the first notebook page."""
    chapters = [
        p
        for p in page_paths(site_dir)
        if p.endswith("/") and not p.startswith(("notebooks/", "api/", "glossary/")) and p
    ]

    def n_math(p):
        return (site_dir / p / "index.html").read_text(encoding="utf-8").count('class="arithmatex')

    best = max(chapters, key=n_math) if chapters else ""
    nbs = [p for p in page_paths(site_dir) if p.startswith("notebooks/")]
    return [best] + nbs[:1]


def test_light_and_dark_palettes(browser, site_url, site_dir, shots_dir):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN", color_scheme="light")
    page = ctx.new_page()
    problems = []
    for path in _palette_pages(site_dir):
        visit(page, site_url + path)
        light = page.evaluate(PAGE_PROBE)
        page.click("label[for='__palette_1']")  # the toggle shown in the light scheme
        page.wait_for_function("() => document.body.getAttribute('data-md-color-scheme') === 'slate'")
        page.wait_for_timeout(300)  # colour transition
        dark = page.evaluate(PAGE_PROBE)
        nb_bg = page.evaluate("""() => { const c = document.querySelector('.jp-Cell .jp-InputArea-editor, .jp-Cell .highlight-ipynb');
                                        return c ? getComputedStyle(c).backgroundColor : null; }""")
        _shot(page, shots_dir, f"dark-{path.strip('/').replace('/', '-') or 'index'}")
        page.click("label[for='__palette_0']")
        page.wait_for_function("() => document.body.getAttribute('data-md-color-scheme') === 'default'")
        for scheme, info in (("light", light), ("dark", dark)):
            if info["invisible_glyphs"] or info["hidden_containers"] or info["n_mjx"] != light["n_mjx"]:
                problems.append(f"{path} {scheme}: math not visible: {info}")
        if light["scheme"] != "default" or dark["scheme"] != "slate" or light["bg"] == dark["bg"]:
            problems.append(
                f"{path}: palette did not switch: {light['scheme']}/{light['bg']} -> {dark['scheme']}/{dark['bg']}"
            )
        if nb_bg and _lightness(nb_bg) > 0.6:
            problems.append(f"{path}: notebook code cells stay light in the dark palette ({nb_bg})")
    ctx.close()
    assert not problems, "\n".join(problems)


def _lightness(css_color: str) -> float:
    nums = [float(x) for x in re.findall(r"[\d.]+", css_color)[:3]]
    return sum(nums) / (3 * 255) if len(nums) == 3 else 0.0


def _defining_pages(site_dir) -> dict[str, str]:
    """term key -> site path of its first definition, read from the built glossary page."""
    soup = BeautifulSoup((site_dir / "glossary" / "index.html").read_text(encoding="utf-8"), "html.parser")
    out = {}
    for row in soup.select("table tr"):
        span = row.select_one("span[id^='term-']")
        if not span:
            continue
        link = row.find_all("td")[-1].find("a")
        href = link["href"].split("#")[0] if link else ""
        out[span["id"][len("term-") :]] = result_path(href, "/") if href else "glossary/"
    return out


TOP_ZH, TOP_EN = 3, 5
# Known misses, reported but not failed: the browser splits these compound queries into 答案/格式 + 奖励, and 奖励 is
# in the boosted tags of chapters 1, 3 and 8, so chapter 11 comes 4th. Fixing it needs query-side segmentation
# that keeps the user dictionary's words (an open item), not different tags. 截断 and 非对称截断 are the same kind of
# miss the other way round: the search matches a query as a prefix, so the tags 截断重要性权重 (chapter 6 cont. 2) and
# 截断比例 (chapter 14 cont.) also match 截断 (and 非对称截断, which the browser splits into 非对称 + 截断), and those
# pages, which use the word often, come before the defining pages (chapters 4 and 6 cont.), 5th instead of 3rd.
KNOWN_RANK_MISSES = {"答案奖励", "格式奖励", "截断", "非对称截断"}


def test_search_finds_each_term_on_its_defining_page(browser, site_url, site_dir, shots_dir):
    terms = load_terms(ROOT / "docs" / "terms.yml")
    defining = _defining_pages(site_dir)
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    page = ctx.new_page()
    page.goto(site_url, wait_until="load")
    page.click("input.md-search__input")
    problems, report = [], []
    for term in terms:
        want = defining.get(term.key, "glossary/")
        queries = {term.zh: TOP_ZH}  # a term spelt the same in both languages (pass@k) is searched once:
        queries.setdefault(term.en, TOP_EN)  # typing the same text again would not re-run the search
        for query, top in queries.items():
            hits = [result_path(h["href"], site_url) for h in search(page, query)]
            rank = hits.index(want) + 1 if want in hits else None
            report.append(f"{query!r}: {want} at {rank} of {hits[:6]}")
            if (rank is None or rank > top) and not (
                query in KNOWN_RANK_MISSES and rank is not None and rank <= top + 2
            ):
                problems.append(f"search {query!r}: defining page {want} at rank {rank}, results {hits[:6]}")
    search(page, "优势函数")
    _shot(page, shots_dir, "search-desktop")
    ctx.close()
    print("\n".join(report))
    assert not problems, "\n".join(problems)


FIGURE_PROBE = r"""() => {
  const col = document.querySelector('.md-content__inner');
  const column = col ? col.getBoundingClientRect().width : 0;
  const info = (i) => ({src: (i.getAttribute('src') || '').slice(0, 60), alt: (i.getAttribute('alt') || '').trim(),
                        ok: i.complete && i.naturalWidth > 0, natural: i.naturalWidth, width: i.getBoundingClientRect().width});
  return {
    column,
    figures: [...document.querySelectorAll('.md-content img')].filter(i => /(^|\/)(figures|data)\/[^/]+\.svg$/.test(i.getAttribute('src') || '')).map(info),
    plots: [...document.querySelectorAll('.jp-RenderedImage img')].map(info),
    scroll: document.documentElement.scrollWidth,
    inner: window.innerWidth,
  };
}"""

# Figures load lazily (hooks/lazy_figures.py): scroll each into view and wait until it has loaded (or failed).
LOAD_LAZY_FIGURES = r"""async () => {
  for (const img of document.querySelectorAll('.md-content img[loading="lazy"]')) {
    img.scrollIntoView();
    if (!img.complete) await new Promise(done => { img.onload = img.onerror = done; setTimeout(done, 5000); });
  }
  window.scrollTo(0, 0);
}"""


def _nav_pages(mkdocs_config, section: str) -> list[str]:
    """Site paths ('ppo/', 'notebooks/ppo/') of the nav section `section` (正文 or 笔记本)."""
    entries = next(item[section] for item in mkdocs_config["nav"] if isinstance(item, dict) and section in item)
    return [re.sub(r"\.(md|ipynb)$", "/", next(iter(e.values()))) for e in entries]


def figure_problems(path: str, info: dict, chapter: bool) -> tuple[list[str], int]:
    """A chapter page shows at least one figure from docs/figures or docs/data that loaded and has alt text, none
    wider than the column; a notebook page's plots are no wider than the column and at least 300 px wide (or their
    natural width). Returns the problems and the number of good figures."""
    problems = []
    if chapter:
        good = [f for f in info["figures"] if f["ok"] and f["alt"]]
        if not good:
            problems.append(
                f"{path}: no figure from docs/figures or docs/data that loaded with alt text: {info['figures']}"
            )
        problems += [
            f"{path}: figure not loaded or without alt: {f}" for f in info["figures"] if not (f["ok"] and f["alt"])
        ]
        problems += [
            f"{path}: figure wider than the column: {f}" for f in info["figures"] if f["width"] > info["column"] + 1
        ]
        return problems, len(good)
    for f in info["plots"]:
        if not f["ok"] or f["width"] > info["column"] + 1 or f["width"] < min(300, f["natural"]) - 1:
            problems.append(f"{path}: plot {f['width']:.0f} px wide in a {info['column']:.0f} px column: {f}")
    return problems, 0
