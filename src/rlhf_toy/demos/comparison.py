"""命令行演示 `python -m rlhf_toy compare [--quick]`：同台对比的汇总表与奖励过优化的一行结论。"""

from __future__ import annotations

from rlhf_toy.studies.comparison import Budget, run_comparison, summarize
from rlhf_toy.studies.overoptimisation import early_stop, peak, run_overoptimisation


def run_compare(seed: int = 0, quick: bool = False) -> list[dict]:
    """同台对比（快速模式：2 个种子、每个在线算法 1280 条回答；否则 3 个种子、4800 条）与奖励过优化（PPO）。

    Args:
        seed: 第一个随机种子（依次用 `seed, seed + 1, ...`）。
        quick: 是否只跑快速模式。

    Returns:
        `summarize` 的汇总表（每个算法一行）。
    """
    seeds = [seed + i for i in range(2 if quick else 3)]
    budget = Budget() if quick else Budget(samples=4800)
    target = 0.8 if quick else 0.9
    print(f"同台对比：种子 {seeds}，在线算法每个 {budget.samples} 条回答，离线算法 {budget.offline_samples} 条")
    print(f"algorithm  samples  success_prob   kl_to_ref  samples_to_{target}")
    table = summarize(run_comparison(seeds=seeds, budget=budget), target=target)
    for s in table:
        hit = "—" if s["to_target_median"] is None else f"{s['to_target_median']:.0f}"
        print(
            f"{s['algorithm']:>9}  {s['samples']:7d}  {s['success_mean']:.3f}±{s['success_std']:.3f}"
            f"  {s['kl_mean']:.2f}±{s['kl_std']:.2f}  {hit:>14}"
        )
    steps = 25 if quick else 40
    no_kl = run_overoptimisation("ppo", beta=0.0, seed=seed, steps=steps)
    with_kl = run_overoptimisation("ppo", beta=1.0, seed=seed, steps=steps)
    top, stop = peak(no_kl), early_stop(no_kl, 0.4)
    print(f"奖励过优化（PPO，有偏的奖励模型，{steps} 步）：")
    print(
        f"  kl_coef=0：真实奖励峰值 {top['success_prob']:.3f}（第 {top['step']} 步），最后 {no_kl[-1]['success_prob']:.3f}，"
        f"代理奖励 {no_kl[-1]['proxy_reward']:.3f}，KL {no_kl[-1]['kl_to_ref']:.3f}"
    )
    print(f"  早停（KL > 0.4）：真实奖励 {stop['success_prob']:.3f}")
    print(f"  kl_coef=1：最后真实奖励 {with_kl[-1]['success_prob']:.3f}，KL {with_kl[-1]['kl_to_ref']:.3f}")
    return table
