"""Source text for the cache keys (`code_hash`) of the cached full runs, without docstrings and comments.

`scripts/run_trl.py` and `scripts/run_experiments.py` key their caches (docs/data/trl.json, comparison.json)
on a hash of the sources that produced them. Hashing the raw bytes made a wording fix in a docstring or a
comment invalidate a run of a quarter of an hour; hashing `code_text` keeps the key for those and for pure
reformatting, and changes it for any change to the code itself.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
_WITH_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _dump(node: object) -> str:
    """语法树的一种规范写法：节点类名与非空字段（不含行号）。空列表与 `None` 字段略去，
    这样 3.12 起函数、类多出的 `type_params=[]` 之类的新字段不改变结果。"""
    if isinstance(node, ast.AST):
        fields = (
            f"{name}={_dump(getattr(node, name))}"
            for name in node._fields
            if getattr(node, name, None) not in (None, [])
        )
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_dump(item) for item in node)}]"
    return ascii(node)  # not repr: which characters repr escapes follows the Unicode version (U+9FFF: 3.10 vs 3.11)


def code_text(path: str | Path) -> str:
    """一个 Python 源文件去掉文档字符串与注释之后的语法树（写成文本），供缓存的代码摘要使用。

    用 `ast.parse` 解析，删掉模块、类、函数体的第一条语句中的字符串常量（文档字符串；删空的函数体补一个 `pass`），
    再把语法树写成文本：每个节点的类名与字段，不含行号，常量用 `ascii()` 写。注释不进语法树，
    空行、换行、引号、括号这些排版也不进，所以只改文档字符串、注释或格式时结果不变；改了任何一条代码，结果就变。

    没有用 `ast.unparse`：它写回的源代码随 Python 小版本而变（3.10 把 `a, b = f()` 写成 `(a, b) = f()`，
    3.12 起 f-string 里换了引号）；`repr` 转义哪些字符也随 Unicode 版本而变。同一份代码因此会在不同版本上
    得到不同的摘要。这里的写法在 Python 3.10、3.11、3.12、3.13 上对本仓库的每个源文件给出相同的文本
    （逐版本核对过；本项目的下限是 `pyproject.toml` 的 `requires-python`，即 3.10，开发用 3.11）。
    以后的版本若给语法树加了非空的新字段，摘要就会变，届时重跑缓存，或在 `_dump` 里略去该字段。

    Args:
        path: 源文件路径（UTF-8）。

    Returns:
        去掉文档字符串之后的语法树的文本。

    Raises:
        SyntaxError: 文件不是当前 Python 能解析的源代码。
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, _WITH_DOCSTRING) or not node.body:
            continue
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return _dump(tree)


def sources_hash(items: Iterable[str]) -> str:
    """缓存的代码摘要：`items`（相对 `src/rlhf_toy/` 的文件或目录）里每个 `.py` 文件去掉文档字符串与注释之后的 SHA-256。

    按路径排序后依次拼接相对路径与 `code_text`；目录取其下全部 `.py` 文件。与 `scripts/run_reasoning.py` 的
    `code_hash` 算法相同。

    Args:
        items: 源文件或目录，相对 `src/rlhf_toy/`，例如 `("importance.py", "train")`。

    Returns:
        64 位十六进制摘要。

    Raises:
        FileNotFoundError: 某一项不存在。
    """
    digest = hashlib.sha256()
    for item in items:
        path = PACKAGE / item
        if not path.exists():
            raise FileNotFoundError(f"sources_hash: {item!r} 不在 {PACKAGE} 里")
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(f.relative_to(PACKAGE)).encode())
            digest.update(code_text(f).encode("utf-8"))
    return digest.hexdigest()


def script_hash(items: Iterable[str], script: str | Path) -> str:
    """一个缓存脚本的代码摘要：`sources_hash(items)` 再接上脚本自己的 `code_text`，取 SHA-256。

    `scripts/run_tiny_lm.py`、`run_tiny_lm_ramble0.py`、`run_ratio_shaping.py` 与 `run_baseline_shared.py`
    的 `code_hash` 都是它：脚本里的设置（种子、步数）也是缓存的来源，所以脚本本身也算进摘要。

    Args:
        items: 源文件或目录，相对 `src/rlhf_toy/`，同 `sources_hash`。
        script: 缓存脚本的路径（通常是它的 `__file__`）。

    Returns:
        64 位十六进制摘要。

    Raises:
        FileNotFoundError: `items` 的某一项或 `script` 不存在。
    """
    digest = hashlib.sha256(sources_hash(items).encode())
    digest.update(code_text(script).encode("utf-8"))
    return digest.hexdigest()
