"""docs/data/baseline_shared.json（第 2 章“在共享参数的模型上”，`scripts/run_baseline_shared.py` 写）来自现在的代码，
并支持页面上关于它的句子。

页面只读这个缓存、打印表格（表格本身由页面的代码块测试核对）；这里检查缓存的 `code_hash` 与当前代码一致，
并对着缓存检查表下面几句话与实践结论里引用它的说法。
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "data" / "baseline_shared.json"
PAGE = ROOT / "docs" / "policy-gradient.md"


def _script():
    return load_script("run_baseline_shared")


@pytest.fixture(scope="module")
def cache():
    return json.loads(CACHE.read_text(encoding="utf-8"))


def _accuracy(cache, name, step):
    i = cache["eval_at"].index(step)
    return {s: cache["runs"][name][str(s)][i]["accuracy"] for s in cache["seeds"]}


def _mean(values):
    return sum(values) / len(values)


def test_cache_comes_from_this_code(cache):
    module = _script()
    assert cache["code_hash"] == module.code_hash(), "code changed: rerun scripts/run_baseline_shared.py"
    assert cache["seeds"] == list(module.SEEDS) and len(cache["seeds"]) >= 3
    assert cache["eval_at"] == [0, *module.EVAL_AT] and cache["steps"] == module.STEPS == 200
    assert set(cache["runs"]) == set(module.RUNS) == {"none", "rloo", "mean", "grpo", "none+1"}
    assert 180 <= cache["cpu_seconds"] < 330  # “要四分钟左右 CPU 时间”


def test_runs_start_from_the_same_warm_start(cache):
    # “从同一个热启动、同样的随机数出发”: step 0 is the same policy for every run of a seed.
    starts = [_accuracy(cache, name, 0) for name in cache["runs"]]
    assert all(s == starts[0] for s in starts)


def test_sentences_under_the_table(cache):
    none, rloo, grpo, plus1 = (_accuracy(cache, n, 200) for n in ("none", "rloo", "grpo", "none+1"))
    page = PAGE.read_text(encoding="utf-8")
    seeds = cache["seeds"]
    # “第 10 步还分不出高低”
    at10 = [_mean(list(_accuracy(cache, n, 10).values())) for n in ("none", "rloo", "grpo")]
    assert max(at10) - min(at10) < 0.01
    # “第 200 步，五个种子上 none 都高于 rloo 与 grpo，平均高 0.034”
    assert len(seeds) == 5 and all(none[s] > rloo[s] and none[s] > grpo[s] for s in seeds)
    lead = _mean([none[s] - rloo[s] for s in seeds])
    assert f"平均高 {lead:.3f}" in page
    assert 0 < lead < 0.05  # 实践结论: “极小 Transformer 上略快”
    # “奖励加 1，无基线明显变慢。第 200 步平均低 0.100，五个种子都是这样”
    assert all(none[s] > plus1[s] for s in seeds)
    assert f"第 200 步平均低 {_mean([none[s] - plus1[s] for s in seeds]):.3f}" in page
    # “mean 与 rloo 逐项相同”; “grpo 与 rloo 差不多：第 200 步的平均都是 0.786”
    assert cache["runs"]["mean"] == cache["runs"]["rloo"]
    g, r = _mean(list(grpo.values())), _mean(list(rloo.values()))
    assert f"{g:.3f}" == f"{r:.3f}" and f"第 200 步的平均都是 {g:.3f}" in page
