"""Chapter 12, distillation: per-token reverse-KL advantage and loss, exact divergences, the exact bench, the teacher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlhf_toy._code_hash import sources_hash
from rlhf_toy.demos.distillation import SOURCES, run_modes
from rlhf_toy.losses.distillation import (
    divergence_loss,
    generalized_jsd,
    onpolicy_distillation_loss,
    reverse_kl_advantages,
    token_kl,
)
from rlhf_toy.studies.forward_reverse_kl import bimodal_teacher, discretised_gaussian, fit_student, mode_masses
from rlhf_toy.studies.kl_estimators import exact_kl
from rlhf_toy.tasks.addition import EOS, AdditionTask, encode
from rlhf_toy.tasks.teachers import ExactAdderTeacher

CACHE = Path(__file__).resolve().parents[1] / "docs" / "data" / "distillation.json"


def batch(seed=0, B=4, T=5, V=7):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    teacher_logits = 2 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    mask = (torch.arange(T)[None] < torch.tensor([0, T, 2, 3][:B])[:, None]).double()
    return logits, teacher_logits, mask


def test_advantage_is_teacher_minus_student_detached_and_zero_on_padding():
    logits, teacher_logits, mask = batch()
    tokens = logits.argmax(-1)
    logps = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0].requires_grad_(True)
    teacher_logps = torch.log_softmax(teacher_logits, -1).gather(-1, tokens[..., None])[..., 0]
    teacher_logps[0, 0] = -float("inf")  # padding may hold anything
    a = reverse_kl_advantages(logps, teacher_logps, mask)
    assert not a.requires_grad
    assert torch.equal(a[mask == 0], torch.zeros_like(a[mask == 0]))
    torch.testing.assert_close(a[mask == 1], (teacher_logps - logps)[mask == 1].detach())


def test_expected_estimator_gradient_equals_exact_reverse_kl_gradient():
    """eq:opd-grad: E_{y~pi}[grad of the per-token loss at y] = grad KL(pi || pi_T) at that position (enumeration)."""
    g = torch.Generator().manual_seed(3)
    V = 6
    logits = torch.randn(V, generator=g, dtype=torch.float64)
    teacher_logps = torch.log_softmax(3 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    probs = torch.softmax(logits, -1)
    expected = torch.zeros(V, dtype=torch.float64)
    for y in range(V):
        theta = logits.clone().requires_grad_(True)
        logps = torch.log_softmax(theta, -1)[y].view(1, 1)
        loss, _ = onpolicy_distillation_loss(logps, teacher_logps[y].view(1, 1), torch.ones(1, 1, dtype=torch.float64))
        (grad,) = torch.autograd.grad(loss, theta)
        expected += probs[y] * grad
    theta = logits.clone().requires_grad_(True)
    (exact,) = torch.autograd.grad(token_kl(theta, teacher_logps, "reverse"), theta)
    torch.testing.assert_close(expected, exact)


def test_loss_value_is_mean_k1_and_gradient_is_reinforce():
    logits, teacher_logits, mask = batch(1)
    tokens = logits.argmax(-1)
    logps = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0].requires_grad_(True)
    teacher_logps = torch.log_softmax(teacher_logits, -1).gather(-1, tokens[..., None])[..., 0]
    loss, metrics = onpolicy_distillation_loss(logps, teacher_logps, mask)
    k1 = (logps - teacher_logps).detach()
    torch.testing.assert_close(loss.detach(), (k1 * mask).sum() / mask.sum())
    assert metrics["reverse_kl"] == pytest.approx(loss.item())
    loss.backward()
    torch.testing.assert_close(logps.grad, -(teacher_logps - logps.detach()) * mask / mask.sum())


def test_empty_mask_gives_zero_loss_and_zero_gradient():
    logps = torch.zeros(2, 3, requires_grad=True)
    loss, _ = onpolicy_distillation_loss(logps, torch.full((2, 3), -1.0), torch.zeros(2, 3))
    loss.backward()
    assert loss.item() == 0 and torch.equal(logps.grad, torch.zeros(2, 3))


def test_bad_inputs_raise_value_error_naming_the_argument():
    logps = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"teacher_logps 的形状是 \(2, 4\)"):
        reverse_kl_advantages(logps, torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="teacher_logps 带着梯度"):
        reverse_kl_advantages(logps, torch.zeros(2, 3, requires_grad=True), torch.ones(2, 3))
    with pytest.raises(ValueError, match="logps 的形状是"):
        reverse_kl_advantages(torch.zeros(6), torch.zeros(6), torch.ones(6))
    with pytest.raises(ValueError, match="beta 应在"):
        generalized_jsd(torch.zeros(3), torch.zeros(3), 1.5)
    with pytest.raises(ValueError, match="direction"):
        token_kl(torch.zeros(3), torch.zeros(3), "sideways")
    with pytest.raises(ValueError, match="mask 的形状"):
        divergence_loss(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4), torch.ones(2, 4))


def test_token_kl_matches_exact_kl_both_directions_and_extreme_logits():
    logits, teacher_logits, _ = batch(2)
    teacher_logits[0, 0, 0] = 80.0  # nearly one-hot teacher
    lp, lq = torch.log_softmax(logits, -1), torch.log_softmax(teacher_logits, -1)
    torch.testing.assert_close(token_kl(logits, teacher_logits, "reverse"), exact_kl(lp, lq))
    torch.testing.assert_close(token_kl(logits, teacher_logits, "forward"), exact_kl(lq, lp))
    assert torch.isfinite(token_kl(logits, teacher_logits, "forward")).all()


def test_generalized_jsd_closed_form_and_endpoints():
    """eq:gjsd: beta KL(pi_T||m) + (1-beta) KL(pi||m), m = (1-beta) pi + beta pi_T; 0 -> forward, 1 -> reverse KL."""
    logits, teacher_logits, _ = batch(4)
    p, q = torch.softmax(logits, -1), torch.softmax(teacher_logits, -1)
    beta = 0.3
    m = (1 - beta) * p + beta * q
    closed = beta * (q * (q / m).log()).sum(-1) + (1 - beta) * (p * (p / m).log()).sum(-1)
    torch.testing.assert_close(generalized_jsd(logits, teacher_logits, beta), closed)
    torch.testing.assert_close(
        generalized_jsd(logits, teacher_logits, 0.0), token_kl(logits, teacher_logits, "forward")
    )
    torch.testing.assert_close(
        generalized_jsd(logits, teacher_logits, 1.0), token_kl(logits, teacher_logits, "reverse")
    )
    assert generalized_jsd(logits, teacher_logits, 1e-6).max() < 1e-4  # not continuous at the ends


def test_equal_student_and_teacher_give_zero_everything():
    logits, _, mask = batch(5)
    for beta in (0.0, 0.5, 1.0):
        assert divergence_loss(logits, logits.clone(), mask, beta).abs().item() < 1e-12


def test_bimodal_bench_forward_covers_and_reverse_seeks():
    teacher = bimodal_teacher()
    assert teacher.exp().sum().item() == pytest.approx(1.0)
    forward = fit_student(teacher, "forward", steps=300)
    reverse = fit_student(teacher, "reverse", steps=300)
    assert min(mode_masses(forward.logps, 30)) > 0.3  # covers both peaks
    assert mode_masses(reverse.logps, 30)[0] > 0.98  # sits on the big one
    assert forward.forward_kl < reverse.forward_kl and reverse.reverse_kl < forward.reverse_kl


def test_discretised_gaussian_normalises_and_is_differentiable():
    mu = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    logps = discretised_gaussian(mu, torch.tensor(0.0), 9)
    assert logps.exp().sum().item() == pytest.approx(1.0)
    logps[3].backward()
    assert mu.grad is not None


def test_teacher_scores_any_prefix_position_by_position():
    task = AdditionTask(n_digits=1, n_heldout=30, seed=0)
    teacher = ExactAdderTeacher(task, epsilon=0.1)
    prompts = task.encode_prompts(torch.tensor([[7, 8], [7, 8]]))  # 15
    right = encode("15") + [EOS]
    wrong = encode("25") + [EOS]  # wrong first digit, the rest still scored against "15|"
    logps = teacher.logps(prompts, torch.tensor([right, wrong]))
    high, low = torch.tensor(0.9).log(), torch.tensor(0.1 / 15).log()
    torch.testing.assert_close(logps[0], torch.stack([high, high, high]))
    torch.testing.assert_close(logps[1], torch.stack([low, high, high]))
    torch.testing.assert_close(teacher.log_probs(prompts, torch.tensor([right, wrong])).exp().sum(-1), torch.ones(2, 3))
    with pytest.raises(ValueError, match="epsilon"):
        ExactAdderTeacher(task, epsilon=0.0)


def test_teacher_samples_end_with_eos_and_mostly_right():
    task = AdditionTask(n_digits=1, n_heldout=30, seed=0)
    teacher = ExactAdderTeacher(task, epsilon=0.05)
    prompts = task.encode_prompts(task.train)
    completions, mask = teacher.generate(prompts, generator=torch.Generator().manual_seed(0))
    assert completions.shape == mask.shape == (len(task.train), task.max_completion_length)
    assert task.reward(prompts, completions).mean().item() > 0.8


def test_cache_is_current_and_one_number_recomputes():
    cache = json.loads(CACHE.read_text())
    assert cache["code_hash"] == sources_hash(SOURCES)
    fresh = run_modes()["fits"][1]
    assert fresh["masses"] == cache["results"]["modes"]["fits"][1]["masses"]


def test_cross_entropy_on_teacher_samples_is_forward_kl_plus_teacher_entropy():
    """eq:sft-forward-kl: E_{y~pi_T}[-log pi(y)] = KL(pi_T || pi) + H(pi_T), by enumeration on the bench."""
    teacher = bimodal_teacher()
    student = discretised_gaussian(25.0, torch.tensor(2.0), teacher.numel())
    cross_entropy = -(teacher.exp() * student).sum()
    entropy = -(teacher.exp() * teacher).sum()
    torch.testing.assert_close(cross_entropy, token_kl(student, teacher, "forward") + entropy)


def test_minus_kl_baseline_keeps_the_expected_gradient_and_lowers_the_variance():
    # 页面“完整版”之后的方差表：一个位置上 E[A_t] = −KL_t，减掉它期望梯度不变（仍是精确反向 KL 的梯度），方差变小。
    from rlhf_toy.demos.distillation import advantage_variance

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, generator=g, dtype=torch.float64)
    teacher = torch.randn(16, generator=g, dtype=torch.float64).log_softmax(0)
    theta = logits.clone().requires_grad_(True)
    exact = torch.autograd.grad(token_kl(theta, teacher, "reverse"), theta)[0]
    probs = logits.softmax(0)
    advantages = teacher - probs.log()
    scores = torch.eye(16, dtype=torch.float64) - probs
    variances = []
    for baseline in (0.0, (probs * advantages).sum()):
        grads = -(advantages - baseline)[:, None] * scores
        assert torch.allclose(probs @ grads, exact)
        variances.append((probs * grads.square().sum(-1)).sum() - exact.square().sum())
    assert variances[1] < variances[0]
    rows = [line.split() for line in advantage_variance().splitlines()[1:]]
    assert all(float(r[3]) < float(r[2]) for r in rows)
