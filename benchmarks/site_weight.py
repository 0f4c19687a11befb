"""Page weight and time-to-visible-math of the built site (a benchmark script, not a test).

    .venv/bin/python benchmarks/site_weight.py            # builds the site into a temp dir first
    .venv/bin/python benchmarks/site_weight.py --site site  # or measures an existing build

Loads every page in headless Chromium (the system /usr/bin/chromium) from a local server and records every
response. "Shared" = resources every page loads (Material's bundle and CSS, MathJax, our CSS/JS); a page's
weight is what it loads beyond those: its HTML, page-specific images, MathJax fonts for its glyphs, ...
Sizes are raw and gzip -6 (what a typical static host sends). Reported per page type (chapter, notebook,
API). Then the heaviest page is loaded 5 times, each in a fresh browser context (cold cache), and the time
from navigation start until its math is typeset with fonts loaded is reported (median and every run, with the
moment MathJax started and finished typesetting, and the 1-minute load average before each run: this is a
2-core machine and other work on it moves these times a lot). `--also kl/ api/` times more pages the same way.
The size of search/search_index.json, which every page downloads, is printed too.

Targets (issue #3): a chapter page under 150 KB gzipped beyond shared assets; math visible within 1 s.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "site"))
from sitecheck import build, launch, page_kind, page_paths, serve, visit  # noqa: E402

CHAPTER_TARGET_GZ = 150_000
MATH_TARGET_S = 1.0


def _file_for(site: Path, url: str) -> Path | None:
    path = unquote(urlparse(url).path).lstrip("/")
    f = site / path
    if f.is_dir() or path == "" or path.endswith("/"):
        f = f / "index.html"
    return f if f.is_file() else None


def _sizes(f: Path, cache: dict) -> tuple[int, int]:
    if f not in cache:
        data = f.read_bytes()
        cache[f] = (len(data), len(gzip.compress(data, 6)))
    return cache[f]


def measure_weights(browser, url: str, site: Path):
    loads: dict[str, set[str]] = {}
    for path in page_paths(site):
        if path == "404.html":
            continue
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        seen: set[str] = set()
        page.on("response", lambda r, seen=seen: seen.add(r.url.split("#")[0]))
        visit(page, url + path)
        page.wait_for_timeout(300)  # late font / worker requests
        ctx.close()
        loads[path] = {u for u in seen if u.startswith(url)}
    shared = set.intersection(*loads.values())
    # MathJax's three basic fonts are loaded by every page with math but not by math-free pages
    # (home, glossary, a notebook without formulas): count them as shared too, once, in a second figure.
    with_math = [u for p, u in loads.items() if any("/mathjax/output/" in x for x in u)]
    shared_math = set.intersection(*with_math) if with_math else shared
    cache: dict = {}
    shared_raw = sum(_sizes(f, cache)[0] for u in shared if (f := _file_for(site, u)))
    shared_gz = sum(_sizes(f, cache)[1] for u in shared if (f := _file_for(site, u)))
    per_page, per_page_m = {}, {}
    for path, urls in loads.items():
        for base, table in ((shared, per_page), (shared | shared_math, per_page_m)):
            own = [f for u in urls - base if (f := _file_for(site, u))]
            table[path] = (sum(_sizes(f, cache)[0] for f in own), sum(_sizes(f, cache)[1] for f in own), len(own))
    return shared, (shared_raw, shared_gz), per_page, shared_math - shared, per_page_m


TIME_TO_MATH = r"""() => {
  const m = window.rlhfMath || {};
  const t = m.visibleAt || null;
  const loading = [...document.fonts].filter(f => f.status === 'loading').length;
  const glyphs = [...document.querySelectorAll('mjx-c')];
  const invisible = glyphs.filter(c => { const v = getComputedStyle(c, '::before').content; return !v || v === 'none' || v === 'normal'; }).length;
  return { t, start: m.typesetStart, end: m.typesetEnd, loading, glyphs: glyphs.length, invisible, now: performance.now() };
}"""


def time_to_math(browser, url: str, runs: int = 5) -> list[dict]:
    """Per cold load: seconds until math is visible (t), typesetting start/end, 1-minute load average."""
    times = []
    for _ in range(runs):
        load = os.getloadavg()[0]
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        visit(page, url)
        r = page.evaluate(TIME_TO_MATH)
        if r["loading"]:  # fonts still coming: wait and take the later time
            page.evaluate("() => document.fonts.ready.then(() => true)")
            r = page.evaluate(TIME_TO_MATH) | {"t": page.evaluate("() => performance.now()")}
        if r["invisible"]:
            raise SystemExit(f"{url}: {r['invisible']} invisible glyphs after typesetting")
        times.append(
            {"t": r["t"] / 1000, "start": (r["start"] or 0) / 1000, "end": (r["end"] or 0) / 1000, "load": load}
        )
        ctx.close()
    return times


def report_times(path: str, times: list[dict], label: str) -> str:
    med = statistics.median(x["t"] for x in times)
    lines = [
        f"time until math is visible on {label} ({path}), {len(times)} cold loads: median {med:.2f} s"
        f"  {'OK (< 1 s)' if med < MATH_TARGET_S else 'OVER the 1 s target'}"
    ]
    for x in times:
        lines.append(
            f"    {x['t']:.2f} s  (typesetting {x['start']:.2f}-{x['end']:.2f} s, then fonts; load average {x['load']:.2f})"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, help="an existing build (default: build into a temp dir)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--also", nargs="*", default=[], metavar="PATH", help="more pages to time, e.g. kl/ api/")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        site = args.site
        if site is None:
            site = Path(tmp) / "site"
            rc, out = build(site)
            if rc:
                print(out)
                return rc
        with serve(site) as url, sync_playwright() as pw:
            browser = launch(pw)
            shared, (sraw, sgz), per_page, math_fonts, per_page_m = measure_weights(browser, url, site)
            print(
                f"shared by all {len(per_page)} pages: {len(shared)} files, {sraw / 1e3:.0f} KB raw, {sgz / 1e3:.0f} KB gzipped"
            )
            for u in sorted(shared):
                print(f"    {urlparse(u).path}")
            by_kind = defaultdict(list)
            print(
                "  + on every page with math: "
                + ", ".join(urlparse(u).path.rsplit("/", 1)[-1] for u in sorted(math_fonts))
            )
            by_kind, by_kind_m = defaultdict(list), defaultdict(list)
            print(
                f"\n{'page':32} {'kind':9} {'files':>5} {'raw KB':>8} {'gzip KB':>8} {'gzip KB, math fonts shared':>27}"
            )
            for path, (raw, gz, n) in sorted(per_page.items(), key=lambda kv: -kv[1][1]):
                kind = page_kind(path)
                by_kind[kind].append((gz, raw, path))
                by_kind_m[kind].append((per_page_m[path][1], per_page_m[path][0], path))
                print(
                    f"{(path or '/'):32} {kind:9} {n:5d} {raw / 1e3:8.1f} {gz / 1e3:8.1f} {per_page_m[path][1] / 1e3:27.1f}"
                )
            for title, table in (
                ("beyond assets shared by ALL pages", by_kind),
                ("beyond shared assets, MathJax's basic fonts counted as shared", by_kind_m),
            ):
                print(f"\nper page type, {title} (gzipped): median / max")
                for kind, rows in sorted(table.items()):
                    gzs = [r[0] for r in rows]
                    flag = ""
                    if kind == "chapter":
                        flag = "  OK (< 150 KB)" if max(gzs) < CHAPTER_TARGET_GZ else "  OVER the 150 KB target"
                    print(
                        f"  {kind:9} {statistics.median(gzs) / 1e3:7.1f} KB / {max(gzs) / 1e3:7.1f} KB ({max(rows)[2]}){flag}"
                    )
            mathy = [
                p
                for p in per_page
                if (site / p / "index.html").is_file()
                and 'class="arithmatex' in (site / p / "index.html").read_text(encoding="utf-8")
            ]
            heaviest = max(mathy, key=lambda p: per_page[p][1])
            index = site / "search" / "search_index.json"
            if index.is_file():
                raw, gz = _sizes(index, cache={})
                print(
                    f"\nsearch/search_index.json (loaded by every page): {raw / 1e3:.0f} KB raw, {gz / 1e3:.0f} KB gzipped"
                )
            print()
            print(
                report_times(heaviest, time_to_math(browser, url + heaviest, args.runs), "the heaviest page with math")
            )
            for path in args.also:
                print(report_times(path, time_to_math(browser, url + path, args.runs), "a page"))
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
