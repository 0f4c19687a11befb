"""GRPO 家族的运行：训练循环 `train_grpo_family`、第 8 章的老虎机对比、缓存 docs/data/ratio_shaping_runs.json 及页面上的说法。

缓存由 `scripts/run_ratio_shaping.py` 写；这里检查它的 `code_hash` 与当前代码一致，重算老虎机上的一项并逐位比较，
检查它的 GRPO 一行就是第 8 章缓存 docs/data/comparison.json 的那一行，再检查 docs/ratio-shaping.md 与
docs/comparison.md 上依赖这些运行的说法。
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _scripts import load_script

from rlhf_toy import BanditTask, TablePolicy
from rlhf_toy.studies.comparison import Budget, _setup, make_evaluator, run_grpo
from rlhf_toy.studies.ratio_shaping import FAMILY, run_family, run_family_table, summarize_family
from rlhf_toy.train import GRPOConfig, train_grpo
from rlhf_toy.train.grpo_family import (
    FAMILY_LOSS_TYPES,
    GRPOFamilyConfig,
    gradient_scale,
    policy_loss,
    train_grpo_family,
)

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "data" / "ratio_shaping_runs.json"
TINY = Budget(samples=320)  # 4 步 × 80 条回答


_script = load_script


@pytest.fixture(scope="module")
def cache() -> dict:
    return json.loads(CACHE.read_text(encoding="utf-8"))


def test_cache_comes_from_this_code(cache):
    script = _script("run_ratio_shaping")
    assert cache["code_hash"] == script.code_hash(), "code changed: rerun scripts/run_ratio_shaping.py"
    assert set(cache["cpu_seconds"]) == set(script.PARTS)
    assert sum(cache["cpu_seconds"].values()) <= 300  # 新缓存的 CPU 时间不超过 5 分钟
    assert set(cache["tiny_lm"]["runs"]) == set(script.TINY_RUNS)


def test_bandit_grpo_row_is_the_chapter_8_row(cache):
    """同样的种子与预算：家族表里的 GRPO 一行与第 8 章缓存里的 GRPO 一行逐位相同（第 8 章的数没有变）。"""
    full = _script("run_experiments").FULL
    chapter8 = json.loads((ROOT / "docs" / "data" / "comparison.json").read_text(encoding="utf-8"))
    assert cache["bandit"]["seeds"] == full["seeds"] == chapter8["config"]["seeds"]
    assert cache["bandit"]["samples"] == full["budget"].samples
    assert cache["bandit"]["num_iterations"]["2"]["grpo"]["finals"] == chapter8["finals"]["grpo"]


def test_one_bandit_entry_regenerates_exactly(cache):
    budget = _script("run_experiments").FULL["budget"]
    assert (
        run_family("cispo", 0, budget, 8)[-1]["success_prob"]
        == cache["bandit"]["num_iterations"]["8"]["cispo"]["finals"]["0"]
    )


def test_family_loop_with_grpo_is_train_grpo_bit_for_bit():
    """`loss_type="grpo"` 时 `train_grpo_family` 与 `train_grpo` 逐步、逐位相同（对照指标不用随机数、不带梯度）。"""
    for mu in (1, 2):
        a = [h["success_prob"] for h in run_family("grpo", 3, TINY, mu)]
        task, policy, ref = _setup(3)
        config = GRPOConfig(num_generations=4, learning_rate=0.1, steps=TINY.steps, num_iterations=mu)
        b = [h["success_prob"] for h in train_grpo(policy, task, config, ref, make_evaluator(task, ref, 4))]
        assert a == b
    assert [h["success_prob"] for h in run_family("grpo", 0, TINY)] == [h["success_prob"] for h in run_grpo(0, TINY)]


def _batch(T: int, seed: int = 0):
    torch.manual_seed(seed)
    B = 8
    logps = (torch.randn(B, T, dtype=torch.float64) - 1).requires_grad_()
    mask = torch.ones(B, T, dtype=torch.float64)
    if T > 1:
        mask[1, T // 2 :] = 0
        mask[5, 1:] = 0
    advantages = torch.randn(B, dtype=torch.float64)
    ref_logps = logps.detach() + 0.3 * torch.randn(B, T, dtype=torch.float64)
    return logps, ref_logps, advantages, mask


def _grad(loss_type: str, logps, ref_logps, advantages, mask, beta=0.04, **options):
    config = GRPOFamilyConfig(loss_type=loss_type, beta=beta, **options)
    x = logps.detach().clone().requires_grad_()
    loss, _ = policy_loss(config, x, None, ref_logps, advantages, mask)
    (grad,) = torch.autograd.grad(loss, x)
    return grad


def test_on_policy_all_six_losses_give_the_same_gradient_when_T_is_1():
    """比率恒为 1（`old_logps=None`，即 num_iterations=1 或每批的第一次更新）、每条回答一个 token 时，
    六种损失的梯度相同：截断不起作用，CISPO 的权重是 min(1, 5) = 1，SAPO 的 4σ(1−σ) = 1，VESPO 的 φ(1) = 1，
    LUSPO 与 GMPO 的序列比率就是这一个 token 的比率。"""
    logps, ref_logps, advantages, mask = _batch(1)
    reference = _grad("grpo", logps, ref_logps, advantages, mask)
    for name, options in FAMILY.items():
        grad = _grad(logps=logps, ref_logps=ref_logps, advantages=advantages, mask=mask, **options)
        torch.testing.assert_close(grad, reference, rtol=1e-12, atol=1e-15, msg=name)


def test_on_policy_gradients_at_T_above_1_differ_only_by_aggregation():
    """T > 1 时同策略的梯度仍只差汇总方式：CISPO 与 dapo 汇总的截断相同，SAPO 与 grpo 汇总的截断相同。"""
    logps, ref_logps, advantages, mask = _batch(5)
    dapo = _grad("dapo", logps, ref_logps, advantages, mask)
    grpo = _grad("grpo", logps, ref_logps, advantages, mask)
    torch.testing.assert_close(_grad("cispo", logps, ref_logps, advantages, mask, epsilon_high=5.0), dapo)
    torch.testing.assert_close(_grad("sapo", logps, ref_logps, advantages, mask), grpo)
    assert not torch.allclose(dapo, grpo)


def test_num_iterations_1_runs_coincide():
    """num_iterations=1：六种损失在老虎机上的整条轨迹相同（浮点舍入之内）。"""
    reference = [h["success_prob"] for h in run_family("grpo", 1, TINY, 1)]
    for name in FAMILY:
        other = [h["success_prob"] for h in run_family(name, 1, TINY, 1)]
        assert other == pytest.approx(reference, abs=1e-6), name


def test_gradient_scale_is_one_at_ratio_one_and_shapes_away_from_it():
    ratio = torch.tensor([[1.0, 0.5, 1.5, 7.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, 1.0, 1.0]], dtype=torch.float64)
    clip = gradient_scale(GRPOFamilyConfig(loss_type="dapo"), ratio, adv)
    cispo = gradient_scale(GRPOFamilyConfig(loss_type="cispo", epsilon_high=5.0), ratio, adv)
    sapo = gradient_scale(GRPOFamilyConfig(loss_type="sapo"), ratio, adv)
    assert clip.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    assert cispo[0].tolist() == pytest.approx([1.0, 1.0, 1.0, 5 / 7])
    assert sapo[0, 0].item() == 1.0 and (sapo[0, 1:] < 1).all() and (sapo > 0).all()
    # 与各损失的梯度一致：整形后的权重 / (w A) 就是 autograd 给出的 ∂目标/∂log π 除以 w A
    for loss_type, scale in (("dapo", clip), ("sapo", sapo)):
        logps = torch.zeros(1, 4, dtype=torch.float64, requires_grad=True)
        config = GRPOFamilyConfig(loss_type=loss_type, beta=0.0)
        loss, _ = policy_loss(config, logps, -ratio.log(), None, adv, torch.ones(1, 4, dtype=torch.float64))
        (grad,) = torch.autograd.grad(loss, logps)
        torch.testing.assert_close(-grad * 4 / (ratio * adv), scale)


def test_bad_input():
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(
            GRPOFamilyConfig(loss_type="ppo"), *(torch.zeros(2, 1),) * 2, None, torch.zeros(2), torch.ones(2, 1)
        )
    with pytest.raises(ValueError, match="dynamic_sampling"):
        train_grpo_family(TablePolicy.random(2, 3), BanditTask.make(2, 3), GRPOFamilyConfig(dynamic_sampling=True))
    with pytest.raises(ValueError, match="name"):
        run_family("ppo", 0, TINY)
    with pytest.raises(ValueError, match="num_iterations"):
        run_family("grpo", 0, TINY, 0)
    with pytest.raises(ValueError, match="runs"):
        summarize_family({})
    with pytest.raises(ValueError, match="seeds"):
        run_family_table(["grpo"], [], TINY, 2)
    with pytest.raises(ValueError, match="loss_type"):
        gradient_scale(GRPOFamilyConfig(loss_type="vespo"), torch.ones(1, 1), torch.ones(1, 1))
    assert set(FAMILY_LOSS_TYPES) >= {f["loss_type"] for f in FAMILY.values()}


# ---- 页面上的说法（docs/comparison.md 的“GRPO 家族”一节，docs/ratio-shaping.md 的“运行结果”）----


def test_bandit_claims(cache):
    mu2, mu8 = cache["bandit"]["num_iterations"]["2"], cache["bandit"]["num_iterations"]["8"]
    # 第 8 章的设置：比率从未走出 [0.8, 1.2]，截断从未起作用；CISPO、LUSPO、GMPO 与 GRPO 逐位相同
    assert mu2["grpo"]["ratio/outside"] == 0 and mu2["grpo"]["grad/zeroed"] == 0 and mu2["grpo"]["ratio/max"] < 1.2
    for name in ("cispo", "luspo", "gmpo"):
        assert mu2[name]["finals"] == mu2["grpo"]["finals"], name
    assert mu2["sapo"]["finals"] != mu2["grpo"]["finals"]
    assert mu2["sapo"]["success_mean"] == mu2["grpo"]["success_mean"]  # 缓存存到第四位小数
    assert mu2["vespo"]["finals"] != mu2["grpo"]["finals"]  # VESPO 的权重 φ(W) 在 W ≠ 1 时本来就不是 W
    # num_iterations=8：截断清零一部分 token；CISPO 既不清零也不封顶（比率没到 5），终点更高
    assert mu8["grpo"]["grad/zeroed"] > 0.1 and mu2["sapo"]["grad/capped"] == 0
    assert mu8["cispo"]["grad/zeroed"] == 0 and mu8["cispo"]["grad/capped"] == 0 and mu8["cispo"]["ratio/max"] < 5
    assert mu8["luspo"]["finals"] == mu8["grpo"]["finals"]
    for name in ("cispo", "sapo"):
        assert mu8[name]["success_mean"] > mu8["grpo"]["success_mean"] + 0.01, name
        worst = min(mu8[name]["finals"].values())
        assert worst > max(mu8["grpo"]["finals"].values()), name


def test_tiny_lm_claims(cache):
    tiny = cache["tiny_lm"]
    seeds = [str(s) for s in tiny["seeds"]]
    assert len(seeds) == 3 and tiny["num_iterations"] == 4
    runs = {name: [tiny["runs"][name][s] for s in seeds] for name in tiny["runs"]}

    def acc(name):
        return [r["evals"][-1]["accuracy"] for r in runs[name]]

    def control(name, key):
        return [r["controls"][key] for r in runs[name]]

    # 比率远离 1：每个运行在种子上平均，每次更新 4%–5% 的 token 走出 [0.8, 1.2]；最大比率超过 60
    assert all(0.04 <= sum(control(name, "ratio/outside")) / 3 <= 0.055 for name in runs)
    assert max(r["ratio/max"] for rs in runs.values() for r in rs) > 60
    # 截断清零约 6%、不封顶；CISPO 不清零、封顶不到万分之五；SAPO 不清零、约 7.6% 被门压低
    assert all(0.05 < x < 0.07 for x in control("clip", "grad/zeroed")) and set(control("clip", "grad/capped")) == {0}
    assert set(control("cispo", "grad/zeroed")) == {0} and max(control("cispo", "grad/capped")) < 5e-4
    assert set(control("sapo", "grad/zeroed")) == {0}
    assert abs(sum(control("sapo", "grad/capped")) / 3 - 0.076) < 0.005
    assert all(0.015 < x < 0.025 for x in control("cispo_cap_1.28", "grad/capped"))
    # 截断在每个种子上都高于 CISPO、SAPO、上界 1.28 的 CISPO；grpo 汇总的截断也都高于 SAPO
    for other in ("cispo", "sapo", "cispo_cap_1.28"):
        assert all(c > o for c, o in zip(acc("clip"), acc(other), strict=True)), other
    assert all(c > o for c, o in zip(acc("clip_grpo_agg"), acc("sapo"), strict=True))
    # CISPO 在种子 0、1 上低于 SFT 起点
    sft = [tiny["sft_accuracy"][s] for s in seeds]
    assert acc("cispo")[0] < sft[0] and acc("cispo")[1] < sft[1]
    # 深入框：种子 0 上，上界 1.28 的 CISPO 与 SAPO 的 KL 都比截断小，正确率也都比截断低（KL 对不上那个解释）
    kl0 = {name: runs[name][0]["evals"][-1]["kl"] for name in ("clip", "cispo_cap_1.28", "sapo")}
    for other in ("cispo_cap_1.28", "sapo"):
        assert kl0[other] < kl0["clip"] and acc(other)[0] < acc("clip")[0], other
