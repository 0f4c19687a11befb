"""MkDocs hook: "last updated" date and the edit / 勘误 (errata) links under every page.

Everything is built from the one repository setting, `extra.repository` (and `extra.branch`); `repo_url` is
deliberately not set (it makes Material call api.github.com from the reader's browser).

* last updated = date of the last git commit touching the page's source (`git log -1 --format=%cs`);
  for notebook pages the generated .ipynb and its jupytext source, for the API pages (api/) also `src/rlhf_toy`,
  for the glossary `docs/terms.yml`. Files git does not know yet fall back to the build date.
* 勘误 = `https://github.com/<repository>/issues/new?title=…&body=…` with the page title, URL and source file.
* 编辑 = the GitHub edit page of the file an author would change.

The template (overrides/main.html) reads `page.meta.rlhf_meta`.
"""

from __future__ import annotations

import datetime as _dt
import logging
import subprocess
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urlencode

log = logging.getLogger("mkdocs.hooks.page_meta")
_ROOT = Path.cwd()


def _git_date(paths: list[str]) -> str | None:
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%cs", "--", *paths],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def sources_of(src_uri: str, docs_dir: str) -> list[str]:
    """Repository paths whose changes count as changes of the page `src_uri`."""
    try:
        docs = PurePosixPath(Path(docs_dir).resolve().relative_to(_ROOT).as_posix())
    except ValueError:  # a docs_dir outside the repository (test sites): git knows nothing of it
        docs = PurePosixPath("docs")
    if src_uri == "glossary.md":
        return [str(docs / "terms.yml")]
    paths = [str(docs / src_uri)]
    if src_uri.endswith(".ipynb"):
        paths.append(f"notebooks/{PurePosixPath(src_uri).stem}.py")
    if src_uri.startswith("api/"):
        paths.append("src/rlhf_toy")
    return paths


def edit_source(src_uri: str, docs_dir: str) -> str:
    """The file an author edits to change the page."""
    if src_uri.endswith(".ipynb"):
        return f"notebooks/{PurePosixPath(src_uri).stem}.py"
    return sources_of(src_uri, docs_dir)[0]


def _untracked(paths: list[str]) -> bool:
    try:
        r = subprocess.run(
            ["git", "ls-files", "--error-unmatch", "--", paths[0]],
            cwd=_ROOT,
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return True
    return r.returncode != 0


def on_page_context(context, page, config, nav):
    extra = config.get("extra") or {}
    repo = extra.get("repository")
    if not repo:
        return context
    branch = extra.get("branch", "main")
    src_uri = page.file.src_uri
    paths = sources_of(src_uri, config["docs_dir"])
    today = _dt.date.today().isoformat()
    date = None if _untracked(paths) else _git_date(paths)
    source = edit_source(src_uri, config["docs_dir"])
    page_url = page.canonical_url or page.url
    title = f"勘误：{page.title}（{page.url or '/'}）"
    body = (
        f"页面：{page.title}\n地址：{page_url}\n源文件：{source}\n\n"
        "问题所在（引用原文或小节标题）：\n\n\n应改为 / 建议：\n\n"
    )
    page.meta["rlhf_meta"] = {
        "last_updated": date or today,
        "last_updated_source": "git" if date else "build",
        "errata_url": f"https://github.com/{repo}/issues/new?"
        + urlencode({"title": title, "body": body}, quote_via=quote),
        "edit_url": f"https://github.com/{repo}/edit/{branch}/{quote(source)}",
        "source": source,
    }
    return context
