"""The site built for a sub-path (SITE_URL=http://127.0.0.1:<port>/advanced/rlhf-llm/, as the Pages workflow
sets SITE_URL) and served only under that path: links stay inside it, and in Chromium the key pages load every
asset (MathJax and its fonts, the notebook CSS, images), typeset their math and search works."""

from __future__ import annotations

import pytest
from sitecheck import PAGE_PROBE, SUBPATH, external_request, search, static_problems, visit

pytestmark = pytest.mark.browser
KEY_PAGES = ["", "dpo/", "kl/", "notebooks/dpo/", "references/"]


def test_links_stay_under_the_subpath(builds):
    problems = static_problems(builds["subpath"], prefix=SUBPATH)
    assert not problems, "\n".join(problems)


def test_key_pages_under_the_subpath(browser, subpath_url):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    page = ctx.new_page()
    failed, offsite, fonts = [], [], []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("request", lambda r: offsite.append(r.url) if external_request(r.url) else None)
    page.on("response", lambda r: fonts.append(r.url) if r.url.endswith(".woff") and r.ok else None)
    problems = []
    for path in KEY_PAGES:
        visit(page, subpath_url + path)
        info = page.evaluate(PAGE_PROBE)
        if info["untypeset"] or info["invisible_glyphs"] or info["merror"] or info["tex_errors"]:
            problems.append(f"{path or '/'}: math not rendered: {info['untypeset'][:2]} {info['merror'][:2]}")
    hits = search(page, "优势函数") if page.click("input.md-search__input") is None else []
    ctx.close()
    assert not failed, f"requests that failed under {SUBPATH}: {failed[:10]}"
    assert not offsite, f"requests to other hosts: {offsite[:5]}"
    assert fonts and all(SUBPATH in u for u in fonts), f"MathJax fonts not loaded from the sub-path: {fonts[:3]}"
    assert not problems, "\n".join(problems)
    assert hits and all(h["href"].startswith(("../", "./", SUBPATH)) or SUBPATH in h["href"] for h in hits), hits
