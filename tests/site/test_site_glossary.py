"""The terminology file docs/terms.yml: chapters use the listed spellings, the search dictionary knows
every term, and the generated glossary page lists every term with a working first-definition link."""

from __future__ import annotations

import sys
from pathlib import Path

from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))
from _glossary_terms import find_variants, load_terms  # noqa: E402

TERMS = load_terms(ROOT / "docs" / "terms.yml")


def test_chapters_use_no_variant_spellings():
    """E.g. 优势值 → 优势, 参照模型 → 参考模型, 裁剪 → 截断 (prose only; code, math and links are skipped)."""
    hits = []
    for md in sorted((ROOT / "docs").glob("*.md")):
        for h in find_variants(md.read_text(encoding="utf-8"), TERMS):
            hits.append(f"docs/{md.name}:{h.lineno}: “{h.variant}” → “{h.term.zh}”: {h.line[:80]}")
    assert not hits, "variant spellings (see docs/terms.yml):\n" + "\n".join(hits)


def test_variant_scanner_on_a_sample():
    sample = "\n".join(
        [
            "优势值很大。",  # 1: variant
            "价值模型不是值模型。",  # 2: 值模型 inside 价值模型 is fine, the second one is not
            "`优势值` 在代码里可以。",  # 3: inline code: skipped
            "```python",
            "x = '参照模型'",  # 5: fenced code: skipped
            "```",
            "$\\text{裁剪}$ 在公式里。",  # 7: math: skipped
            "偏离策略的样本。",  # 8: allowed context of 离策略
            "被最大长度 $L$ 截断的回答。",  # 9: a space in a variant matches blanked math: 最大长度 截断 → 超长截停
            "比率截断到 $[1-\\epsilon, 1+\\epsilon]$，截断阈值是 $\\epsilon$，价值截断范围是 $\\epsilon_V$。",  # 10: clip
            "先截断对数比率，再给 KL 截断。",  # 11: clamp: 截断对数比率, KL 截断 → 限幅
        ]
    )
    found = [(h.lineno, h.variant) for h in find_variants(sample, TERMS)]
    expected = [(1, "优势值"), (2, "值模型"), (9, "最大长度 截断"), (11, "截断对数比率"), (11, "KL 截断")]
    assert found == expected, found


def test_every_term_is_in_the_jieba_dictionary():
    words = {
        line.split()[0]
        for line in (ROOT / "docs" / "jieba_userdict.txt").read_text(encoding="utf-8").splitlines()
        if line.strip()
    }
    han = [s for t in TERMS for s in t.spellings if all("\u4e00" <= c <= "\u9fff" for c in s)]  # not “KL 散度”
    missing = [s for s in han if s not in words]
    assert not missing, f"add to docs/jieba_userdict.txt (e.g. '优势函数 20 n'): {missing}"


def test_glossary_page_lists_every_term(site_dir):
    soup = BeautifulSoup((site_dir / "glossary" / "index.html").read_text(encoding="utf-8"), "html.parser")
    ids = {s["id"] for s in soup.select("span[id^='term-']")}
    assert ids == {t.anchor for t in TERMS}
    nav = (site_dir / "index.html").read_text(encoding="utf-8")
    assert 'href="glossary/"' in nav, "术语表 is not in the nav"
