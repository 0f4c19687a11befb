"""`make serve`'s fast preview renders a chapter exactly as the strict build does.

`make serve` is `mkdocs serve --dirty` with RLHF_TOY_WHOLE_BOOK=false (hooks/preview.py): after the first build
only the saved page is rendered again, without the print page and llms.txt. This test replays that on a copy of
the session's strict build (no second full build): in one process, as `mkdocs serve` does, a first dirty build
renders the API page, then the chapters' outputs are made older than their sources (as saving them does) and a
second dirty build renders them alone. Their <article> must be byte-identical to the strict build's, no warning
may be logged (--strict), and the other pages must not have been rendered again. dpo.md links to API entries
(autorefs): the second build resolves them only with the anchors carried over from the first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from sitecheck import ROOT

CHAPTERS = ["grpo", "dpo"]
UNTOUCHED = "ppo"
ARTICLE = re.compile(r"<article\b.*?</article>", re.S)

REPLAY = r"""
import logging, os, sys
from mkdocs.commands.build import build
from mkdocs.config import load_config

site, chapters = sys.argv[1], sys.argv[2:]
warnings = []

class Collect(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING and "'dirty' build" not in record.getMessage():
            warnings.append(record.getMessage())

logging.getLogger("mkdocs").addHandler(Collect())

def age(page):
    os.utime(os.path.join(site, page, "index.html"), (0, 0))

def config():  # `mkdocs serve` loads the configuration again for every rebuild
    return load_config("mkdocs.yml", site_dir=site)

first = config()
first.plugins.on_startup(command="serve", dirty=True)
age("api")
build(first, dirty=True)
for page in chapters:
    age(page)
build(config(), dirty=True)
print("\n".join(warnings))
sys.exit(1 if warnings else 0)
"""


def _article(path) -> str:
    m = ARTICLE.search(path.read_text(encoding="utf-8"))
    assert m, f"no <article> in {path}"
    return m.group(0)


def test_preview_rebuild_renders_a_chapter_as_the_strict_build(site_dir, tmp_path):
    preview = tmp_path / "site"
    shutil.copytree(site_dir, preview)
    untouched = (preview / UNTOUCHED / "index.html").stat().st_mtime
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "RLHF_TOY_WHOLE_BOOK": "false"}
    proc = subprocess.run(
        [sys.executable, "-c", REPLAY, str(preview), *CHAPTERS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"warnings or failure in the preview rebuild:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert (preview / UNTOUCHED / "index.html").stat().st_mtime == untouched, "a dirty rebuild rendered every page"
    for page in CHAPTERS:
        out = preview / page / "index.html"
        assert out.stat().st_mtime > 0, f"{page} was not rendered again"
        assert _article(out) == _article(site_dir / page / "index.html"), f"{page}: preview differs from the build"
