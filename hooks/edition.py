"""MkDocs hook: the book's edition, read from one place.

The edition is the version in pyproject.toml (`[project] version`). This hook puts it into
`config.extra.version`, which the footer (overrides/partials/copyright.html) shows on every page next to the
PDF download link. CHANGELOG.md and CITATION.cff name the same version; tests/test_edition.py checks that
all of them agree.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def book_version() -> str:
    """The edition: `[project] version` of pyproject.toml."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def on_config(config):
    config.extra["version"] = book_version()
    return config
