"""第 3 章：Bradley–Terry 损失（间隔、居中）、带噪声的偏好数据、查表奖励模型的训练。"""

from __future__ import annotations

import math

import pytest
import torch

from rlhf_toy import BanditTask, RewardConfig, TableRewardModel, bradley_terry_loss, train_reward_model
from rlhf_toy.train.reward_model import preference_accuracy


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def test_bt_loss_value_by_hand():
    rc, rr, m, c = [1.0, -0.5, 2.0], [0.0, 0.5, 2.5], [0.2, 0.0, 1.0], 0.01
    loss, _ = bradley_terry_loss(torch.tensor(rc), torch.tensor(rr), torch.tensor(m), center_rewards_coefficient=c)
    nll = sum(-math.log(sigmoid(a - b - mm)) for a, b, mm in zip(rc, rr, m, strict=True)) / 3
    centre = c * sum((a + b) ** 2 for a, b in zip(rc, rr, strict=True)) / 3
    assert loss.item() == pytest.approx(nll + centre, rel=1e-6)


@pytest.mark.parametrize("with_extras", [False, True])
def test_bt_gradient_matches_closed_form(with_extras):
    """∂L/∂r_w = −σ(−(Δ−m))/B + 2c(r_w+r_l)/B，∂L/∂r_l = +σ(−(Δ−m))/B + 2c(r_w+r_l)/B。"""
    torch.manual_seed(0)
    B = 6
    rc = torch.randn(B, requires_grad=True)
    rr = torch.randn(B, requires_grad=True)
    margin = torch.rand(B) if with_extras else None
    c = 0.05 if with_extras else None
    loss, _ = bradley_terry_loss(rc, rr, margin, c)
    loss.backward()
    for i in range(B):
        delta = rc[i].item() - rr[i].item() - (margin[i].item() if with_extras else 0.0)
        centre = 2 * (c or 0.0) * (rc[i].item() + rr[i].item()) / B
        assert rc.grad[i].item() == pytest.approx(-sigmoid(-delta) / B + centre, abs=1e-6)
        assert rr.grad[i].item() == pytest.approx(sigmoid(-delta) / B + centre, abs=1e-6)


def test_bt_margin_is_a_shift_and_centring_is_invariant_to_it():
    rc, rr = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.5])
    with_margin, _ = bradley_terry_loss(rc, rr, margin=torch.tensor([0.5, 0.5]))
    shifted, _ = bradley_terry_loss(rc - 0.5, rr)
    assert with_margin.item() == pytest.approx(shifted.item())
    plain, _ = bradley_terry_loss(rc + 3.0, rr + 3.0)  # 只看差：整体平移不改变 BT 损失
    base, _ = bradley_terry_loss(rc, rr)
    assert plain.item() == pytest.approx(base.item())
    centred, _ = bradley_terry_loss(rc + 3.0, rr + 3.0, center_rewards_coefficient=0.01)
    assert centred.item() > plain.item()  # 居中项惩罚整体平移


def test_bt_metrics():
    _, m = bradley_terry_loss(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 0.0, 3.0]))
    assert m["accuracy"] == pytest.approx(1 / 3)  # 平局不算对
    assert m["margin"] == pytest.approx(0.0)
    assert (m["min_reward"], m["max_reward"]) == (0.0, 3.0)
    assert m["mean_reward"] == pytest.approx(1.0)


def test_bt_bad_inputs():
    with pytest.raises(ValueError, match=r"至少需要一个偏好对"):
        bradley_terry_loss(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match=r"rejected_rewards 的形状是 \(3,\)，期望 \(2,\)"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match=r"chosen_rewards 的形状是 \(2, 1\)，期望 1 维"):
        bradley_terry_loss(torch.zeros(2, 1), torch.zeros(2, 1))
    with pytest.raises(ValueError, match=r"margin 的形状是 \(\)，期望 \(2,\)"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(2), margin=torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"center_rewards_coefficient 应 ≥ 0"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(2), center_rewards_coefficient=-0.1)
    with pytest.raises(ValueError, match=r"非有限值"):
        bradley_terry_loss(torch.tensor([float("inf"), 0.0]), torch.zeros(2))


def test_noisy_preference_pairs():
    torch.manual_seed(1)
    task = BanditTask.make(50, 6)
    prompts, chosen, rejected = task.noisy_preference_pairs(4, 0.0)
    assert prompts.shape == (200,) and chosen.shape == rejected.shape == (200, 1)
    assert torch.equal(prompts[:8], torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))  # 同一提示词相邻
    assert torch.equal(chosen[:, 0], task.correct[prompts])
    assert (rejected != chosen).all()
    _, chosen1, rejected1 = task.noisy_preference_pairs(2, 1.0)
    assert torch.equal(rejected1[:, 0], task.correct.repeat_interleave(2))
    p, c, _ = task.noisy_preference_pairs(40, 0.3)
    flipped = (c[:, 0] != task.correct[p]).float().mean().item()
    assert flipped == pytest.approx(0.3, abs=0.03)
    with pytest.raises(ValueError, match="label_noise 应在"):
        task.noisy_preference_pairs(1, 1.5)
    with pytest.raises(ValueError, match="pairs_per_prompt 应是正整数"):
        task.noisy_preference_pairs(0)


def test_table_reward_model_interface():
    rm = TableRewardModel(3, 4)
    with torch.no_grad():
        rm.table[1, 2] = 5.0
    out = rm.reward(torch.tensor([1, 0]), torch.tensor([[2], [2]]))
    assert out.tolist() == [5.0, 0.0] and not out.requires_grad
    with pytest.raises(ValueError, match=r"completions 的形状是 \(2, 2\)，期望 \(2, 1\)"):
        rm(torch.tensor([1, 0]), torch.tensor([[2, 1], [2, 1]]))
    with pytest.raises(ValueError, match="n_answers ≥ 2"):
        TableRewardModel(3, 1)


def test_training_clean_vs_noisy_and_centring():
    torch.manual_seed(2)
    task = BanditTask.make(20, 8)
    clean, noisy = task.noisy_preference_pairs(3, 0.0), task.noisy_preference_pairs(3, 0.3)
    held_out = task.noisy_preference_pairs(4, 0.0)
    accuracy = {}
    for name, pairs in (("clean", clean), ("noisy", noisy)):
        rm = TableRewardModel(20, 8)
        history = train_reward_model(rm, pairs, RewardConfig(steps=60, center_rewards_coefficient=0.01), held_out)
        assert history[-1]["loss"] < history[0]["loss"]
        assert abs(history[-1]["mean_reward"]) < 0.05  # 居中项让平均分数留在 0 附近
        accuracy[name] = preference_accuracy(rm, held_out)
    assert accuracy["clean"] > accuracy["noisy"]
    assert accuracy["clean"] > 0.6
