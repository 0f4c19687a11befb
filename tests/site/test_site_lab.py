"""The checkers on the lab site (lab.py): each deliberately broken page is reported by the same functions
that check the real site, and the good pages show the behaviour the chapters rely on."""

from __future__ import annotations

import pytest
from sitecheck import PAGE_PROBE, external_request, page_problems, served_ams_chars, static_problems, visit


def test_static_checker_catches_broken_anchors_and_offsite_script(builds):
    problems = static_problems(builds["lab"])
    assert any("bad_anchor/index.html: missing anchor: ../good/#no-such-anchor" in p for p in problems), problems
    assert any(
        "offsite/index.html: loads an off-site resource: https://cdn.example.com/lib.js" in p for p in problems
    ), problems
    # mkdocs-jupyter's default: id="" on all-Chinese headings while its TOC links to #_1, #_2
    assert any(p.startswith("notebooks/lab_raw/index.html: missing anchor: #_1") for p in problems), problems
    # nothing else is wrong, in particular not the hook-fixed notebook with the same Chinese headings
    # (the print page, made of all lab pages, inherits the off-site script of offsite.md)
    others = [p for p in problems if not p.startswith(("bad_anchor/", "offsite/", "notebooks/lab_raw/", "print_page/"))]
    assert not others, others


@pytest.mark.browser
def test_browser_catches_broken_formula_and_offsite_request(browser, lab_url, builds):
    page = browser.new_page()
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    results = {}
    ams_chars = served_ams_chars(builds["lab"])
    for path in ("bad_math/", "offsite/", "good/", "notebooks/lab/"):
        requests.clear()
        visit(page, lab_url + path)
        info = page.evaluate(PAGE_PROBE)
        results[path] = (
            info,
            page_problems(
                path, info, [u for u in requests if external_request(u)], "rlhf-toy/rlhf-toy", "main", ams_chars
            ),
        )
    page.close()

    bad_math = results["bad_math/"][1]
    assert any("TeX errors" in p and "notamacro" in p for p in bad_math), bad_math
    # unbalanced braces: MathJax never finds the end of the formula, which stays raw TeX on the page
    assert any("formulas not typeset" in p and "frac{1}{2" in p for p in bad_math), bad_math
    # \lesssim is drawn with MathJax's AMS font, which the site serves cut down to AMS_KEEP
    assert any("AMS font" in p and "AMS_KEEP" in p for p in bad_math), bad_math
    offsite = results["offsite/"][1]
    assert any("request to another host: https://cdn.example.com/lib.js" in p for p in offsite), offsite

    good_info, good_problems = results["good/"]
    assert not good_problems, good_problems
    assert good_info["n_mjx"] == good_info["n_math"] >= 5 and good_info["invisible_glyphs"] == 0


@pytest.mark.browser
def test_equation_numbers_eqref_and_prose_dollars(browser, lab_url):
    page = browser.new_page()
    visit(page, lab_url + "good/")
    facts = page.evaluate(r"""() => ({
      tags: [...document.querySelectorAll('mjx-assistive-mml mlabeledtr > mtd:first-child')].map(e => e.textContent),
      eqref: [...document.querySelectorAll('mjx-container a')].map(a => [a.getAttribute('href'),
              a.closest('mjx-container').querySelector('mjx-assistive-mml').textContent]),
      label_target: !!document.getElementById('mjx-eqn:eq:lab-loss'),
      prose: [...document.querySelectorAll('.md-content p')].map(p => p.innerText).find(t => t.includes('定价')),
    })""")
    page.close()
    assert "(1)" in "".join(facts["tags"]), facts
    assert facts["eqref"] == [["#mjx-eqn%3Aeq%3Alab-loss", "(1)"]], facts
    assert facts["label_target"], facts
    assert "$5" in facts["prose"] and "$10" in facts["prose"], facts


@pytest.mark.browser
def test_notebook_markdown_math_renders(browser, lab_url):
    page = browser.new_page()
    visit(page, lab_url + "notebooks/lab/")
    info = page.evaluate(PAGE_PROBE)
    text = page.evaluate("() => document.querySelector('.jp-RenderedMarkdown').innerText")
    page.close()
    assert info["n_mjx"] == 2 and info["invisible_glyphs"] == 0 and not info["raw_tex_text"], info
    assert "$5" in text and "$10" in text, text
