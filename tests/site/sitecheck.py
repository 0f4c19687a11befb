"""Checks of a built MkDocs site, shared by the site tests, the negative tests and benchmarks/site_weight.py.

Static checks (stdlib HTML parsing, no browser):
    static_problems(site_dir)  broken internal links and #anchors, and any resource LOADED from another host
Browser checks (playwright driving the system Chromium, nothing downloaded):
    PAGE_PROBE                 JS returning math/visibility/badge/font facts for one page
    page_problems(info, ...)   turns one page's facts into a list of problems
    overflow_problems(page)    horizontal overflow at the current viewport width
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# Files the footer links to that are written into the site after `mkdocs build`: the book's PDF (`make pdf`,
# scripts/build_pdf.py; its name is extra.pdf in mkdocs.yml, tests/site/test_pdf.py checks they agree).
BUILT_LATER = {"rlhf-toy.pdf"}
# The print page (mkdocs-print-site-plugin) is the PDF's source, not a page readers navigate to: it is left
# out of the per-page checks (tests/site/test_pdf.py checks it and the PDF).
PRINT_PAGE = "print_page/"
# The sub-path the site is also built and served under (tests/site/test_site_subpath.py): the seed tutorial's path.
SUBPATH = "/advanced/rlhf-llm/"


# --- building and serving ---------------------------------------------------------------------------


def build(site_dir: Path, config_file: Path | None = None, *, wait: bool = True, site_url: str | None = None):
    """`mkdocs build --strict` into site_dir (run from the repo root: snippet and jieba paths are relative).

    `site_url` sets SITE_URL, which mkdocs.yml reads (`site_url: !ENV [SITE_URL, ...]`), as a deployment does."""
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site_dir)]
    if config_file:
        cmd += ["-f", str(config_file)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    if site_url:
        env["SITE_URL"] = site_url
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        return proc
    out, _ = proc.communicate()
    return proc.returncode, out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _PrefixHandler(_QuietHandler):
    """Serves the site only under `prefix` (like a project site on GitHub Pages); anything else is a 404."""

    prefix = "/"

    def translate_path(self, path):
        if not path.startswith(self.prefix):
            return str(Path(self.directory) / "__outside_the_site__")
        return super().translate_path("/" + path[len(self.prefix) :])


@contextlib.contextmanager
def serve(site_dir: Path, prefix: str = "/", port: int = 0):
    """Serve site_dir on 127.0.0.1 (a free port unless given) under the URL path `prefix`; yields the base URL."""
    handler_cls = type("Handler", (_PrefixHandler,), {"prefix": prefix})
    handler = functools.partial(handler_cls, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{prefix}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def have_chromium() -> bool:
    return Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is not None


def page_paths(site_dir: Path) -> list[str]:
    """URL paths of every HTML page of the site ('' for the home page), 404.html included, the print page not."""
    out = []
    for html in sorted(site_dir.rglob("*.html")):
        rel = html.relative_to(site_dir).as_posix()
        path = rel[: -len("index.html")] if rel.endswith("index.html") else rel
        if path != PRINT_PAGE:
            out.append(path)
    return out


def page_kind(path: str) -> str:
    if path.startswith("notebooks/"):
        return "notebook"
    if path.startswith("api/"):
        return "api"
    if path in ("", "404.html", "glossary/"):
        return "other"
    return "chapter"


# --- static checks -----------------------------------------------------------------------------------

_LOAD_ATTRS = {
    "script": ["src"],
    "img": ["src", "srcset"],
    "iframe": ["src"],
    "source": ["src", "srcset"],
    "video": ["src", "poster"],
    "audio": ["src"],
    "embed": ["src"],
    "object": ["data"],
    "track": ["src"],
    "input": ["src"],
}
_LINK_NOT_LOADED = {"canonical", "alternate", "author", "license", "help", "next", "prev", "search", "bookmark"}
_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""")
_SCRIPT_URL = re.compile(r"""(?:import\(|from\s)\s*['"](https?:)?//[^'"]+['"]""")


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.loads: list[str] = []
        self._in = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        for key in ("id", "name"):
            if a.get(key) and (key == "id" or tag == "a"):
                self.ids.add(a[key])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        for attr in _LOAD_ATTRS.get(tag, []):
            if a.get(attr):
                if attr == "srcset":
                    self.loads += [part.split()[0] for part in a[attr].split(",") if part.strip()]
                else:
                    self.loads.append(a[attr])
        if tag == "link" and a.get("href"):
            rels = set(a.get("rel", "").lower().split())
            (self.links if rels and rels <= _LINK_NOT_LOADED else self.loads).append(a["href"])
        if a.get("style"):
            self.loads += [u or i for u, i in _CSS_URL.findall(a["style"])]
        if tag in ("style", "script"):
            self._in = tag
            self._text = []

    def handle_data(self, data):
        if self._in:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == self._in:
            text = "".join(self._text)
            if tag == "style":
                self.loads += [u or i for u, i in _CSS_URL.findall(text)]
            else:
                self.loads += [m.group(0) for m in _SCRIPT_URL.finditer(text)]
            self._in = None


def _is_external(url: str) -> bool:
    u = urlparse(url)
    return bool(
        u.scheme in ("http", "https")
        or url.startswith("//")
        or (u.scheme and u.scheme not in ("data", "blob", "mailto", "javascript", "tel"))
    )


def parse_site(site_dir: Path) -> dict[Path, _Page]:
    pages = {}
    for html in site_dir.rglob("*.html"):
        p = _Page()
        p.feed(html.read_text(encoding="utf-8", errors="replace"))
        pages[html.resolve()] = p
    return pages


def static_problems(site_dir: Path, prefix: str = "/") -> list[str]:
    """Broken internal links / anchors and off-site resource loads in the built HTML.

    `prefix` is the path of site_url: root-absolute URLs such as `/notebooks/x/x.ipynb` (404.html,
    mkdocs-jupyter's download link) are mapped onto the site directory through it.
    Off-site <a href> links (GitHub, Colab) are fine: they are links, not loaded resources.
    """
    site_dir = site_dir.resolve()
    pages = parse_site(site_dir)
    problems = []
    for src, page in sorted(pages.items()):
        rel = src.relative_to(site_dir).as_posix()
        if rel == PRINT_PAGE + "index.html":
            # mkdocs-print-site-plugin rewrites links into anchors of its one page; links to the pages it leaves
            # out (notebooks, API) and to the glossary's term anchors do not resolve there (in the PDF they do not
            # jump). Its loads are still checked: the PDF must not need another host either.
            problems += [f"{rel}: loads an off-site resource: {u}" for u in page.loads if _is_external(u)]
            continue
        for url in page.loads:
            if _SCRIPT_URL.fullmatch(url) or _is_external(url):
                problems.append(f"{rel}: loads an off-site resource: {url}")
        for url in page.links + [u for u in page.loads if not _is_external(u) and not _SCRIPT_URL.fullmatch(u)]:
            if _is_external(url) or url.startswith(("mailto:", "javascript:", "data:", "tel:", "blob:")):
                continue
            path, frag = urldefrag(url)
            path = unquote(urlparse(path).path)
            if not path:
                target = src
            elif path.startswith("/"):
                if not path.startswith(prefix):
                    problems.append(f"{rel}: link outside the site: {url}")
                    continue
                target = (site_dir / path[len(prefix) :]).resolve()
            else:
                target = (src.parent / path).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists() and not (target.parent == site_dir and target.name in BUILT_LATER):
                problems.append(f"{rel}: broken link: {url}")
            elif frag and target.suffix == ".html":
                frag = unquote(frag)
                if target in pages and frag not in pages[target].ids:
                    problems.append(f"{rel}: missing anchor: {url}")
    return problems


# --- browser checks -----------------------------------------------------------------------------------

WAIT_MATH = """() => {
  const html = document.documentElement;
  if (!document.querySelector('.arithmatex, .jp-RenderedLatex')) return true;
  return html.dataset.math === 'done';
}"""

# Facts about the current page. "Invisible" MathJax glyphs: mjx-c elements whose ::before has no content
# (MathJax CHTML draws every glyph through ::before; without its CSS the formula is blank but present).
# Zero-width characters such as U+2061 (function application, after \log) have content "" on purpose.
# Formulas in a navigation copy that is hidden at this width (the table of contents inside the mobile
# drawer) are not counted as hidden; raw TeX left in a table-of-contents entry is.
PAGE_PROBE = r"""() => {
  const q = (s) => [...document.querySelectorAll(s)];
  const glyphs = q('mjx-c');
  const invisible = glyphs.filter(c => { const v = getComputedStyle(c, '::before').content; return !v || v === 'none' || v === 'normal'; });
  const arith = q('.arithmatex');
  const untypeset = arith.filter(e => !e.querySelector('mjx-container'));
  const hidden = q('mjx-container').filter(e => !e.closest('.md-nav')).filter(e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e); return r.width === 0 || r.height === 0 || s.visibility === 'hidden' || s.display === 'none'; });
  const badge = document.querySelector('a.colab-link');
  return {
    title: document.title,
    n_math: arith.length + q('.jp-RenderedLatex').length,
    n_mjx: q('mjx-container').length,
    n_glyphs: glyphs.length,
    invisible_glyphs: invisible.length,
    untypeset: untypeset.map(e => e.textContent.slice(0, 60)),
    hidden_containers: hidden.length,
    merror: q('mjx-merror, [data-mjx-error]').map(e => e.getAttribute('data-mjx-error') || e.textContent.slice(0, 60)),
    tex_errors: (window.rlhfMath && window.rlhfMath.errors) || [],
    // characters drawn with MathJax's AMS font (its glyph is the ::before content of mjx-c.TEX-A)
    ams_chars: [...new Set(q('mjx-c.TEX-A').map(c => getComputedStyle(c, '::before').content.replace(/^"|"$/g, '')))],
    raw_tex_text: q('.md-content p, .md-content li, .md-content td, .jp-RenderedMarkdown, .md-nav--secondary .md-nav__link').filter(e => !e.closest('pre, code, .arithmatex, mjx-container')).map(e => { const c = e.cloneNode(true); c.querySelectorAll('code, pre, mjx-container, .arithmatex, script, style').forEach(x => x.remove()); return c.textContent; }).filter(t => /\\\(|\\\[|\\begin\{|\$\$|\\frac|\\hat|\\pi_|\\eqref|\\ref\{/.test(t)).map(t => t.trim().slice(0, 80)),
    colab_href: badge ? badge.getAttribute('href') : null,
    nb_url: (document.querySelector('.nb-links a[download]') || {}).href || null,
    body_font: getComputedStyle(document.body).fontFamily,
    code_font: (() => { const c = document.querySelector('.md-typeset code'); return c ? getComputedStyle(c).fontFamily : null; })(),
    scheme: document.body.getAttribute('data-md-color-scheme'),
    bg: getComputedStyle(document.body).backgroundColor,
    meta_updated: (document.querySelector('.page-meta time') || {}).textContent || null,
    errata: (document.querySelector('a.page-meta__errata') || {}).href || null,
  };
}"""


def served_ams_chars(site_dir: Path) -> set[str]:
    """Characters in the AMS math font the site serves (hooks/vendor_mathjax.py subsets it)."""
    from fontTools.ttLib import TTFont

    font = site_dir / "assets/vendor/mathjax/output/chtml/fonts/woff-v2/MathJax_AMS-Regular.woff"
    return {chr(c) for c in TTFont(font).getBestCmap()}


def page_problems(
    path: str, info: dict, external: list[str], repository: str, branch: str, ams_chars: set[str] | None = None
) -> list[str]:
    """Problems on one page from PAGE_PROBE facts and the off-site requests it made.

    `ams_chars`: the characters of the served AMS font (`served_ams_chars`); a formula that needs another
    one would be drawn in a fallback font."""
    p = []
    missing = sorted(set(info["ams_chars"]) - ams_chars) if ams_chars is not None else []
    if missing:
        p.append(
            f"{path}: math needs {missing} from MathJax's AMS font, which the site serves cut down: "
            "add them to AMS_KEEP in hooks/vendor_mathjax.py"
        )
    for url in external:
        p.append(f"{path}: request to another host: {url}")
    if info["merror"] or info["tex_errors"]:
        p.append(f"{path}: TeX errors: {info['tex_errors'] or info['merror']}")
    if info["untypeset"]:
        p.append(f"{path}: {len(info['untypeset'])} formulas not typeset, e.g. {info['untypeset'][:2]}")
    if info["invisible_glyphs"]:
        p.append(f"{path}: {info['invisible_glyphs']} of {info['n_glyphs']} math glyphs invisible")
    if info["hidden_containers"]:
        p.append(f"{path}: {info['hidden_containers']} math containers with zero size / hidden")
    if info["raw_tex_text"]:
        p.append(f"{path}: LaTeX source visible as text: {info['raw_tex_text'][:2]}")
    if path.startswith("notebooks/") and path.endswith("/"):
        name = path.rstrip("/").split("/")[-1]
        want = f"https://colab.research.google.com/github/{repository}/blob/{branch}/docs/notebooks/{name}.ipynb"
        if info["colab_href"] != want:
            p.append(f"{path}: Colab badge links to {info['colab_href']!r}, expected {want!r}")
    if path != "404.html" and (not info["meta_updated"] or not info["errata"]):
        p.append(f"{path}: no last-updated date or errata link")
    return p


OVERFLOW_PROBE = r"""(vw) => {
  // vw: the intended viewport width (a mobile layout viewport grows when something overflows)
  const doc = document.documentElement.scrollWidth;
  const allowed = 'pre, .highlight, .highlight-ipynb, div.arithmatex, mjx-container[display="true"], .md-typeset__scrollwrap, .md-typeset__table, .jp-OutputArea-output, .jp-RenderedImage, .md-sidebar, .md-search, .md-nav, .md-tabs';
  const offenders = [];
  for (const el of document.querySelectorAll('.md-main *, .md-footer *, .md-header *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if (r.right <= vw + 1 && r.left >= -1) continue;
    let ok = false;  // inside an allowed wide block or a horizontally scrolling/clipping box that fits: fine
    for (let a = el; a && a !== document.body; a = a.parentElement) {
      if (a.matches(allowed)) { ok = true; break; }
      const ox = getComputedStyle(a).overflowX;
      if (a !== el && ox !== 'visible' && a.getBoundingClientRect().right <= vw + 1) { ok = true; break; }
    }
    if (ok) continue;
    const cls = (el.className && el.className.baseVal !== undefined ? el.className.baseVal : el.className) || '';
    offenders.push({el, text: `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}${cls ? '.' + String(cls).trim().split(/\s+/).join('.') : ''} right=${Math.round(r.right)} in "${((el.closest('p, li, td, h1, h2, h3, div') || el).textContent || '').trim().slice(0, 50)}"`});
  }
  // report the outermost offender of each nested group
  const tops = offenders.filter(o => !offenders.some(p => p !== o && p.el.contains(o.el)));
  return { vw, doc, offenders: tops.slice(0, 8).map(o => o.text) };
}"""


def overflow_problems(path: str, result: dict) -> list[str]:
    p = []
    if result["doc"] > result["vw"]:
        p.append(f"{path}: page scrolls sideways at {result['vw']} px (scrollWidth {result['doc']})")
    for o in result["offenders"]:
        p.append(f"{path}: sticks out of the {result['vw']} px viewport: {o}")
    return p


def external_request(url: str) -> bool:
    u = urlparse(url)
    if u.scheme in ("data", "blob", "about", "chrome", "chrome-extension"):
        return False
    return u.hostname not in LOCAL_HOSTS


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


# Time until the page's math is visible: window.rlhfMath.visibleAt (docs/javascripts/math-setup.js sets it, on
# the performance.now() clock that starts at navigation, once MathJax has typeset the page and its fonts have
# loaded), the same figure benchmarks/site_weight.py reports; typesetStart/End bracket MathJax's own work.
TIME_TO_MATH = r"""() => {
  const m = window.rlhfMath || {};
  const loading = [...document.fonts].filter(f => f.status === 'loading').length;
  return { t: m.visibleAt, start: m.typesetStart, end: m.typesetEnd, loading, now: performance.now() };
}"""


def time_to_math(browser, url: str, viewport: dict) -> dict:
    """One cold load of url (a fresh browser context) at `viewport`: seconds until its math is visible (t),
    MathJax's typesetting start and end, and every response the page loaded (urls)."""
    ctx = browser.new_context(viewport=viewport, locale="zh-CN", color_scheme="light")
    try:
        page = ctx.new_page()
        urls: list[str] = []
        page.on("response", lambda r: urls.append(r.url.split("#")[0]))
        visit(page, url)
        r = page.evaluate(TIME_TO_MATH)
        if r["loading"]:  # fonts still coming: wait and take the later time
            page.evaluate("() => document.fonts.ready.then(() => true)")
            r = page.evaluate(TIME_TO_MATH) | {"t": page.evaluate("() => performance.now()")}
        page.wait_for_timeout(300)  # late font requests
        return {
            "t": (r["t"] or 0) / 1000,
            "start": (r["start"] or 0) / 1000,
            "end": (r["end"] or 0) / 1000,
            "urls": sorted(set(urls)),
        }
    finally:
        ctx.close()


def visit(page, url: str, timeout: float = 20_000):
    """Open url and wait until its math is typeset and fonts are loaded."""
    page.goto(url, wait_until="load")
    page.wait_for_function(WAIT_MATH, timeout=timeout)
    page.evaluate("() => document.fonts.ready.then(() => true)")


# --- search --------------------------------------------------------------------------------------------

SEARCH_RESULTS = r"""() => [...document.querySelectorAll('li.md-search-result__item')].map(li => {
  const a = li.querySelector('a'); return {href: a.getAttribute('href'), title: a.innerText.split('\n')[0].replace(/\u200b/g, '')}; })"""


def search(page, query: str, timeout: float = 10_000) -> list[dict]:
    """Type `query` into Material's search box (already focused on `page`); return the result pages in order.

    The result counter is set to a sentinel first: Material rewrites it when the worker's answer for the
    new query is rendered, so a changed counter means the list belongs to this query."""
    page.evaluate(
        "() => { const m = document.querySelector('.md-search-result__meta'); if (m) m.textContent = '__pending__'; }"
    )
    box = page.locator("input.md-search__input")
    box.fill(query)
    box.press("End")  # Material's search listens to keyup, not input
    page.wait_for_function(
        """() => { const m = document.querySelector('.md-search-result__meta');
                   return m && m.textContent !== '__pending__' && !/初始化|键入/.test(m.textContent); }""",
        timeout=timeout,
    )
    return page.evaluate(SEARCH_RESULTS)


def result_path(href: str, base: str) -> str:
    """Site-relative page path ('grpo/') of a search-result href."""
    path = urlparse(href).path if href.startswith("http") else href
    path = path.split("#")[0]
    base_path = urlparse(base).path
    if path.startswith(base_path):
        path = path[len(base_path) :]
    while path.startswith("../"):
        path = path[3:]
    return path.lstrip("./") if path not in (".", "./") else ""
