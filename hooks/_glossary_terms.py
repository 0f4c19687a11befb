"""The terminology file (docs/terms.yml) and a Markdown "prose" scanner, shared by hooks/glossary.py
and tests/site/test_glossary.py.

`prose_lines(markdown)` yields every line of a Markdown page with everything that is not prose blanked
out by spaces of the same width (fenced code, inline code, math, HTML tags and comments, link targets,
snippet includes), so columns of what remains still index the original line.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ANCHOR_PREFIX = "term-"


@dataclass
class Term:
    key: str
    en: str
    zh: str
    also: list[str] = field(default_factory=list)
    symbol: str = ""
    code: list[str] = field(default_factory=list)
    defined_in: str = ""
    variants: list[str] = field(default_factory=list)
    allow: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def anchor(self) -> str:
        return ANCHOR_PREFIX + self.key

    @property
    def spellings(self) -> list[str]:
        """Accepted Chinese spellings, longest first."""
        return sorted({self.zh, *self.also}, key=len, reverse=True)


def load_terms(path: str | Path) -> list[Term]:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a YAML list of terms")
    terms, keys = [], set()
    for i, item in enumerate(data):
        try:
            term = Term(**item)
        except TypeError as e:
            raise ValueError(f"{path}: entry {i} ({item!r}): {e}") from None
        if not re.fullmatch(r"[a-z][-a-z0-9]*", term.key) or term.key in keys:
            raise ValueError(f"{path}: entry {i}: key {term.key!r} must be unique lowercase [a-z][-a-z0-9]*")
        keys.add(term.key)
        terms.append(term)
    return terms


# --- Markdown prose scanner ------------------------------------------------------------------------

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
_BLANK_INLINE = [
    re.compile(r"<!--.*?-->"),  # HTML comments (pytest-codeblocks markers)
    re.compile(r"(`+)(?:(?!\1).)+?\1"),  # inline code
    re.compile(r"\$\$.+?\$\$"),  # one-line display math
    re.compile(r"(?<![\\$])\$(?!\s)(?:\\.|[^$\\])+?(?<!\s)\$"),  # inline math $...$
    re.compile(r"\\\(.+?\\\)"),  # \( ... \)
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"</?[A-Za-z][^>]*>"),  # HTML tags
    re.compile(r"\{[:#.][^}]*\}"),  # attr_list
]


def _blank(line: str, pattern: re.Pattern) -> str:
    return pattern.sub(lambda m: " " * len(m.group(0)), line)


@dataclass
class ProseLine:
    lineno: int  # 1-based
    text: str  # the original line with non-prose blanked out
    heading: bool  # a heading, admonition/details title or table-free structural line


def prose_lines(markdown: str):
    """Yield ProseLine for every line of `markdown` that is not inside code or display math."""
    fence = None  # (char, length) of the open code fence
    in_math: str | bool = False  # the closer we wait for
    in_comment = False
    for lineno, raw in enumerate(markdown.split("\n"), 1):
        if fence:
            m = _FENCE.match(raw)
            if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= fence[1] and not raw[m.end() :].strip():
                fence = None
            continue
        m = _FENCE.match(raw)
        if m:
            fence = (m.group(2)[0], len(m.group(2)))
            continue
        stripped = raw.strip()
        if in_comment:
            if "-->" in raw:
                in_comment = False
            continue
        if stripped.startswith("<!--") and "-->" not in stripped:
            in_comment = True
            continue
        if in_math:  # the closer that matches the opener: $$ / \\] / \\end{env}
            if (
                (in_math == "$$" and stripped.endswith("$$"))
                or (in_math == "\\[" and stripped.endswith("\\]"))
                or (in_math.startswith("\\end{") and in_math in stripped)
            ):
                in_math = False
            continue
        if stripped == "$$" or (stripped.startswith("$$") and not (len(stripped) > 2 and stripped.endswith("$$"))):
            in_math = "$$"
            continue
        if stripped.startswith("\\[") and not stripped.endswith("\\]"):
            in_math = "\\["
            continue
        m_env = re.match(r"\\begin\{([^}]*)\}", stripped)
        if m_env and f"\\end{{{m_env.group(1)}}}" not in stripped:
            in_math = f"\\end{{{m_env.group(1)}}}"
            continue
        if stripped.startswith("--8<--") or stripped.startswith(":::"):
            continue
        line = raw
        for pattern in _BLANK_INLINE:
            line = _blank(line, pattern)
        heading = bool(re.match(r"\s*(#{1,6}\s|!!!|\?\?\?|===)", raw))
        yield ProseLine(lineno, line, heading)


@functools.lru_cache(maxsize=64)
def _prose_tuple(markdown: str) -> tuple[ProseLine, ...]:
    """prose_lines(markdown) computed once per text: hooks/glossary.py looks up every term (about 70) in every
    chapter, which rescanned each chapter once per term (3.6 s of a 30 s build). Read-only: do not mutate."""
    return tuple(prose_lines(markdown))


def _covered(text: str, start: int, end: int, allowed: list[str]) -> bool:
    """True if [start, end) lies inside an occurrence of one of `allowed` in `text`."""
    for word in allowed:
        i = text.find(word, max(0, end - len(word)))
        while i != -1 and i <= start:
            if i + len(word) >= end:
                return True
            i = text.find(word, i + 1)
    return False


@dataclass
class VariantHit:
    lineno: int
    col: int
    variant: str
    term: Term
    line: str


def variant_pattern(variant: str) -> re.Pattern:
    """A variant matches literally, except that a space in it matches any run of whitespace, or none:
    "最大长度 截断" finds 最大长度截断 and 被最大长度 $L$ 截断 (the math is blanked to spaces), "KL 截断" finds
    KL截断."""
    return re.compile(r"\s*".join(re.escape(part) for part in variant.split()))


def find_variants(markdown: str, terms: list[Term]) -> list[VariantHit]:
    """Occurrences of a listed variant spelling in the prose of `markdown` (see `variant_pattern`).

    An occurrence that lies inside an accepted spelling of any term (e.g. 值模型 inside 价值模型) or
    inside one of the term's `allow` contexts is not reported.
    """
    accepted = [s for t in terms for s in t.spellings]
    hits = []
    for pl in prose_lines(markdown):
        for term in terms:
            for variant in term.variants:
                for m in variant_pattern(variant).finditer(pl.text):
                    if not _covered(pl.text, m.start(), m.end(), accepted + term.allow):
                        original = markdown.split("\n")[pl.lineno - 1]
                        hits.append(VariantHit(pl.lineno, m.start(), variant, term, original.strip()))
    return hits


@dataclass
class Occurrence:
    lineno: int
    col: int
    text: str  # the spelling found
    bold: bool  # written as **text**


def first_occurrence(markdown: str, term: Term) -> Occurrence | None:
    """Where `term` is defined in `markdown`: its first bold use (**优势函数**), else its first use in prose.

    Headings and admonition titles are skipped (an anchor there would disturb the TOC).
    The result is cached (`mkdocs serve` asks again for every unchanged chapter on each rebuild): do not mutate it.
    """
    return _first_occurrence(markdown, tuple(term.spellings))


@functools.lru_cache(maxsize=4096)
def _first_occurrence(markdown: str, spellings: tuple[str, ...]) -> Occurrence | None:
    # Blanking replaces characters by spaces, so a spelling without a space that is absent from the raw text
    # cannot occur in its prose either: skip the scan (most terms occur in few chapters).
    if not any(" " in s or s in markdown for s in spellings):
        return None
    plain = None
    for pl in _prose_tuple(markdown):
        if pl.heading:
            continue
        for spelling in spellings:
            i = pl.text.find(f"**{spelling}**")
            if i != -1:
                return Occurrence(pl.lineno, i, spelling, True)
        if plain is None:
            found = [(pl.text.find(s), s) for s in spellings if pl.text.find(s) != -1]
            if found:
                col, spelling = min(found, key=lambda x: (x[0], -len(x[1])))
                plain = Occurrence(pl.lineno, col, spelling, False)
    return plain


def add_anchor(markdown: str, occ: Occurrence, anchor: str) -> str:
    """Put `id=anchor` on the occurrence `occ` (found by first_occurrence on the same text)."""
    lines = markdown.split("\n")
    line = lines[occ.lineno - 1]
    if occ.bold:
        end = occ.col + len(occ.text) + 4
        lines[occ.lineno - 1] = f"{line[:end]}{{#{anchor}}}{line[end:]}"
    else:
        end = occ.col + len(occ.text)
        lines[occ.lineno - 1] = f'{line[: occ.col]}<span id="{anchor}">{occ.text}</span>{line[end:]}'
    return "\n".join(lines)


# --- define before use -----------------------------------------------------------------------------

_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
TERM_REF_CLASS = "term-ref"


def definition_targets(sources: list[tuple[str, str]], terms: list[Term], pinned: set[str] = frozenset()):
    """term key -> (page, anchor) of its first definition on the reading path `sources` ((page, markdown) in nav order).

    `defined_in` wins when it names a page of `pinned` (the pages the site builds); otherwise the first page that
    writes the term in bold, else the first page that uses it; the anchor is then the term's own (`term-<key>`).
    """
    targets = {}
    for term in terms:
        uri, _, anchor = (term.defined_in or "").partition("#")
        if uri in pinned:
            targets[term.key] = (uri, anchor)
            continue
        found = [(uri, occ) for uri, md in sources if (occ := first_occurrence(md, term))]
        bold = [(uri, occ) for uri, occ in found if occ.bold]
        if bold or found:
            targets[term.key] = ((bold or found)[0][0], term.anchor)
    return targets


def first_use(markdown: str, term: Term, terms: list[Term]) -> Occurrence | None:
    """The first use of `term` in the prose of `markdown` (headings and admonition titles skipped).

    A spelling inside a longer term's spelling does not count (优势 in 组内相对优势 is a use of 组内相对优势).
    """
    mine = term.spellings
    longer = [s for t in terms if t is not term for s in t.spellings if any(m in s and m != s for m in mine)]
    raw_lines = markdown.split("\n")
    for pl in prose_lines(markdown):
        if pl.heading:
            continue
        images = [m.span(1) for m in _IMAGE.finditer(raw_lines[pl.lineno - 1])]  # alt text is not prose
        hits = []
        for spelling in mine:
            for m in re.finditer(re.escape(spelling), pl.text):
                in_image = any(a <= m.start() and m.end() <= b for a, b in images)
                if not in_image and not _covered(pl.text, m.start(), m.end(), longer):
                    hits.append((m.start(), -len(spelling), spelling))
                    break
        if hits:
            col, _, spelling = min(hits)
            return Occurrence(pl.lineno, col, spelling, pl.text[max(0, col - 2) : col] == "**")
    return None


def link_around(line: str, col: int, length: int) -> str | None:
    """The target of the Markdown link whose text contains line[col:col + length], or None."""
    for m in _LINK.finditer(line):
        if m.start(1) <= col and col + length <= m.end(1):
            return m.group(2)
        if m.start() > col:
            break
    return None


def forward_uses(markdown: str, page: str, order: list[str], targets: dict, terms: list[Term]):
    """Terms that `page` uses before the reader has met their definition: (term, first use, target page, anchor).

    A page before the defining page (in `order`, the reading path), or the defining page itself when the use
    comes before the definition. Uses already inside a link are included (the caller checks where it points).
    """
    if page not in order:
        return []
    out = []
    for term in terms:
        if term.key not in targets:
            continue
        uri, anchor = targets[term.key]
        if uri not in order or order.index(page) > order.index(uri):
            continue
        use = first_use(markdown, term, terms)
        if use is None:
            continue
        if uri == page and not anchor:
            continue  # `defined_in` names the page without a place on it: the whole page defines the term
        if uri == page:
            definition = first_occurrence(markdown, term)
            if definition is None or (use.lineno, use.col) >= (definition.lineno, definition.col):
                continue
        out.append((term, use, uri, anchor))
    return out


def link_forward_uses(markdown: str, page: str, order: list[str], targets: dict, terms: list[Term]) -> str:
    """Make each forward use (see `forward_uses`) that is not yet a link a link to the term's definition.

    The link carries the class `term-ref` (styled as a dotted underline) and a title naming where the term is defined.
    Uses are rewritten from the end of the page backwards, so earlier columns stay valid.
    """
    lines = markdown.split("\n")
    uses = forward_uses(markdown, page, order, targets, terms)
    rewritten: dict[int, int] = {}  # line number -> leftmost column rewritten so far
    for term, use, uri, anchor in sorted(uses, key=lambda u: (u[1].lineno, u[1].col), reverse=True):
        line = lines[use.lineno - 1]
        end = use.col + len(use.text)
        if link_around(line, use.col, len(use.text)) is not None or end > rewritten.get(use.lineno, len(line) + 1):
            continue
        rewritten[use.lineno] = use.col
        href = ("" if uri == page else uri) + (f"#{anchor}" if anchor else "")
        ref = f'[{use.text}]({href}){{.{TERM_REF_CLASS} title="术语：{term.zh}（{term.en}）"}}'
        lines[use.lineno - 1] = line[: use.col] + ref + line[end:]
    return "\n".join(lines)
