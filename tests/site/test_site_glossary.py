"""The terminology file docs/terms.yml: chapters use the listed spellings, the search dictionary knows
every term, and the generated glossary page lists every term with a working first-definition link."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))
from _glossary_terms import (  # noqa: E402
    definition_targets,
    find_variants,
    forward_uses,
    link_around,
    link_forward_uses,
    load_terms,
)

TERMS = load_terms(ROOT / "docs" / "terms.yml")
NOT_CHAPTERS = {"glossary.md", "references.md", "errata.md", "changelog.md", "claims.md"}


def reading_path() -> list[str]:
    """The home page and the chapter pages in nav order (mkdocs.yml), as hooks/glossary.py sees them."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    pages = re.findall(r":\s+([\w./-]+\.md)\s*$", nav, re.M)
    return [p for p in pages if "/" not in p and p not in NOT_CHAPTERS]


def test_terms_are_defined_before_use_on_the_reading_path():
    """Home → ch. 1 → ch. 2 → …: a term's first use on a page comes after its definition (earlier page, or earlier
    on the same page), or links to the definition. The glossary hook links such a use automatically; a use that is
    already a link must point to the defining page (e.g. 优势 in ch. 1 links to ch. 2, where it is defined)."""
    order = reading_path()
    assert order[:3] == ["index.md", "overview.md", "policy-gradient.md"], order
    texts = {page: (ROOT / "docs" / page).read_text(encoding="utf-8") for page in order}
    targets = definition_targets([(p, texts[p]) for p in order[1:]], TERMS, pinned=set(order))
    problems, linked_count = [], 0
    for page in order:
        linked = link_forward_uses(texts[page], page, order, targets, TERMS)
        for term, use, uri, _anchor in forward_uses(linked, page, order, targets, TERMS):
            line = linked.split("\n")[use.lineno - 1]
            target = link_around(line, use.col, len(use.text))
            where = f"docs/{page}:{use.lineno}: {term.zh}"
            if target is None:
                problems.append(f"{where}: used before its definition in {uri} and not linked")
            elif target.partition("#")[0] not in (uri, "" if uri == page else uri, "glossary.md"):
                problems.append(f"{where}: links to {target}, but the reader meets its definition in {uri}")
            else:
                linked_count += 1
    assert not problems, "\n".join(problems)
    assert linked_count > 0  # the hook did link forward uses


def test_chapters_use_no_variant_spellings():
    """E.g. 优势值 → 优势, 参照模型 → 参考模型, 裁剪 → 截断 (prose only; code, math and links are skipped)."""
    hits = []
    for md in sorted((ROOT / "docs").glob("*.md")):
        if md.name == "claims.md":  # generated from the tests' comments, which quote the spellings they check
            continue
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
