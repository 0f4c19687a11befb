"""第 14 章（续）的症状运行：每个症状的症状运行、对照与健康运行，写缓存 docs/data/symptoms_more.json。

    nice -n 10 .venv/bin/python scripts/run_symptoms_more.py          # 写缓存
    .venv/bin/python scripts/run_symptoms_more.py --quick             # 只打印耗时，不写文件

页面、notebook 与 `tests/test_symptoms_more.py` 只读缓存。缓存记着它来自哪份代码（`code_hash`：下面 HASHED 里源文件
去掉文档字符串与注释之后的 SHA-256）；测试检查哈希，并重算最便宜的一项。运行全在第 8 章的老虎机上，共约 10 秒 CPU。
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rlhf_toy  # noqa: E402, F401 - 固定数值设置，必须在任何张量计算之前
from rlhf_toy._code_hash import sources_hash  # noqa: E402
from rlhf_toy.studies import symptoms_more as S  # noqa: E402

CACHE = ROOT / "docs" / "data" / "symptoms_more.json"
HASHED = [
    "studies/symptoms_more.py",
    "studies/comparison.py",
    "studies/overoptimisation.py",
    "train",
    "rollout",
    "tasks",
    "policies",
    "models",
    "losses",
    "estimators",
]
RUNS = {  # 名字 -> (函数, 参数)
    "dpo_coin_flip": (S.run_dpo_ties, {"ties": "coin_flip"}),
    "dpo_dropped": (S.run_dpo_ties, {"ties": "dropped"}),
    "hacking_proxy": (S.run_reward_hacking, {"reward": "proxy"}),
    "hacking_true": (S.run_reward_hacking, {"reward": "true"}),
    "hacking_proxy_beta0.3": (S.run_reward_hacking, {"reward": "proxy", "beta": 0.3}),
    "hacking_proxy_beta1": (S.run_reward_hacking, {"reward": "proxy", "beta": 1.0}),
    "hacking_proxy_beta3": (S.run_reward_hacking, {"reward": "proxy", "beta": 3.0}),
    "spike_outlier": (S.run_grad_spike, {"outlier": 50.0}),
    "spike_clean": (S.run_grad_spike, {"outlier": None}),
    "spike_outlier_group": (S.run_grad_spike, {"outlier": 50.0, "scale_rewards": "group"}),
    "mismatch_top4": (S.run_sampler_mismatch, {"top_k": 4}),
    "mismatch_none": (S.run_sampler_mismatch, {"top_k": None}),
    "mismatch_top4_tis": (S.run_sampler_mismatch, {"top_k": 4, "correction": "token_truncate"}),
    "clip_mu1": (S.run_clip_high, {"num_iterations": 1}),
    "clip_mu2": (S.run_clip_high, {"num_iterations": 2}),
    "clip_mu4": (S.run_clip_high, {"num_iterations": 4}),
    "clip_mu8": (S.run_clip_high, {"num_iterations": 8}),
}


def run(name: str) -> list[dict]:
    """跑一项，浮点数舍入到 6 位小数（缓存里的历史就是 `diagnose` 读的日志）。"""
    fn, kwargs = RUNS[name]
    return [{k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()} for r in fn(**kwargs)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="只打印耗时，不写缓存")
    args = ap.parse_args()
    t0, cpu0 = time.perf_counter(), time.process_time()
    results = {name: run(name) for name in RUNS}
    seconds = {"wall": round(time.perf_counter() - t0, 1), "cpu": round(time.process_time() - cpu0, 1)}
    print(json.dumps(seconds))
    if args.quick:
        return 0
    data = {"code_hash": sources_hash(HASHED), "results": results, "seconds": seconds}
    CACHE.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {CACHE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
