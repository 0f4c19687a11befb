"""The edition is set in one place, pyproject.toml's version, and everything that names it agrees: the site footer
(hooks/edition.py puts it into config.extra.version), CHANGELOG.md's newest entry, CITATION.cff and the errata page."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hooks"))
from edition import book_version, on_config  # noqa: E402

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_hook_reads_the_pyproject_version():
    class Config(dict):
        extra: dict

    config = Config()
    config.extra = {}
    on_config(config)
    assert book_version() == VERSION == config.extra["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


def test_changelog_newest_entry_is_this_edition():
    headings = re.findall(
        r"^## (\d+\.\d+\.\d+)（(\d{4}-\d{2}-\d{2})）", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M
    )
    assert headings, "CHANGELOG.md has no '## X.Y.Z（YYYY-MM-DD）' entry"
    assert headings[0][0] == VERSION, f"CHANGELOG.md's newest entry is {headings[0][0]}, pyproject.toml says {VERSION}"


def test_citation_cff():
    """CITATION.cff follows CFF 1.2.0 (the keys GitHub's "Cite this repository" needs) and names this edition."""
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):
        assert cff.get(key), f"CITATION.cff needs {key!r}"
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    assert str(cff["version"]) == VERSION
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {VERSION}（{cff['date-released']}）" in changelog, "date-released differs from CHANGELOG.md"


def test_errata_page_has_a_section_for_this_edition():
    major_minor = ".".join(VERSION.split(".")[:2])
    assert f"## 第 {major_minor} 版" in (ROOT / "docs" / "errata.md").read_text(encoding="utf-8")


def test_errata_commits_exist():
    """Every commit the errata page names is in the repository's history."""
    import subprocess

    commits = set(re.findall(r"`([0-9a-f]{7,40})`", (ROOT / "docs" / "errata.md").read_text(encoding="utf-8")))
    assert commits
    missing = [
        c
        for c in sorted(commits)
        if subprocess.run(["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=ROOT, capture_output=True).returncode
    ]
    assert not missing, f"docs/errata.md names commits that do not exist: {missing}"
