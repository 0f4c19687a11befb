"""Chapter 11: the scratchpad task, its verifier and format reward, pass@k, best-of-N, RFT and the result cache."""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from rlhf_toy.estimators.advantages import group_advantages
from rlhf_toy.estimators.overlong import soft_overlong_punishment
from rlhf_toy.estimators.pass_at_k import mean_pass_at_k, pass_at_k
from rlhf_toy.rollout.best_of_n import best_of_n_probs, kl_upper_bound
from rlhf_toy.tasks.addition import decode
from rlhf_toy.tasks.scratchpad import (
    ScratchpadAdditionTask,
    accuracy_reward,
    completion_text,
    format_reward,
    scratchpad,
    to_completions,
)
from rlhf_toy.train.rejection_sampling import RFTConfig, train_rft

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- task, verifier, format reward


def test_scratchpad_is_per_digit_sum_plus_carry_and_determines_the_answer():
    for a, b in itertools.product(range(0, 100, 7), range(0, 100, 9)):
        steps = [int(s) for s in scratchpad(a, b).split(".")]
        assert all(0 <= s <= 19 for s in steps)
        # the answer is the last step followed by the units digits of the earlier steps (most significant first)
        digits = str(steps[-1]) + "".join(str(s % 10) for s in reversed(steps[:-1]))
        assert int(digits) == a + b
    assert completion_text(47, 88) == "15.13=135"
    with pytest.raises(ValueError, match="a、b"):
        scratchpad(100, 1)


def test_sft_batch_formats_and_lengths():
    task = ScratchpadAdditionTask(seed=0, p_scratchpad=0.5)
    prompts, completions, mask = task.sft_batch(64)
    assert completions.shape == (64, task.max_completion_length) == (64, 12)
    assert torch.equal(mask, (completions != 0).float())
    answers = task.answers(prompts)
    assert accuracy_reward(answers, completions).all() and format_reward(completions).all()
    with_pad = [decode(c).split("=")[0] != "" for c in completions]
    assert 0 < sum(with_pad) < 64  # both kinds of demonstration
    random_task = ScratchpadAdditionTask(seed=0, p_scratchpad=0.5, content="random")
    prompts, completions, _ = random_task.sft_batch(64)
    assert format_reward(completions).all()  # format only: the numbers are random
    assert accuracy_reward(random_task.answers(prompts), completions).mean() < 0.1


def test_verifier_checks_only_the_final_answer():
    answers = [135] * 5
    c = to_completions(["15.13=135|", "99.99=135|", "=135|", "15.13=135", "15.13=136|"])
    assert accuracy_reward(answers, c).tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]  # wrong scratchpad still gets 1


def test_format_reward_is_hackable():
    # reward-hacking case: a constant well-formed completion earns the full format reward on every problem
    task = ScratchpadAdditionTask(seed=0, format_weight=1.0)
    prompts = task.heldout_prompts()
    constant = to_completions(["00.00=0|"] * len(prompts), width=12)
    assert format_reward(constant).mean() == 1.0
    assert accuracy_reward(task.answers(prompts), constant).mean() < 0.01
    assert task.reward(prompts, constant).mean() > 0.99  # the total reward is almost all format
    bad = to_completions(["15.13.=135|", "15=135|", "=0135|", "15.13=|", "1.13=135|", "15.13=135"])
    assert format_reward(bad).tolist() == [0.0] * 6


def test_reward_composes_accuracy_format_and_overlong():
    task = ScratchpadAdditionTask(seed=0, format_weight=0.2, overlong=(12, 6))
    prompts = task.encode_prompts(torch.tensor([[47, 88]] * 3))
    c = to_completions(["15.13=135|", "=135|", "00.00=1|"], width=12)
    lengths = torch.tensor([10.0, 5.0, 8.0])
    expected = torch.tensor([1.2, 1.2, 0.2]) + soft_overlong_punishment(lengths, 12, 6)
    torch.testing.assert_close(task.reward(prompts, c), expected)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="completions"):
        accuracy_reward([1], torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="answers"):
        accuracy_reward([1, 2], torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="p_scratchpad"):
        ScratchpadAdditionTask(p_scratchpad=1.5)
    with pytest.raises(ValueError, match="content"):
        ScratchpadAdditionTask(content="wrong")
    with pytest.raises(ValueError, match="max_completion_length"):
        ScratchpadAdditionTask(max_completion_length=8)
    with pytest.raises(ValueError, match="soft_punish_cache"):
        ScratchpadAdditionTask(overlong=(12, 13))


def test_format_weight_cancels_in_groups_with_constant_accuracy():
    # reasoning.md: with scale_rewards="group" the format term's advantages do not depend on w_fmt in a group whose
    # answers are all wrong (or all right); the weight only matters in groups where correctness varies.
    well_formed = torch.tensor([1.0] * 7 + [0.0])
    all_wrong = {w: group_advantages(w * well_formed, 8) for w in (0.01, 0.2, 1.0, 5.0)}
    for adv in all_wrong.values():
        torch.testing.assert_close(adv, all_wrong[1.0], atol=0.07, rtol=0)  # only the 1e-4 in the denominator differs
    torch.testing.assert_close(all_wrong[0.2], all_wrong[5.0], atol=5e-3, rtol=0)
    all_right = group_advantages(1.0 + 0.2 * well_formed, 8)
    torch.testing.assert_close(all_right, all_wrong[1.0], atol=5e-3, rtol=0)
    one_right = torch.tensor([1.0] + [0.0] * 7)
    mixed = {w: group_advantages(one_right + w * well_formed, 8) for w in (0.2, 1.0)}
    assert (mixed[0.2] - mixed[1.0]).abs().max() > 0.5  # with correctness varying, the weight matters


def grpo_problem_weight(p: float, G: int = 8) -> float:
    """Exact expected GRPO weight G(a_1 - a_0) of one problem with 0/1 rewards, from group_advantages on all 2^G groups."""
    outcomes = torch.tensor(list(itertools.product([0.0, 1.0], repeat=G)), dtype=torch.float64)
    adv = group_advantages(outcomes.reshape(-1), G).view(-1, G)
    c = outcomes.sum(1)
    prob = p**c * (1 - p) ** (G - c)
    return ((prob * (adv * (outcomes - p)).sum(1)).sum() / (p * (1 - p))).item()


def test_grpo_expected_gradient_is_a_nearly_flat_weight_times_grad_p():
    # reasoning.md: per problem, E[sum_i A_i grad log pi(y_i)] = G (a_1 - a_0) grad p_x with a_r = E[A_i | r_i = r];
    # with G = 8 the weight stays between about 13.9 and 19.7 (1.7-2.5x RFT's G), not proportional to 1/sigma_x.
    G = 8
    # exact check of the direction and size on a 3-answer softmax bandit (answer 0 is the correct one)
    theta = torch.tensor([-1.0, 0.3, 0.5], dtype=torch.float64)
    pi = torch.softmax(theta, 0)
    p = pi[0].item()
    expected = torch.zeros(3, dtype=torch.float64)
    for ys in itertools.product(range(3), repeat=G):
        ys = torch.tensor(ys)
        rewards = (ys == 0).double()
        adv = group_advantages(rewards, G)
        score = torch.eye(3, dtype=torch.float64)[ys] - pi  # grad of log pi(y_i) w.r.t. theta
        expected += pi[ys].prod() * (adv[:, None] * score).sum(0)
    grad_p = p * (torch.eye(3, dtype=torch.float64)[0] - pi)
    torch.testing.assert_close(expected, grpo_problem_weight(p, G) * grad_p, rtol=1e-9, atol=1e-12)

    # the weight by a binomial sum over the other G - 1 answers (sample std with Bessel's correction, eps 1e-4)
    def by_binomial(p):
        def adv(r, m):
            c = m + r
            if c in (0, G):
                return 0.0
            mean = c / G
            std = math.sqrt((c * (1 - mean) ** 2 + (G - c) * mean**2) / (G - 1))
            return (r - mean) / (std + 1e-4)

        a = [sum(math.comb(G - 1, m) * p**m * (1 - p) ** (G - 1 - m) * adv(r, m) for m in range(G)) for r in (0, 1)]
        return G * (a[1] - a[0])

    ps = [0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99]
    weights = [grpo_problem_weight(p, G) for p in ps]
    for p, w in zip(ps, weights, strict=True):
        assert w == pytest.approx(by_binomial(p), rel=1e-9)
    assert grpo_problem_weight(0.5, G) == pytest.approx(13.88, abs=0.01)
    assert 19.7 < grpo_problem_weight(1e-6, G) < 19.8
    assert max(weights) / min(weights) < 1.43 and 1.7 < min(weights) / G and max(weights) / G < 2.5
    # the large-G limit (G - 1)/sigma_x would make p = 0.01 about five times heavier than p = 0.5 (70.4 vs 14.0);
    # exactly it is 1.41x
    assert grpo_problem_weight(0.01, G) / grpo_problem_weight(0.5, G) < 1.41


def test_chapter_grpo_updates_once_per_batch_so_clipping_never_acts():
    # reasoning.md: “每批样本只更新一次（num_iterations=1），所以新旧策略的比率恒为 1，截断（含 epsilon_high=0.28）从不起作用”.
    from rlhf_toy.demos.reasoning import grpo_config
    from rlhf_toy.losses.grpo import grpo_loss

    config = grpo_config()
    assert config.num_iterations == 1 and config.epsilon == 0.2 and config.epsilon_high == 0.28 and config.beta == 0
    torch.manual_seed(0)
    logps = (torch.randn(16, 12, dtype=torch.float64) - 3).requires_grad_()
    advantages = 5 * torch.randn(16, dtype=torch.float64)
    mask = (torch.rand(16, 12) < 0.7).double()
    grads = []
    for eps, eps_high in ((config.epsilon, config.epsilon_high), (0.999, 1e6)):  # the chapter's clip, and none
        # train_grpo passes old_logps=None when num_iterations == 1: the ratio is exp(logps - logps.detach()) = 1
        loss, metrics = grpo_loss(
            logps, None, None, advantages, mask, epsilon=eps, epsilon_high=eps_high, beta=0.0, loss_type="dapo"
        )
        assert metrics["clip_ratio"] == 0.0
        grads.append(torch.autograd.grad(loss, logps)[0])
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    # single-step REINFORCE with group-normalised advantages: d loss / d logps = -A_i m_it / (sum of the mask)
    torch.testing.assert_close(grads[0], -advantages[:, None] * mask / mask.sum())


# ---------------------------------------------------------------- pass@k


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_subset_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_edge_cases_and_closed_form():
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 7, 4) == 1.0  # k > n - c: every k-subset holds a correct sample
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # the product form agrees with 1 - C(n-c,k)/C(n,k) where the binomials are still exact, and stays finite beyond
    for n, c, k in ((200, 17, 50), (1000, 3, 100)):
        assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-12)
    assert 0.0 < pass_at_k(100_000, 1, 1) < 1e-4
    assert mean_pass_at_k(torch.tensor([0, 2, 4]), n=4, ks=[1, 4]) == {1: 0.5, 4: 2 / 3}


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (0, 0, 1, "n"),
        (5, 6, 1, "c"),
        (5, -1, 1, "c"),
        (5, 2, 0, "k"),
        (5, 2, 6, "k"),
        (5.0, 2, 1, "n"),
        (5, 2, True, "k"),
    ],
)
def test_pass_at_k_bad_input(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_bad_input():
    with pytest.raises(ValueError, match="correct"):
        mean_pass_at_k([], n=4, ks=[1])
    with pytest.raises(ValueError, match="correct"):
        mean_pass_at_k(torch.zeros(2, 2), n=4, ks=[1])


# ---------------------------------------------------------------- best-of-N


def test_best_of_n_closed_form_matches_monte_carlo():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(3, 6), -1)
    rewards = torch.randn(3, 6)
    rewards[0, 1] = rewards[0, 4]  # a tie: broken uniformly among the tied samples
    n, draws = 5, 200_000
    exact = best_of_n_probs(probs, rewards, n)
    torch.testing.assert_close(exact.sum(-1), torch.ones(3))
    for x in range(3):
        samples = torch.multinomial(probs[x], draws * n, replacement=True).view(draws, n)
        r = rewards[x][samples] + 1e-6 * torch.rand(draws, n)  # random tie-breaking
        chosen = samples.gather(1, r.argmax(1, keepdim=True)).squeeze(1)
        freq = torch.bincount(chosen, minlength=6).float() / draws
        torch.testing.assert_close(freq, exact[x], atol=4e-3, rtol=0)


def test_best_of_n_limits_and_kl_bound():
    probs = torch.tensor([[0.5, 0.3, 0.2]])
    rewards = torch.tensor([[0.0, 2.0, 1.0]])
    torch.testing.assert_close(best_of_n_probs(probs, rewards, 1), probs)
    assert best_of_n_probs(probs, rewards, 200)[0, 1] > 0.999  # the top-reward answer
    for n in (1, 2, 4, 16, 64):
        bon = best_of_n_probs(probs, rewards, n)
        kl = (bon * (bon.clamp_min(1e-30).log() - probs.log())).sum().item()
        assert kl <= kl_upper_bound(n) + 1e-9
    # with many distinct rewards of equal mass the bound is nearly tight (Beirami et al. 2024, §3)
    flat = torch.full((1, 1000), 1e-3)
    bon = best_of_n_probs(flat, torch.arange(1000.0)[None], 8)
    kl = (bon * (bon.clamp_min(1e-30).log() - flat.log())).sum().item()
    assert kl == pytest.approx(kl_upper_bound(8), abs=5e-3)


def test_best_of_n_bad_input():
    with pytest.raises(ValueError, match="rewards"):
        best_of_n_probs(torch.ones(2, 3) / 3, torch.zeros(2, 4), 2)
    with pytest.raises(ValueError, match="n"):
        best_of_n_probs(torch.ones(2, 3) / 3, torch.zeros(2, 3), 0)
    with pytest.raises(ValueError, match="probs"):
        best_of_n_probs(torch.ones(2, 3), torch.zeros(2, 3), 2)
    with pytest.raises(ValueError, match="n"):
        kl_upper_bound(0)


# ---------------------------------------------------------------- rejection-sampling fine-tuning


def test_rft_trains_only_on_verified_samples():
    torch.manual_seed(0)
    task = ScratchpadAdditionTask(seed=0, batch_size=4)
    policy = task.make_policy()
    seen = []
    original = policy.logps

    def spy(prompts, completions, temperature=None):
        seen.append((prompts, completions))
        return original(prompts, completions, temperature)

    policy.logps = spy
    history = train_rft(policy, task, RFTConfig(num_generations=4, steps=3, threshold=0.0))
    assert [h["kept"] for h in history] == [16, 16, 16]  # threshold 0: every sample is kept
    seen.clear()
    history = train_rft(policy, task, RFTConfig(num_generations=4, steps=3, threshold=1.0))
    assert all(h["kept"] == 0 and h["loss"] == 0.0 for h in history)  # an untrained model answers nothing right
    assert seen == []  # no verified sample: no forward pass, no update


def test_rft_loss_is_mean_nll_on_kept_samples():
    torch.manual_seed(0)
    task = ScratchpadAdditionTask(seed=0, batch_size=2)
    policy = task.make_policy()
    prompts, completions, mask = task.sft_batch(2)

    class Fixed:
        def prompts(self):
            return prompts

        def reward(self, p, c):
            return torch.tensor([1.0, 0.0])

    policy.sample = lambda p, g: (completions, mask)
    before = -(policy.logps(prompts[:1], completions[:1], temperature=1.0).sum() / mask[:1].sum()).item()
    history = train_rft(policy, Fixed(), RFTConfig(num_generations=1, steps=1))
    assert history[0]["kept"] == 1 and history[0]["loss"] == pytest.approx(before, rel=1e-6)


# ---------------------------------------------------------------- forced first token


def test_forced_mode_accuracy_forces_the_first_token_and_keeps_the_length():
    from rlhf_toy.demos.reasoning import forced_mode_accuracy
    from rlhf_toy.tasks.addition import encode

    torch.manual_seed(0)
    task = ScratchpadAdditionTask(seed=0, n_heldout=20)
    policy = task.make_policy()
    seen = []
    original = policy.generate

    def spy(prompts, *args, **kwargs):
        out = original(prompts, *args, **kwargs)
        seen.append((prompts[:, -1].clone(), out[0].shape[1], policy.max_completion_length))
        return out

    policy.generate = spy
    acc = forced_mode_accuracy(policy, task, n=3)
    assert set(acc) == {"scratchpad", "direct"} and all(a.shape == (20,) for a in acc.values())
    assert all(((a >= 0) & (a <= 1)).all() for a in acc.values())
    digits = {encode(str(d))[0] for d in range(10)}
    (pad_first, pad_len, pad_max), (direct_first, direct_len, direct_max) = seen
    assert set(pad_first.tolist()) <= digits and set(direct_first.tolist()) == set(encode("="))
    assert pad_max == direct_max == task.max_completion_length - 1 and max(pad_len, direct_len) <= pad_max
    assert policy.max_completion_length == task.max_completion_length  # restored

    # a policy that always writes "=<answer>" right after "=" is right in the direct mode on every problem
    task = ScratchpadAdditionTask(seed=0, n_heldout=5)
    answers = task.answers(task.heldout_prompts())

    class Oracle:
        temperature, max_completion_length = 1.0, task.max_completion_length

        def completion_logits(self, prompts, completions):
            return torch.zeros(len(prompts), 1, 16)

        def generate(self, prompts, num_generations=1):
            rows = [f"{answers[i // 4]}|" for i in range(len(prompts))]  # n = 4 samples per problem, adjacent
            completions = to_completions(rows, width=self.max_completion_length)
            return completions, None, None

    acc = forced_mode_accuracy(Oracle(), task, n=4)
    assert acc["direct"].tolist() == [1.0] * 5 and acc["scratchpad"].tolist() == [0.0] * 5


def test_by_shape_samples_each_shape_and_splits_format_by_mode():
    from rlhf_toy.demos.reasoning import by_shape

    task = ScratchpadAdditionTask(seed=0)
    seen = []

    class Half:
        """Per problem: half the answers with the right scratchpad and answer, half a malformed wrong direct answer."""

        def sample(self, prompts, n):
            seen.append(prompts.clone())
            texts = []
            for row in prompts:
                a, b = (int(x) for x in decode(row).rstrip("=").split("+"))
                texts += [f"{scratchpad(a, b)}={a + b}|"] * (n // 2) + [f"=0{a + b}|"] * (n - n // 2)
            return to_completions(texts, width=task.max_completion_length), None

    out = by_shape(Half(), task, n=4, per_shape=6, seed=1)
    assert list(out) == ["1+1", "1+2", "2+1", "2+2"]
    for shape, prompts in zip(out, seen, strict=True):
        assert len(prompts) == 6 and len({tuple(r) for r in prompts.tolist()}) == 6  # without replacement
        for row in prompts:
            a, b = decode(row).rstrip("=").split("+")
            assert f"{len(a)}+{len(b)}" == shape
        assert out[shape] == {"accuracy": 0.5, "scratchpad_rate": 0.5, "format_scratchpad": 1.0, "format_direct": 0.0}


# ---------------------------------------------------------------- the cache


def test_cache_hash_and_cheapest_entry_regenerate_exactly():
    sys.path.insert(0, str(ROOT / "scripts"))
    import run_reasoning

    from rlhf_toy.demos.reasoning import best_of_n_sweep

    cache = json.loads((ROOT / "docs" / "data" / "reasoning.json").read_text(encoding="utf-8"))
    assert cache["code_hash"] == run_reasoning.code_hash(), "code changed: rerun scripts/run_reasoning.py"
    fresh = [{k: run_reasoning.r4(v) if isinstance(v, float) else v for k, v in r.items()} for r in best_of_n_sweep(0)]
    assert fresh == cache["best_of_n"]
    assert set(cache["runs"]) == set(run_reasoning.RUNS)
    assert set(cache["controls"]) == set(run_reasoning.CONTROLS)


def test_figures_redraw_from_the_cache_byte_for_byte(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import run_reasoning

    committed = dict(run_reasoning.FIGURES)
    run_reasoning.FIGURES = {k: tmp_path / p.name for k, p in committed.items()}
    try:
        run_reasoning.plot(json.loads(run_reasoning.CACHE.read_text(encoding="utf-8")))
    finally:
        redrawn, run_reasoning.FIGURES = run_reasoning.FIGURES, committed
    for key, path in committed.items():
        assert redrawn[key].read_bytes() == path.read_bytes(), f"{path.name}: run scripts/run_reasoning.py --plot"
