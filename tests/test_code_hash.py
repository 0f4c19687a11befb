"""The cache keys of scripts/run_trl.py and scripts/run_experiments.py ignore docstrings, comments and layout,
and change with the code. Checked by hand to give the same text on Python 3.10, 3.11, 3.12 and 3.13 for every
source file in the repository (see rlhf_toy._code_hash.code_text)."""

from __future__ import annotations

from rlhf_toy._code_hash import code_text

BASE = '''"""Module docstring."""

import math


class Step:
    """Class docstring."""

    def size(self, x: float) -> float:
        """Function docstring."""
        return math.sqrt(x)  # a comment


def only_a_docstring() -> None:
    """Nothing else."""
'''


def _text(tmp_path, source: str) -> str:
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    return code_text(path)


def test_docstrings_comments_and_layout_do_not_change_the_text(tmp_path):
    reworded = (
        BASE.replace("Module docstring.", "另一段说明。")
        .replace("Function docstring.", "梯度范数上限 1.0。")
        .replace("# a comment", "# 改过的注释")
        .replace("Nothing else.", "")
        .replace("return math.sqrt(x)", "return (math.sqrt(x))")
        .replace("import math\n", "import math  # comment\n\n")
    )
    assert _text(tmp_path, reworded) == _text(tmp_path, BASE)


def test_a_code_change_changes_the_text(tmp_path):
    base = _text(tmp_path, BASE)
    for old, new in [("math.sqrt(x)", "math.sqrt(x + 0)"), ("x: float", "x: int"), ('"""Nothing else."""', "return")]:
        assert _text(tmp_path, BASE.replace(old, new)) != base, (old, new)
    # A string statement that is not the first in its body is code, not a docstring.
    moved = BASE.replace(
        "        return math.sqrt(x)", '        y = 1\n        """Not a docstring."""\n        return math.sqrt(x)'
    )
    assert _text(tmp_path, moved) != _text(
        tmp_path, BASE.replace("        return math.sqrt(x)", "        y = 1\n        return math.sqrt(x)")
    )
