"""Chapter 12, tools: the calculator task, the multi-turn rollout, the tool loss mask and the GRPO loop."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from rlhf_toy._code_hash import sources_hash
from rlhf_toy.demos import tools as demo
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.grpo import grpo_loss
from rlhf_toy.policies.transformer import TinyTransformerPolicy
from rlhf_toy.rollout.multi_turn import tool_rollout
from rlhf_toy.tasks.addition import EOS, PAD, encode
from rlhf_toy.tasks.calculator import CALL, END_RES, RES, VOCAB, CalculatorTask, calculator, render
from rlhf_toy.train.tool_grpo import ToolGRPOConfig, tool_loss_mask, train_tool_grpo

CACHE = Path(__file__).resolve().parents[1] / "docs" / "data" / "tools.json"


class Scripted:
    """A stand-in policy that writes `script[t]` at position t (its logits are one-hot × 50)."""

    pad_id, eos_id, temperature = PAD, EOS, 1.0

    def __init__(self, script: list[int], vocab_size: int = len(VOCAB)):
        self.script, self.V, self.max_completion_length = script, vocab_size, len(script)

    def completion_logits(self, prompts, completions):
        t = completions.shape[1] - 1
        logits = torch.zeros(prompts.shape[0], completions.shape[1], self.V)
        logits[:, t, self.script[t]] = 50.0
        return logits


def prompts_for(task, a, b):
    return task.encode_prompts(torch.tensor([[a, b]]))


# --- the tool and the task -------------------------------------------------------------------------------------


def test_calculator_evaluates_what_was_written():
    assert calculator(encode("347+588")) == encode("935") + [END_RES]
    assert calculator(encode("0+0")) == encode("0") + [END_RES]
    for bad in ("", "34", "34+", "+5", "3+4+5", "3=4"):
        assert calculator(encode(bad)) == [END_RES], bad
    assert calculator([CALL]) == [END_RES]


def test_demonstration_and_sft_mask_exclude_tool_outputs():
    task = CalculatorTask(seed=0)
    ids, tool_mask = task.demonstration(347, 588, call=True)
    assert render(ids, tool_mask) == "<call>347+588<res>[935</res>]935<eos>"
    assert len(task.demonstration(999, 999, call=True)[0]) == task.max_completion_length == 19  # fits exactly
    ids, tool_mask = task.demonstration(5, 7, call=False)
    assert render(ids, tool_mask) == "12<eos>" and tool_mask == [1, 1, 1]
    task = CalculatorTask(seed=0, p_call=1.0)
    prompts, completions, mask = task.sft_batch(8)
    for row, m in zip(completions.tolist(), mask, strict=True):
        end = row.index(END_RES)
        start = row.index(RES) + 1
        assert m[start : end + 1].sum() == 0 and m[:start].sum() == start  # tool result and </res> not trained
    assert task.reward(prompts, completions).tolist() == [1.0] * 8


def test_reward_reads_only_the_final_answer():
    task = CalculatorTask(seed=0)
    p = prompts_for(task, 347, 588).repeat(5, 1)
    rows = [
        [CALL, *encode("347+588"), RES, *encode("935"), END_RES, *encode("935"), EOS],  # right
        [CALL, *encode("347+589"), RES, *encode("936"), END_RES, *encode("936"), EOS],  # miscopied operand
        [CALL, *encode("347+588"), RES, *encode("935"), END_RES, *encode("935")],  # no EOS
        [*encode("935"), EOS],  # direct, right
        [CALL, *encode("347+588"), RES, *encode("935"), END_RES, *encode("953"), EOS],  # miscopied result
    ]
    width = max(map(len, rows))
    completions = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    assert task.reward(p, completions).tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert task.called(completions).tolist() == [1.0, 1.0, 1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="completions 的形状是"):
        task.reward(p[:2], completions)
    with pytest.raises(ValueError, match="p_call"):
        CalculatorTask(p_call=1.5)


# --- the multi-turn rollout -------------------------------------------------------------------------------------


def test_rollout_inserts_the_tool_output_and_masks_it():
    task = CalculatorTask(seed=0)
    script, tool_mask = task.demonstration(347, 588, call=True)
    roll = tool_rollout(Scripted(script), prompts_for(task, 347, 588), task)
    assert roll.completions[0].tolist() == script
    assert roll.tool_mask[0].tolist() == tool_mask
    assert (roll.logps[0][roll.tool_mask[0] == 0] == 0).all()  # as TRL: logprob 0.0 on tool tokens
    assert (roll.logps[0][roll.tool_mask[0] == 1] > -1e-6).all()  # the scripted tokens have probability ~1
    assert task.reward(prompts_for(task, 347, 588), roll.completions).item() == 1.0


def test_rollout_tool_sees_the_miscopied_call():
    task = CalculatorTask(seed=0)
    script, _ = task.demonstration(347, 589, call=True)  # the policy miscopies 588 as 589
    roll = tool_rollout(Scripted(script), prompts_for(task, 347, 588), task)
    assert render(roll.completions[0], roll.tool_mask[0]) == "<call>347+589<res>[936</res>]936<eos>"
    assert task.reward(prompts_for(task, 347, 588), roll.completions).item() == 0.0


def test_rollout_ignores_a_result_token_outside_a_call():
    task = CalculatorTask(seed=0)
    script = [RES, *encode("12"), EOS]
    roll = tool_rollout(Scripted(script), prompts_for(task, 5, 7), task)
    assert roll.completions[0].tolist() == script and roll.tool_mask.min() == 1
    assert task.reward(prompts_for(task, 5, 7), roll.completions).item() == 0.0  # "<res>12" is not the answer


def test_rollout_truncates_a_tool_output_that_does_not_fit():
    task = CalculatorTask(seed=0)
    script = [CALL, *encode("347+588"), RES, 3]  # length 10: room for one token of the tool's output
    roll = tool_rollout(Scripted(script), prompts_for(task, 347, 588), task, num_generations=2)
    assert roll.completions.shape == (2, 10)
    assert roll.tool_mask[:, -1].tolist() == [0.0, 0.0] and roll.mask.sum().item() == 20  # no EOS: all kept
    with pytest.raises(ValueError, match="num_generations"):
        tool_rollout(Scripted(script), prompts_for(task, 1, 2), task, num_generations=0)
    with pytest.raises(ValueError, match="prompts 的形状是"):
        tool_rollout(Scripted(script), torch.tensor([1, 2]), task)


def test_rollout_without_calls_never_writes_the_call_token():
    torch.manual_seed(0)
    task = CalculatorTask(seed=0)
    policy = task.make_policy()
    with torch.no_grad():
        policy.head.bias[CALL] = 10.0  # the untrained policy would call almost always
    prompts = task.heldout_prompts(8)
    assert task.called(tool_rollout(policy, prompts, task).completions).mean() > 0.5
    roll = tool_rollout(policy, prompts, task, allow_calls=False, generator=torch.Generator().manual_seed(0))
    assert task.called(roll.completions).sum() == 0 and roll.tool_mask.min() == 1  # no call: nothing inserted


# --- equations --------------------------------------------------------------------------------------------------


def test_policy_gradient_sums_only_over_policy_tokens():
    # eq:tool-pg. Three tokens; the middle one is the environment's (P_env fixed, no θ). Enumerate every
    # trajectory: ∇J by autograd of Σ_τ p_θ(τ) R(τ) equals Σ_τ p(τ) R(τ) ∇ Σ_t c_t log π_θ(y_t | h_t) with
    # c = tool_mask, and differs from the same sum with c = 1 everywhere (tool tokens treated as actions).
    torch.manual_seed(0)
    V = 4
    policy = TinyTransformerPolicy(V, pad_id=0, eos_id=V + 99, max_prompt_length=1, max_completion_length=3)
    p_env = torch.tensor([[0.0, 0.0, 0.7, 0.3], [0.0, 0.0, 0.2, 0.8], [0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.9, 0.1]])
    trajectories = [(a, e, b) for a, b in itertools.product(range(V), repeat=2) for e in (2, 3)]
    completions = torch.tensor(trajectories)
    prompts = torch.ones(len(trajectories), 1, dtype=torch.long)
    rewards = torch.randn(len(trajectories))
    tool_mask = torch.tensor([[1.0, 0.0, 1.0]]).expand(len(trajectories), 3)
    logps = F.log_softmax(policy.completion_logits(prompts, completions), -1).gather(-1, completions[..., None])[..., 0]
    env_logp = torch.log(p_env[completions[:, 0], completions[:, 1]])
    log_p = (logps * tool_mask).sum(1) + env_logp  # log p_θ(τ)
    assert torch.allclose(log_p.exp().sum(), torch.tensor(1.0), atol=1e-5)
    params = list(policy.parameters())
    exact = torch.autograd.grad((log_p.exp() * rewards).sum(), params, retain_graph=True)
    weights = (log_p.exp() * rewards).detach()
    ones = torch.ones_like(tool_mask)

    def surrogate(mask_tool_outputs):
        c = tool_loss_mask(ones, tool_mask, mask_tool_outputs)
        return torch.autograd.grad((weights * (logps * c).sum(1)).sum(), params, retain_graph=True)

    flat = lambda gs: torch.cat([g.flatten() for g in gs])  # noqa: E731
    assert torch.allclose(flat(surrogate(True)), flat(exact), atol=1e-6)
    assert (flat(surrogate(False)) - flat(exact)).norm() > 0.1 * flat(exact).norm()


def test_k3_at_a_tool_token_is_not_the_kl_there():
    # eq:tool-kl. E_{y~π}[k3(y)] = KL(π‖π_ref) exactly (enumeration over the vocabulary); at a tool token y_env,
    # drawn by the environment and not by π, k3(y_env) is a different number.
    g = torch.Generator().manual_seed(0)
    log_pi = F.log_softmax(torch.randn(18, generator=g, dtype=torch.float64), 0)
    log_ref = F.log_softmax(torch.randn(18, generator=g, dtype=torch.float64), 0)
    k3 = kl_estimate(log_pi, log_ref, "k3")
    exact = (log_pi.exp() * (log_pi - log_ref)).sum()
    assert torch.allclose((log_pi.exp() * k3).sum(), exact)
    y_env = int(log_pi.argmin())  # a token the policy finds unlikely, as the untrained tool positions do
    assert abs(k3[y_env] - exact) > 0.1


def test_tool_loss_mask_and_bad_inputs():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # an empty row
    tool = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    assert tool_loss_mask(mask, tool).tolist() == [[1, 0, 1, 0], [0, 0, 0, 0]]
    assert torch.equal(tool_loss_mask(mask, tool, False), mask)
    with pytest.raises(ValueError, match=r"tool_mask 的形状是 \(2, 3\)，期望 \(2, 4\)"):
        tool_loss_mask(mask, tool[:, :3])
    with pytest.raises(ValueError, match="tool_mask 只能含 0 和 1"):
        tool_loss_mask(mask, tool * 2)
    with pytest.raises(ValueError, match="mask 的形状是"):
        tool_loss_mask(mask[0], tool[0])


def test_policy_and_tool_parts_add_up_to_the_unmasked_loss():
    # train_tool_grpo splits the dr_grpo loss into the policy-token part and the tool-token part.
    g = torch.Generator().manual_seed(1)
    logps = -torch.rand(4, 6, generator=g)
    mask = torch.tensor([[1.0] * 6, [1.0] * 4 + [0.0] * 2, [1.0] * 6, [1.0] * 2 + [0.0] * 4])
    tool = torch.ones(4, 6)
    tool[0, 2:4] = tool[2, 1:5] = 0
    adv = torch.randn(4, generator=g)
    kw = dict(beta=0.0, loss_type="dr_grpo", max_completion_length=6)
    pol = tool_loss_mask(mask, tool)
    whole, _ = grpo_loss(logps, None, None, adv, mask, **kw)
    a, _ = grpo_loss(logps, None, None, adv, pol, **kw)
    b, _ = grpo_loss(logps, None, None, adv, mask - pol, **kw)
    assert torch.allclose(a + b, whole)
    dapo, _ = grpo_loss(logps, None, None, adv, pol, beta=0.0, loss_type="dapo")
    assert torch.allclose(a * 4 * 6 / pol.sum(), dapo)  # the dapo scale used in train_tool_grpo


# --- the training loop ------------------------------------------------------------------------------------------


def tiny_setup():
    torch.manual_seed(0)
    task = CalculatorTask(n_digits=1, batch_size=2, n_heldout=10, p_call=0.5, seed=0)
    return task, task.make_policy(d_model=16, n_layers=1, n_heads=2)


@pytest.mark.parametrize("masked", [True, False])
def test_train_tool_grpo_runs_and_masks(masked):
    task, policy = tiny_setup()
    with torch.no_grad():
        policy.head.bias[CALL] = 3.0  # make calls likely so that tool tokens exist
    before = [p.clone() for p in policy.parameters()]
    config = ToolGRPOConfig(steps=2, num_generations=4, mask_tool_outputs=masked)
    history = train_tool_grpo(policy, task, config, evaluate=lambda p: {"x": 1.0}, eval_every=2)
    assert len(history) == 2 and history[-1]["x"] == 1.0 and "x" not in history[0]
    for key in ("reward", "call_rate", "tool_logp", "kl/tool", "kl/tool_exact", "grad_norm/policy", "grad_norm/tool"):
        assert all(torch.isfinite(torch.tensor(r[key])) for r in history), key
    assert history[0]["kl"] == 0.0 and history[0]["kl/tool_exact"] == 0.0  # ref = the starting policy
    assert history[0]["tool_token_share"] > 0
    changed = any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert changed == (sum(r["grad_norm/policy"] + (0 if masked else r["grad_norm/tool"]) for r in history) > 0)


def test_equal_rewards_give_no_update_and_bad_loss_type_raises():
    task, policy = tiny_setup()
    task.reward = lambda prompts, completions: torch.zeros(len(completions))  # every group ties
    before = [p.clone() for p in policy.parameters()]
    history = train_tool_grpo(policy, task, ToolGRPOConfig(steps=1, num_generations=2, mask_tool_outputs=False))
    assert history[0]["grad_norm/policy"] == 0.0 and history[0]["grad_norm/tool"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    with pytest.raises(ValueError, match="loss_type"):
        train_tool_grpo(policy, task, ToolGRPOConfig(steps=1, loss_type="grpo"))


# --- the cache --------------------------------------------------------------------------------------------------


def test_cache_is_current_and_its_examples_recompute():
    data = json.loads(CACHE.read_text(encoding="utf-8"))
    assert data["code_hash"] == sources_hash(demo.SOURCES)
    task = CalculatorTask(seed=0)
    vocab = {render([i]): i for i in range(len(VOCAB)) if i != PAD}
    for ex in data["results"]["examples"]:
        ids = [vocab[t] for t in ex["tokens"]]
        if CALL in ids:  # the environment's tokens are exactly the calculator's output on what the policy wrote
            start, res = ids.index(CALL) + 1, ids.index(RES)
            out = calculator(ids[start:res])
            assert ids[res + 1 : res + 1 + len(out)] == out
            assert ex["tool_mask"][res + 1 : res + 1 + len(out)] == [0] * len(out)
        assert ex["tool_mask"].count(0) == (len(out) if CALL in ids else 0)
        a, b = map(int, ex["prompt"].rstrip("=").split("+"))
        reward = task.reward(prompts_for(task, a, b), torch.tensor([ids]))
        assert reward.item() == ex["reward"]
