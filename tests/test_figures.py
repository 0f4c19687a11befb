"""The chapter figures are in sync with the code: every figure in the registry of scripts/figures.py
(scripts/figs/registry.py; chapter 8's two are drawn by scripts/run_experiments.py from its cache) is redrawn into
a temporary directory and compared byte for byte with the committed SVG; each one is embedded in a chapter page
with alt text."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

import rlhf_toy  # noqa: F401  (pinned numerics before any tensor work)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import figures  # noqa: E402


@pytest.fixture(scope="module")
def redrawn(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("figures")
    return {p.name: p for p in figures.draw(out)}


def _committed(name: str) -> Path:
    return figures.OUT / name if (figures.OUT / name).exists() else ROOT / "docs" / "data" / name


def test_every_figure_is_in_sync_with_the_code(redrawn):
    stale = [name for name, path in redrawn.items() if path.read_bytes() != _committed(name).read_bytes()]
    assert not stale, f"stale figures {stale}: run make figures (scripts/figures.py) and commit them"


def test_figures_keep_text_as_text_and_carry_no_date(redrawn):
    for name, path in redrawn.items():
        svg = path.read_text(encoding="utf-8")
        assert "<text" in svg and "<dc:date>" not in svg, name
        width_pt = float(re.search(r'<svg[^>]*width="([\d.]+)pt"', svg).group(1))
        assert width_pt <= figures.WIDTH * 72 + 0.5, f"{name} is {width_pt} pt wide"


def test_tiny_lm_cache_comes_from_the_current_code():
    cache = json.loads(figures.TINY_LM_CACHE.read_text(encoding="utf-8"))
    assert cache["code_hash"] == figures.tiny_lm_code_hash(), (
        "run scripts/figures.py --refresh-cache and commit docs/data/tiny_lm_figures.json"
    )


def test_every_figure_is_on_a_page_with_alt_text(chapter_pages):
    used = {}
    for page in chapter_pages:
        for alt, src in re.findall(r"!\[([^\]]*)\]\(((?:figures|data)/[^)]+\.svg)\)", page.read_text(encoding="utf-8")):
            assert len(alt) >= 10, f"{page.name}: {src} needs alt text that says what it shows"
            used.setdefault(Path(src).name, []).append(page.name)
    missing = sorted({f"{name}.svg" for name in figures.FIGURES} - set(used))
    assert not missing, f"figures on no chapter page: {missing}"
    bare = [p.name for p in chapter_pages if not any(p.name in pages for pages in used.values())]
    assert not bare, f"chapter pages without a figure: {bare}"


@pytest.fixture(scope="module")
def chapter_pages() -> list[Path]:
    """The pages of the nav section 正文 (chapter pages), in order."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    section = text[text.index("\n  - 正文:") :]
    section = section[: section.index("\n  - ", 1)]
    pages = [ROOT / "docs" / m for m in re.findall(r":\s*([\w-]+\.md)\s*$", section, flags=re.M)]
    assert len(pages) >= 10, pages
    return pages
