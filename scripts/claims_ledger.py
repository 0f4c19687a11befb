"""The claims ledger (docs/claims.md): every statement the book makes about TRL, verl and transformers, with its test.

Reads the claim tests (tests/claims/test_<page>_page*.py and tests/test_trl_chapter.py: what a page says about a
pinned library) and the conformance tests (tests/conformance/: the book's functions against the library's, on the same
tensors), and writes one table per page: the statement as the test's comment gives it, the test's id, and the pinned libraries the test
file imports (requirements-libs.txt). `tests/test_claims_ledger.py` checks that the committed page is current.

    python scripts/claims_ledger.py            # rewrite docs/claims.md
    python scripts/claims_ledger.py --run      # run the tests, then print the ledger rows whose test fails

After a pin moves (CONTRIBUTING.md, “升级对照库的版本”), `--run` lists the statements that no longer hold.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "claims.md"
LIBRARIES = ("trl", "verl", "transformers", "accelerate", "datasets", "tokenizers", "peft")


@dataclass(frozen=True)
class Claim:
    page: str  # docs/<page>.md, or "" for a conformance test
    statement: str
    test_id: str  # pytest node id without parameters
    libraries: tuple[str, ...]


def pins() -> dict[str, str]:
    text = (ROOT / "requirements-libs.txt").read_text(encoding="utf-8")
    return {m[1].lower(): m[2] for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def statement(lines: list[str], node: ast.FunctionDef) -> str:
    """The test's docstring, else the comment lines between its `def` and its first statement."""
    doc = ast.get_docstring(node)
    if doc:
        return " ".join(doc.split())
    first = node.body[0].lineno
    comments = [line.strip()[1:].strip() for line in lines[node.lineno : first - 1] if line.strip().startswith("#")]
    return " ".join(comments)


def import_table(tree: ast.Module) -> dict[str, str]:
    """Name bound at module level by an import -> the pinned library it comes from."""
    table = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                table[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                table[alias.asname or alias.name] = node.module.split(".")[0]
    return {name: lib for name, lib in table.items() if lib in LIBRARIES}


def libraries_used(node: ast.FunctionDef, table: dict[str, str], text: str) -> tuple[str, ...]:
    """The pinned libraries a test touches: names it uses that come from them, else the libraries its text names."""
    used = {table[n.id] for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in table}
    used |= {lib for lib in import_table(ast.Module(body=[*ast.walk(node)], type_ignores=[])).values()}
    if not used:
        used = {lib for lib in LIBRARIES if re.search(rf"\b{lib}\b", text, re.I)}
    return tuple(lib for lib in LIBRARIES if lib in used)


def collect() -> list[Claim]:
    claims = []
    groups = (
        (sorted((ROOT / "tests" / "claims").glob("test_*.py")), _page_of_claim_file),
        ([ROOT / "tests" / "test_trl_chapter.py"], lambda path: "trl.md"),
        (sorted((ROOT / "tests" / "conformance").glob("test_*.py")), lambda path: ""),
    )
    for paths, page_of in groups:
        for path in paths:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
            table = import_table(tree)
            module_doc = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                    text = statement(source.splitlines(), node) or module_doc
                    libraries = libraries_used(node, table, text)
                    if not page_of(path):
                        libraries = libraries or _libraries_of_helpers(path)
                    if not libraries:
                        continue  # a test of the page itself (its footnotes, its versions), not of a library
                    test_id = f"{path.relative_to(ROOT).as_posix()}::{node.name}"
                    claims.append(Claim(page_of(path), text, test_id, libraries))
    return claims


def _page_of_claim_file(path: Path) -> str:
    match = re.match(r"test_(.+?)_page", path.stem)
    return f"{match[1].replace('_', '-')}.md" if match else "index.md"  # test_book_versions: the home page


def _libraries_of_helpers(path: Path) -> tuple[str, ...]:
    """Conformance tests call the libraries through helper modules (trl_private.py, same_inputs.py)."""
    source = path.read_text(encoding="utf-8")
    found = set()
    for helper in re.findall(r"from \.(\w+) import", source):
        helper_path = path.with_name(f"{helper}.py")
        if helper_path.exists():
            found |= set(import_table(ast.parse(helper_path.read_text(encoding="utf-8"))).values())
    if "_verl" in path.stem:
        found.add("verl")
    if "_trl" in path.stem:
        found.add("trl")
    return tuple(lib for lib in LIBRARIES if lib in found)


def page_titles() -> dict[str, str]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)
    titles = {}

    def walk(items):
        for item in items:
            for title, target in item.items() if isinstance(item, dict) else []:
                if isinstance(target, list):
                    walk(target)
                else:
                    titles[target] = title

    walk(config["nav"])
    return titles


def cell(text: str) -> str:
    """Table-cell text: pipes escaped; outside code spans, brackets escaped so `x[0]["k"]` in a quote is not read as
    a reference link."""
    parts = re.split(r"(`[^`]*`)", text.replace("\n", " "))
    parts = [p if p.startswith("`") else p.replace("[", "\\[").replace("]", "\\]") for p in parts]
    return "".join(parts).replace("|", "\\|")


def render(claims: list[Claim]) -> str:
    versions = pins()
    titles = page_titles()
    pinned = "、".join(f"{lib} {versions[lib]}" for lib in LIBRARIES if lib in versions)
    out = [
        "# 附录：对照库声明台账",
        "",
        "书里每一句关于 TRL、verl、transformers 的说法（某个默认值、某个选项做什么、日志里某个指标怎么算），",
        "都由一个测试对着固定版本的库检查；书里每个与库对照的函数，都由一致性测试在同样的张量上比较数值与梯度。",
        f"本页由 `scripts/claims_ledger.py` 从这些测试生成，共 {len(claims)} 条。固定的版本：{pinned}。",
        "",
        "“说法”一栏是测试里写的说明（测试的注释或文档字符串，英文，引号里是页面的原话）。",
        "升级某个库的版本之后，运行 `python scripts/claims_ledger.py --run`，它跑一遍这些测试，",
        "列出不再成立的说法，对应的页面就要改写。",
        "",
    ]
    pages = sorted({c.page for c in claims if c.page}, key=lambda p: list(titles).index(p) if p in titles else 99)
    for page in [*pages, ""]:
        rows = [c for c in claims if c.page == page]
        if page:
            heading = f"## {titles.get(page, page)}"
            out += [heading, "", f"页面：[{titles.get(page, page)}]({page})", ""]
        else:
            out += ["## 一致性测试：同样的张量，同样的数值与梯度", ""]
        out += ["| 说法 | 测试 | 库 |", "|---|---|---|"]
        for c in rows:
            libs = "、".join(f"{lib} {versions[lib]}" for lib in c.libraries if lib in versions) or "—"
            out.append(f"| {cell(c.statement)} | `{c.test_id}` | {libs} |")
        out.append("")
    return "\n".join(out)


def failing(claims: list[Claim]) -> list[Claim]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        subprocess.run([*cmd, "tests/claims", "tests/conformance"], cwd=ROOT, check=False)
        failed = set()
        for case in ET.parse(report).iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                module = case.get("classname", "").replace(".", "/")
                failed.add(f"tests/{module.split('tests/')[-1]}.py::{case.get('name', '').split('[')[0]}")
    return [c for c in claims if c.test_id in failed]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run the tests and print the statements whose test fails")
    args = parser.parse_args()
    claims = collect()
    if args.run:
        broken = failing(claims)
        for c in broken:
            print(f"{c.page or 'conformance'}: {c.statement}\n    {c.test_id}")
        print(f"{len(broken)} of {len(claims)} statements fail against the installed libraries")
        return 1 if broken else 0
    OUT.write_text(render(claims), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(claims)} statements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
