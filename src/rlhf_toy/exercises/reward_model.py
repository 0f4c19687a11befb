r"""第 3 章的练习：Bradley–Terry 损失 $-\overline{\log\sigma(r_w - r_l - m)}$ 与它的两个日志指标。"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from rlhf_toy.exercises._core import Case, CheckResult, Exercise, Mistake, loss_and_metrics, run_check
from rlhf_toy.losses.reward_model import bradley_terry_loss

GRAD = ("chosen_rewards", "rejected_rewards")


def _cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(3)
    chosen, rejected = torch.randn(4, generator=g), torch.randn(4, generator=g)
    return (
        Case("随机的 4 个偏好对", {"chosen_rewards": chosen, "rejected_rewards": rejected}, grad=GRAD),
        Case(
            "全部平局（训练开始时的分数）",
            {"chosen_rewards": torch.zeros(3), "rejected_rewards": torch.zeros(3)},
            grad=GRAD,
        ),
        Case(
            "带间隔项 m",
            {"chosen_rewards": chosen, "rejected_rewards": rejected, "margin": torch.tensor([0.5, 1.0, 0.0, 2.0])},
            grad=GRAD,
        ),
        Case(
            "排得很反的一对（r_w − r_l = −100）",
            {"chosen_rewards": torch.tensor([-50.0, 1.0]), "rejected_rewards": torch.tensor([50.0, 0.0])},
            grad=GRAD,
        ),
        Case(
            "居中项 c = 0.01",
            {"chosen_rewards": chosen + 3, "rejected_rewards": rejected + 3, "center_rewards_coefficient": 0.01},
            grad=GRAD,
        ),
    )


def _bt(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None, *, logits=None, acc=None):
    z = chosen_rewards - rejected_rewards if logits is None else logits
    if margin is not None and logits is None:
        z = z - margin
    loss = -F.logsigmoid(z).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()
    accuracy = (chosen_rewards > rejected_rewards).float().mean() if acc is None else acc
    return loss, {"accuracy": accuracy, "margin": (chosen_rewards - rejected_rewards).mean()}


def _reversed(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    z = rejected_rewards - chosen_rewards - (0 if margin is None else margin)
    return _bt(chosen_rewards, rejected_rewards, None, center_rewards_coefficient, logits=z)


def _sign(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    loss, metrics = _bt(chosen_rewards, rejected_rewards, margin, center_rewards_coefficient)
    return -loss, metrics


def _sum(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    z = chosen_rewards - rejected_rewards - (0 if margin is None else margin)
    loss = -F.logsigmoid(z).sum()
    return loss, _bt(chosen_rewards, rejected_rewards)[1]


def _ge(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    acc = (chosen_rewards >= rejected_rewards).float().mean()
    return _bt(chosen_rewards, rejected_rewards, margin, center_rewards_coefficient, acc=acc)


def _margin_added(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    z = chosen_rewards - rejected_rewards + (0 if margin is None else margin)
    return _bt(chosen_rewards, rejected_rewards, None, center_rewards_coefficient, logits=z)


def _margin_ignored(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    return _bt(chosen_rewards, rejected_rewards, None, center_rewards_coefficient)


def _two_step(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    z = chosen_rewards - rejected_rewards - (0 if margin is None else margin)
    loss = -torch.log(torch.sigmoid(z)).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()
    return loss, _bt(chosen_rewards, rejected_rewards)[1]


def _center_difference(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
    loss, metrics = _bt(chosen_rewards, rejected_rewards, margin, None)
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen_rewards - rejected_rewards) ** 2).mean()
    return loss, metrics


MISTAKES = (
    Mistake(
        "reversed",
        "间隔的方向写反了，用的是 log σ(r_l − r_w)：模型会认真地学会把被拒回答排在前面，训练损失照样下降。"
        "检查办法是看 accuracy 是否从 0 往 1 走，而不是只看损失。",
        _reversed,
    ),
    Mistake("sign", "损失的符号反了：要最小化的是负对数似然 −log σ(r_w − r_l)。损失 = −目标。", _sign),
    Mistake("sum_not_mean", "对偏好对求了和而不是平均：损失（和梯度）的大小随批大小变化，学习率也就跟着变了。", _sum),
    Mistake(
        "accuracy_ge",
        "accuracy 用了 ≥：初始时所有分数都是 0，用 r_w ≥ r_l 算出的准确率是 100%，看起来模型什么都会了。"
        "TRL 与本书都用严格大于，平局算错。",
        _ge,
    ),
    Mistake(
        "margin_added",
        "间隔项的符号反了：Llama 2 的间隔要求 r_w 比 r_l 至少高出 m，是 σ(r_w − r_l − m)，减去 m。",
        _margin_added,
    ),
    Mistake("margin_ignored", "没有用 margin 参数：给了间隔 m 时，损失里是 σ(r_w − r_l − m)。", _margin_ignored),
    Mistake(
        "log_of_sigmoid",
        "把 log σ 写成了 log(sigmoid(·)) 两步：间隔是很大的负数时 σ 在 float32 里下溢为 0，log 0 = −inf。"
        "用 F.logsigmoid（或 −softplus(−z)）。",
        _two_step,
    ),
    Mistake(
        "center_difference",
        "居中项要把每对分数之和 r_w + r_l 推向 0（奖励只确定到一个常数），写成 (r_w − r_l)² 罚的就成了间隔本身。",
        _center_difference,
    ),
)

EXERCISE = Exercise(
    "bradley_terry_loss", bradley_terry_loss, _cases(), loss_and_metrics(("accuracy", "margin")), MISTAKES
)


def check_bradley_terry_loss(your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    r"""检查读者写的 `bradley_terry_loss(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None)`（第 3 章）。

    读者的函数返回 `(loss, metrics)`，`metrics` 至少含 `accuracy`（$r_w > r_l$ 的比例，严格大于）与 `margin`
    （$r_w - r_l$ 的平均，不减间隔项）。用例：随机偏好对、全部平局、带间隔项、排得很反的一对、居中项；
    比较损失、两个指标与损失对两组分数的梯度（参考实现是
    [`bradley_terry_loss`][rlhf_toy.losses.reward_model.bradley_terry_loss]）。

    Args:
        your_fn: 读者的函数；`chosen_rewards`、`rejected_rewards`、`margin` 形状 `(B,)`。
        verbose: `False` 时不打印报告。

    Returns:
        `CheckResult`（`bool(result)` 表示是否通过）。

    Raises:
        ValueError: `your_fn` 不可调用。

    Examples:
        >>> check_bradley_terry_loss(bradley_terry_loss, verbose=False).passed
        True
    """
    return run_check(EXERCISE, your_fn, verbose=verbose)
