"""Site-test fixtures: one strict build of the real site (plus the small lab site of lab.py, built at the
same time), one local HTTP server each, one headless Chromium for the whole session.

Environment:
    RLHF_TOY_SITE_DIR=path       reuse an already built site instead of building (local iteration; .ci/run passes
                                 the site `make pdf` has just built with --strict from the same checkout)
    RLHF_TOY_REQUIRE_BROWSER=1   a missing /usr/bin/chromium fails instead of skipping (set by .ci/run)
    RLHF_TOY_SHOTS=dir           browser tests also save screenshots there
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from lab import write_lab
from sitecheck import SUBPATH, build, free_port, have_chromium, launch, serve


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # !ENV, !!python/... tags


def _mkdocs_config() -> dict:
    return yaml.load((Path(__file__).resolve().parents[2] / "mkdocs.yml").read_text(encoding="utf-8"), _Loader)


@pytest.fixture(scope="session")
def mkdocs_config() -> dict:
    return _mkdocs_config()


@pytest.fixture(scope="session")
def builds(tmp_path_factory):
    """Build the real site and the lab site in parallel; return their directories."""
    out = {}
    procs = {}
    reuse = os.environ.get("RLHF_TOY_SITE_DIR")
    if reuse:
        out["site"] = Path(reuse)
    else:
        out["site"] = tmp_path_factory.mktemp("site")
        procs["site"] = build(out["site"], wait=False)
    out["lab"] = tmp_path_factory.mktemp("lab")
    procs["lab"] = build(out["lab"], write_lab(tmp_path_factory.mktemp("labsrc")), wait=False)
    # the site as deployed under a sub-path (tests/site/test_site_subpath.py); the port is fixed before the build
    # because site_url is written into the pages (canonical links, 404.html, sitemap, llms.txt)
    out["subpath_port"] = free_port()
    out["subpath"] = tmp_path_factory.mktemp("subpath")
    procs["subpath"] = build(out["subpath"], wait=False, site_url=f"http://127.0.0.1:{out['subpath_port']}{SUBPATH}")
    failures = []
    for label, proc in procs.items():
        text, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"--- mkdocs build --strict ({label}) failed:\n{text[-4000:]}")
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    return out


@pytest.fixture(scope="session")
def site_dir(builds) -> Path:
    return builds["site"]


@pytest.fixture(scope="session")
def site_url(site_dir):
    with serve(site_dir) as url:
        yield url


@pytest.fixture(scope="session")
def subpath_url(builds):
    with serve(builds["subpath"], prefix=SUBPATH, port=builds["subpath_port"]) as url:
        yield url


@pytest.fixture(scope="session")
def lab_url(builds):
    with serve(builds["lab"]) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    if not have_chromium():
        if os.environ.get("RLHF_TOY_REQUIRE_BROWSER") == "1":
            pytest.fail(
                "/usr/bin/chromium is missing (apt-get install chromium fonts-noto-cjk) and RLHF_TOY_REQUIRE_BROWSER=1",
                pytrace=False,
            )
        pytest.skip(
            "browser tests need Debian's Chromium at /usr/bin/chromium "
            "(apt-get install chromium fonts-noto-cjk); set RLHF_TOY_REQUIRE_BROWSER=1 to fail instead"
        )
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    b = launch(pw)
    try:
        yield b
    finally:
        b.close()
        pw.stop()


@pytest.fixture(scope="session")
def shots_dir():
    d = os.environ.get("RLHF_TOY_SHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        return Path(d)
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which turns the marker into the group
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`--dist loadgroup`), keep every site test on one worker: one build, one browser."""
    site = Path(__file__).resolve().parent
    for item in items:
        if site in item.path.resolve().parents:
            item.add_marker(pytest.mark.xdist_group("site"))
