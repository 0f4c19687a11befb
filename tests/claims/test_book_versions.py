"""The book names the library versions it describes once, on the home page; other pages name other versions only
with a reason.

Rule for pages (prose outside fenced code blocks): a release version of TRL, verl, OpenRLHF, transformers,
accelerate, datasets or peft — written `v0.28`, `v1.4.0`, or after the library's name, as in `TRL 1.16.0` — must either
be the pinned version (requirements-libs.txt), or stand in a paragraph, list item or table row (with its table's
header row) that contrasts it with the pinned version (names that too) or says why an older version is named: one
of the words 起、以前、之前、以后、引入、加入、移除、
删除、升级、重构、当前版本、历史、改为、曾, or a version range such as `v0.17–v0.21`. Commit hashes are sources,
not versions, and are not checked here.
"""

from __future__ import annotations

import re

from .pinned import DOCS, LIBS, LOCK

LIBRARY_NAMES = r"(?:TRL|trl|verl|OpenRLHF|transformers|accelerate|datasets|peft)"
VERSION = re.compile(rf"(?:\bv(\d+\.\d+(?:\.\d+)?)\b|{LIBRARY_NAMES}\s+v?(\d+\.\d+(?:\.\d+)?)\b)")
REASON = re.compile(
    r"起|以前|之前|以后|引入|加入|移除|删除|升级|重构|当前版本|历史|改为|曾|v?\d+\.\d+\s*[–~-]\s*v?\d+\.\d+"
)
PINNED = {v for v in LIBS.values()} | {".".join(v.split(".")[:2]) for v in LIBS.values()}


def prose_units(text: str) -> list[tuple[int, str]]:
    """(line number, text) of each paragraph, list item and table row (with its header row), code blocks skipped."""
    units, unit, start, header, in_code = [], [], 0, None, False

    def flush():
        if unit:
            units.append((start, " ".join(unit)))
            unit.clear()

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            flush()
            in_code = not in_code
            continue
        if in_code:
            continue
        if stripped.startswith("|"):
            flush()
            header = stripped if header is None else header
            units.append((number, stripped if header == stripped else f"{header} {stripped}"))
            continue
        header = None
        if not stripped or re.match(r"(?:[-*]|\d+\.)\s", stripped):
            flush()
        if stripped:
            start = start if unit else number
            unit.append(stripped)
    flush()
    return units


def unexplained_versions(text: str) -> list[str]:
    found = []
    for number, unit in prose_units(text):
        for match in VERSION.finditer(unit):
            named = match[1] or match[2]
            names_pinned = any((m[1] or m[2]) in PINNED for m in VERSION.finditer(unit))
            if named not in PINNED and not names_pinned and not REASON.search(unit):
                found.append(f"line {number}: {named!r} in “{unit[:120]}”")
    return found


def test_pages_name_other_versions_only_with_a_reason():
    problems = {page.name: unexplained_versions(page.read_text(encoding="utf-8")) for page in DOCS.glob("*.md")}
    problems = {page: found for page, found in problems.items() if found}
    assert not problems, problems


def test_version_rule_accepts_history_and_rejects_a_bare_old_version():
    assert unexplained_versions("TRL 1.16.0 的默认是 `beta=0.0`。") == []
    assert unexplained_versions("`sigmoid_norm` 是 v1.4 起才有的。") == []
    assert unexplained_versions("| 默认 | TRL v0.17–v0.21 |") == []
    assert unexplained_versions("```python\n# v0.28 的做法\n```") == []
    assert len(unexplained_versions("TRL v0.28 的默认是 `beta=0.04`。")) == 1
    assert len(unexplained_versions("在 TRL 0.19.1 上运行。")) == 1
    assert unexplained_versions("v0.28 除以掩码之和，TRL 1.16.0 截到至少 1。") == []


def test_home_page_names_the_pinned_versions():
    """docs/index.md: “本书对照的库版本是 TRL 1.16.0（连同 transformers …）、verl 0.9.1 与 PyTorch 2.13.0。”"""
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    paragraph = next(p for p in text.split("\n\n") if p.startswith("本书对照的库版本是"))
    expected = {
        "TRL": LIBS["trl"],
        "transformers": LIBS["transformers"],
        "accelerate": LIBS["accelerate"],
        "datasets": LIBS["datasets"],
        "peft": LIBS["peft"],
        "verl": LIBS["verl"],
        "PyTorch": LOCK["torch"],
    }
    named = dict(re.findall(r"(TRL|transformers|accelerate|datasets|peft|verl|PyTorch) (\d+\.\d+\.\d+)", paragraph))
    assert named == expected


def test_version_rule_sees_the_versions_pages_name():
    """A parser that found nothing would pass the page test vacuously."""
    named = [
        m
        for page in DOCS.glob("*.md")
        for _, unit in prose_units(page.read_text(encoding="utf-8"))
        for m in VERSION.finditer(unit)
    ]
    assert len(named) >= 10
