"""Print the book to PDF: the print page of a built site (mkdocs-print-site-plugin) in headless Chromium.

    .venv/bin/python scripts/build_pdf.py [SITE_DIR] [--out PATH]     (make pdf: SITE_DIR=site)

The site directory is served on 127.0.0.1, `print_page/` is opened in Debian's Chromium (/usr/bin/chromium,
driven by playwright; nothing is downloaded), and the PDF is written once MathJax has typeset every formula and
the fonts are loaded (docs/javascripts/math-setup.js sets <html data-math="done">). Chromium embeds the fonts it
drew with (the CJK system fonts and MathJax's woff fonts) and writes PDF bookmarks from the headings
(`outline=True`); the footer carries page numbers. The default output is SITE_DIR/<extra.pdf of mkdocs.yml>,
the file the footer of every page links to. tests/site/test_pdf.py checks the result.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
FOOTER = (
    '<div style="font-size:8px;width:100%;text-align:center;color:#666">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)


def pdf_name() -> str:
    """`extra.pdf` of mkdocs.yml: the one place the PDF's file name is set."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # !ENV, !!python/... tags
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader)["extra"]["pdf"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _serve(site_dir: Path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


EAGER_IMAGES = """() => Promise.all([...document.images].map(img => {
  img.loading = 'eager';
  return img.complete ? Promise.resolve() : new Promise(done => { img.onload = img.onerror = done; });
}))"""


def build_pdf(site_dir: Path, out: Path, timeout_s: float = 900) -> dict:
    """Write the PDF of the print page of `site_dir` to `out`; return timings (seconds) and off-site requests."""
    from playwright.sync_api import sync_playwright

    if not (site_dir / "print_page" / "index.html").is_file():
        raise SystemExit(f"{site_dir}/print_page/index.html is missing: build the site first (mkdocs build)")
    t0 = time.monotonic()
    offsite: list[str] = []
    with _serve(site_dir) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(locale="zh-CN")
            page.on("request", lambda r: offsite.append(r.url) if not r.url.startswith(url) else None)
            page.emulate_media(media="print")
            page.goto(url + "print_page/", wait_until="load", timeout=timeout_s * 1000)
            page.wait_for_function("() => document.documentElement.dataset.math === 'done'", timeout=timeout_s * 1000)
            page.evaluate("() => document.fonts.ready.then(() => true)")
            # the site's figures load lazily (hooks/lazy_figures.py): load them all before printing
            page.evaluate(EAGER_IMAGES)
            loaded = time.monotonic() - t0
            out.parent.mkdir(parents=True, exist_ok=True)
            page.pdf(
                path=str(out),
                format="A4",
                margin={"top": "16mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
                print_background=True,
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER,
                outline=True,
                tagged=True,
            )
        finally:
            browser.close()
    return {"typeset_s": loaded, "total_s": time.monotonic() - t0, "offsite": sorted(set(offsite))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site_dir", nargs="?", default=str(ROOT / "site"), type=Path)
    ap.add_argument("--out", type=Path, help="default: SITE_DIR/<extra.pdf of mkdocs.yml>")
    args = ap.parse_args(argv)
    out = args.out or args.site_dir / pdf_name()
    info = build_pdf(args.site_dir, out)
    if info["offsite"]:
        print(f"requests to other hosts while printing: {info['offsite']}", file=sys.stderr)
        return 1
    print(
        f"{out}: {out.stat().st_size / 1e6:.1f} MB (typeset {info['typeset_s']:.0f} s, total {info['total_s']:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
