"""The bibliography (docs/references.bib) against the pages that cite it.

A page that names a paper cites it: every arXiv number on a chapter page, and every "Surname et al., YEAR" /
"Surname & Other (YEAR)" mention, must match an entry of the bibliography (by eprint, or by first author's
surname and year), and the page must carry that entry's citation key `[@key]` (which mkdocs-bibtex turns into a
footnote linked to the references page, hooks/references.py). Conversely every entry is cited by some page, so the
references page lists nothing the book does not use.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from pathlib import Path

import pytest
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIB = parse_file(str(DOCS / "references.bib")).entries
CITE = re.compile(r"\[@([\w-]+)\]")  # the citation syntax mkdocs-bibtex reads
ARXIV = re.compile(r"arxiv\.org/(?:abs|pdf)/(\d{4}\.\d{4,5})|arXiv[ :]+(\d{4}\.\d{4,5})")
# "Rafailov et al., 2023", "Christiano et al. (2017)", "Shah et al.（2025", "Tang & Munos（2025", "Williams, 1992"
NAMED = re.compile(
    r"(?<![\w'’-])([A-Z][A-Za-z'’-]+)(?:、[A-Z][A-Za-z'’-]+)*(?: et al\.| & [A-Z][A-Za-z'’-]+| 与 [A-Z][A-Za-z'’-]+|, [A-Z][A-Za-z'’-]+ & [A-Z][a-z]+)?"
    r"[,，]?\s?[（(]?((?:19|20)\d\d)\b"
)
CHAPTERS = sorted(p for p in DOCS.glob("*.md") if p.name not in {"references.md", "errata.md"})


def _text(path: Path) -> str:
    return unicodedata.normalize("NFC", path.read_text(encoding="utf-8"))


def _surname(entry) -> str:
    persons = entry.persons.get("author", [])
    if not persons:
        return ""
    p = persons[0]
    last = " ".join(p.last_names) or " ".join(p.first_names)
    return re.sub(r"[{}\\]", "", last).replace("'", "’")


BY_EPRINT = {e.fields["eprint"]: k for k, e in BIB.items() if "eprint" in e.fields}
BY_AUTHOR_YEAR = defaultdict(set)
for _k, _e in BIB.items():
    for _year in {_e.fields.get("year", "")} | set(re.findall(r"(?:19|20)\d\d", _e.fields.get("note", ""))):
        BY_AUTHOR_YEAR[(_surname(_e).replace("’", "'").lower(), _year)].add(_k)


def _named_papers(text: str) -> list[tuple[str, set[str]]]:
    """(mention, keys it may refer to) for every arXiv number and author-year mention in `text`."""
    out = []
    for m in ARXIV.finditer(text):
        arxiv = m.group(1) or m.group(2)
        out.append((f"arXiv {arxiv}", {BY_EPRINT[arxiv]} if arxiv in BY_EPRINT else set()))
    for m in NAMED.finditer(text):
        name, year = m.group(1), m.group(2)
        keys = BY_AUTHOR_YEAR.get((name.replace("’", "'").lower(), year))
        if keys is None and " et al." not in m.group(0) and "&" not in m.group(0) and "与" not in m.group(0):
            continue  # a capitalised word before a year ("TRL 2025") is not a citation unless it names authors
        out.append((m.group(0), keys or set()))
    return out


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.name)
def test_every_named_paper_is_in_the_bibliography_and_cited(page):
    text = _text(page)
    cited = set(CITE.findall(text))
    problems = []
    for mention, keys in _named_papers(text):
        if not keys:
            problems.append(f"{mention!r} is not in docs/references.bib")
        elif not keys & cited:
            problems.append(f"{mention!r} names {sorted(keys)} but the page has no [@{sorted(keys)[0]}]")
    assert not problems, f"{page.name}:\n" + "\n".join(sorted(set(problems)))


def test_citation_keys_exist():
    unknown = {f"{p.name}: [@{key}]" for p in DOCS.glob("*.md") for key in CITE.findall(_text(p)) if key not in BIB}
    assert not unknown, f"citations of keys missing from docs/references.bib: {sorted(unknown)}"


def test_every_entry_is_cited():
    cited = {key for p in DOCS.glob("*.md") for key in CITE.findall(_text(p))}
    assert not set(BIB) - cited, f"entries no page cites (cite them or remove them): {sorted(set(BIB) - cited)}"


def test_entries_have_what_a_reference_needs():
    problems = []
    for key, e in BIB.items():
        if not e.persons.get("author") or "title" not in e.fields or "year" not in e.fields:
            problems.append(f"{key}: needs author, title and year")
        if not ({"eprint", "doi", "url"} & set(e.fields)):
            problems.append(f"{key}: needs an arXiv eprint, a DOI or a URL (the link readers click)")
        if "eprint" in e.fields and not re.fullmatch(r"\d{4}\.\d{4,5}", e.fields["eprint"]):
            problems.append(f"{key}: eprint {e.fields['eprint']!r} is not an arXiv number")
    assert not problems, "\n".join(problems)
