r"""DPO（Rafailov et al., 2023, arXiv 2305.18290）及其变体的损失与隐式奖励指标。

输入是**整条回答**的对数概率（逐 token 对数概率在掩码内求和），与 TRL `DPOTrainer` 相同。
`loss_type` 选择逐对损失，名字同 TRL：`sigmoid`（DPO；`label_smoothing > 0` 时是 cDPO）、`hinge`（SLiC / RSO）、
`ipo`、`robust`（鲁棒 DPO）、`sigmoid_norm`（按长度归一化的 DPO）、`simpo`（无参考模型，TRL `CPOTrainer`）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from rlhf_toy._checks import check_choice, check_detached, check_finite, check_ndim, check_nonnegative, check_shape

# --8<-- [end:imports]

# --8<-- [start:dpo_loss_types]
DPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo", "robust", "sigmoid_norm", "simpo")
"""`dpo_loss` 接受的 `loss_type`，名字同 TRL（`simpo` 在 TRL 里属于 `CPOTrainer`）。"""

LENGTH_NORMALIZED_LOSS_TYPES = ("ipo", "sigmoid_norm", "simpo")
"""用到回答长度的 `loss_type`：分数先除以长度（至少 1）再相减。"""

LABEL_SMOOTHING_LOSS_TYPES = ("sigmoid", "robust", "simpo")
"""接受 `label_smoothing` $\\epsilon > 0$ 的 `loss_type`。"""

# --8<-- [end:dpo_loss_types]


def _check_dpo_inputs(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta) -> None:
    check_ndim("chosen_logps", chosen_logps, 1, "(B,)")
    for name, x in (
        ("chosen_logps", chosen_logps),
        ("rejected_logps", rejected_logps),
        ("ref_chosen_logps", ref_chosen_logps),
        ("ref_rejected_logps", ref_rejected_logps),
    ):
        if x is None and name.startswith("ref_"):
            continue  # 是否需要参考模型由 _check_reference_and_lengths 按 loss_type 判断
        check_shape(name, x, chosen_logps.shape, like="chosen_logps")
        check_finite(name, x)
        if name.startswith("ref_"):
            check_detached(name, x, "参考模型是常数；参考就是策略本身时 DPO 的 logits 与梯度恒为 0")
    check_nonnegative("beta", beta)


def _check_loss_options(loss_type: str, beta: float, label_smoothing: float, simpo_gamma: float) -> None:
    check_choice("loss_type", loss_type, DPO_LOSS_TYPES)
    if not 0.0 <= label_smoothing < 0.5:  # also rejects NaN
        raise ValueError(
            f"label_smoothing 应在 [0, 0.5) 内，实际是 {label_smoothing}：它是偏好对被标反的概率 ε，"
            "ε = 0.5 时标签与抛硬币无异，robust 的分母 1 − 2ε 为 0"
        )
    if label_smoothing > 0 and loss_type not in LABEL_SMOOTHING_LOSS_TYPES:
        raise ValueError(
            f"loss_type={loss_type!r} 没有标签平滑，label_smoothing={label_smoothing} 不会起作用；"
            "要考虑标签噪声，请用 'sigmoid'（cDPO）或 'robust'"
        )
    if loss_type in ("ipo", "simpo") and not beta > 0:
        raise ValueError(
            f"loss_type={loss_type!r} 要除以 beta（IPO 的目标间隔 1/(2β)，或 SimPO 的 γ/β），beta 应 > 0，实际是 {beta}"
        )
    check_nonnegative("simpo_gamma", simpo_gamma)


def _check_reference_and_lengths(
    loss_type, chosen_logps, ref_chosen_logps, ref_rejected_logps, chosen_lengths, rejected_lengths
) -> None:
    if loss_type == "simpo" and (ref_chosen_logps is not None or ref_rejected_logps is not None):
        raise ValueError("loss_type='simpo' 不用参考模型：请把 ref_chosen_logps、ref_rejected_logps 设为 None")
    if loss_type != "simpo" and (ref_chosen_logps is None or ref_rejected_logps is None):
        raise ValueError(
            f"loss_type={loss_type!r} 需要参考模型的对数概率 ref_chosen_logps、ref_rejected_logps；"
            "不用参考模型的变体是 'simpo'"
        )
    if (chosen_lengths is None) != (rejected_lengths is None):
        raise ValueError("chosen_lengths 与 rejected_lengths 要么都给，要么都不给")
    if chosen_lengths is None and loss_type in ("sigmoid_norm", "simpo"):
        raise ValueError(
            f"loss_type={loss_type!r} 按回答长度归一化对数概率，需要 chosen_lengths 与 rejected_lengths"
            "（形状 (B,)，即掩码之和）"
        )
    if chosen_lengths is not None and loss_type not in LENGTH_NORMALIZED_LOSS_TYPES:
        raise ValueError(
            f"loss_type={loss_type!r} 不按长度归一化，给出的 chosen_lengths、rejected_lengths 不会被使用；"
            f"按长度归一化的是 {', '.join(repr(t) for t in LENGTH_NORMALIZED_LOSS_TYPES)}"
        )
    for name, lengths in (("chosen_lengths", chosen_lengths), ("rejected_lengths", rejected_lengths)):
        if lengths is not None:
            check_shape(name, lengths, chosen_logps.shape, like="chosen_logps")
            check_finite(name, lengths)
            if (lengths < 0).any():
                raise ValueError(f"{name} 是回答的 token 数，应 ≥ 0，实际最小值是 {lengths.min().item()}")


# --8<-- [start:sigmoid_pair_loss]
def sigmoid_pair_loss(margins: Tensor, beta: float, label_smoothing: float = 0.0) -> Tensor:
    r"""逐对的 sigmoid 损失；`label_smoothing` $\epsilon > 0$ 时是保守 DPO（conservative DPO，cDPO）。

    $$\ell(\Delta) = -(1-\epsilon)\log\sigma(\beta\Delta) - \epsilon\log\sigma(-\beta\Delta),
    \qquad -\frac{\partial\ell}{\partial\Delta} = \beta\,\big[\sigma(-\beta\Delta) - \epsilon\big].$$

    $\epsilon = 0$ 是 DPO 论文式 (7)，即 TRL 1.16.0 的 `loss_type="sigmoid"`；$\epsilon > 0$ 是 Mitchell 的 cDPO 笔记式 (3)，
    即 TRL v0.28 及以前 `DPOTrainer.dpo_loss` 的 `sigmoid` 与 OpenRLHF `DPOLoss`。
    $\epsilon > 0$ 时梯度在 $\beta\Delta = \log\frac{1-\epsilon}{\epsilon}$ 处为 0，之后反过来把 $\Delta$ 往回拉。

    Args:
        margins: 间隔 $\Delta$，形状 `(B,)`，浮点。
        beta: KL 系数 $\beta \ge 0$（DPO 论文的代码与 TRL 早期版本的注释称之为 temperature）。
        label_smoothing: $\epsilon \in [0, 0.5)$，假设的标签翻转概率。

    Returns:
        逐对损失，形状 `(B,)`。

    Examples:
        >>> import torch
        >>> round(sigmoid_pair_loss(torch.zeros(1), beta=0.1).item(), 4)
        0.6931
    """
    z = beta * margins
    return -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)


# --8<-- [end:sigmoid_pair_loss]


# --8<-- [start:robust_pair_loss]
def robust_pair_loss(margins: Tensor, beta: float, label_smoothing: float) -> Tensor:
    r"""逐对的鲁棒 DPO（robust DPO）损失：对标签噪声做无偏校正。

    $$\ell(\Delta) = \frac{-(1-\epsilon)\log\sigma(\beta\Delta) + \epsilon\log\sigma(-\beta\Delta)}{1-2\epsilon},
    \qquad -\frac{\partial\ell}{\partial\Delta} = \beta\,\Big[\sigma(-\beta\Delta) + \frac{\epsilon}{1-2\epsilon}\Big].$$

    Chowdhury et al. 2024（arXiv 2403.00409）；TRL 1.16.0 的 `loss_type="robust"`（公式与 v0.28 及以前相同）。若每个标签以概率 $\epsilon$
    被翻转，则 $(1-\epsilon)\,\ell(\Delta) + \epsilon\,\ell(-\Delta) = -\log\sigma(\beta\Delta)$：噪声数据上的期望损失等于干净数据上的 DPO 损失。
    它没有下界（$\Delta\to+\infty$ 时 $\ell\to-\infty$），梯度也从不为 0。

    Args:
        margins: 间隔 $\Delta$，形状 `(B,)`，浮点。
        beta: KL 系数 $\beta \ge 0$。
        label_smoothing: $\epsilon \in [0, 0.5)$，假设的标签翻转概率；0 时与 `sigmoid_pair_loss` 相同。

    Returns:
        逐对损失，形状 `(B,)`。
    """
    z = beta * margins
    eps = label_smoothing
    return (-(1 - eps) * F.logsigmoid(z) + eps * F.logsigmoid(-z)) / (1 - 2 * eps)


# --8<-- [end:robust_pair_loss]


# --8<-- [start:hinge_pair_loss]
def hinge_pair_loss(margins: Tensor, beta: float) -> Tensor:
    r"""逐对的 hinge 损失：$\ell(\Delta) = \max(0,\ 1 - \beta\Delta)$。

    源自 SLiC（Zhao et al. 2023, arXiv 2305.10425）的校准损失 $\max(0, \delta - \log\pi_\theta(y_w) + \log\pi_\theta(y_l))$
    （不用参考模型）；这里是 RSO（Liu et al. 2024, arXiv 2309.06657）的归一化版本 hinge-norm：对数概率换成相对参考模型的
    对数概率比，门槛 $\delta = 1/\beta$。即 TRL 1.16.0 的 `loss_type="hinge"`（公式与 v0.28 及以前相同）。$-\partial\ell/\partial\Delta = \beta\cdot\mathbb 1[\beta\Delta < 1]$：
    间隔达到 $1/\beta$ 后损失和梯度都恰为 0，不再推，但也不往回拉。

    Args:
        margins: 间隔 $\Delta$，形状 `(B,)`，浮点。
        beta: $\beta \ge 0$；$1/\beta$ 是间隔的门槛。

    Returns:
        逐对损失，形状 `(B,)`。
    """
    return F.relu(1 - beta * margins)


# --8<-- [end:hinge_pair_loss]


# --8<-- [start:ipo_pair_loss]
def ipo_pair_loss(margins: Tensor, beta: float) -> Tensor:
    r"""逐对的 IPO 损失（Azar et al. 2023, arXiv 2310.12036，式 (17)，论文的 $\tau$ 即 $\beta$）。

    $$\ell(\Delta) = \Big(\Delta - \frac{1}{2\beta}\Big)^2,
    \qquad -\frac{\partial\ell}{\partial\Delta} = \frac{1 - 2\beta\Delta}{\beta}.$$

    最小值在 $\Delta = 1/(2\beta)$：间隔不够时往上推，超过时往回拉。TRL `loss_type="ipo"` 的 $\Delta$ 是按长度归一化的，
    见 `dpo_loss` 的 `chosen_lengths`。

    Args:
        margins: 间隔 $\Delta$，形状 `(B,)`，浮点。
        beta: $\beta > 0$。

    Returns:
        逐对损失，形状 `(B,)`。
    """
    return (margins - 1 / (2 * beta)) ** 2


# --8<-- [end:ipo_pair_loss]


# --8<-- [start:dpo_pair_losses]
def dpo_pair_losses(
    margins: Tensor,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    simpo_gamma: float = 0.5,
) -> Tensor:
    r"""按 `loss_type` 把间隔 $\Delta$ 变成逐对损失（损失 = −目标）。

    `sigmoid`、`sigmoid_norm` 与 `simpo` 共用 `sigmoid_pair_loss`，区别只在 $\Delta$ 怎么算（见 `dpo_loss`）；
    `simpo` 还要先减去 $\gamma/\beta$（SimPO 的目标奖励间隔 $\gamma$ 对应的间隔），即 $-\log\sigma(\beta\Delta - \gamma)$
    （TRL `CPOTrainer.cpo_loss`）。“目标间隔”一词本书只用于 IPO 的 $1/(2\beta)$。

    Args:
        margins: 间隔 $\Delta$，形状 `(B,)`，浮点。
        beta: KL 系数 $\beta \ge 0$（`ipo`、`simpo` 要求 $> 0$）。
        loss_type: `DPO_LOSS_TYPES` 之一。
        label_smoothing: $\epsilon \in [0, 0.5)$；只有 `sigmoid`、`robust`、`simpo` 接受 $\epsilon > 0$。
        simpo_gamma: SimPO 的目标奖励间隔 $\gamma \ge 0$（TRL `CPOConfig.simpo_gamma`，默认 0.5），只用于 `simpo`。

    Returns:
        逐对损失，形状 `(B,)`。

    Raises:
        ValueError: 未知的 `loss_type`（信息里列出可选值）；`label_smoothing` 不在 $[0, 0.5)$ 内，
            或用在不接受它的 `loss_type` 上；`ipo`、`simpo` 的 `beta` 不大于 0；`simpo_gamma < 0`。
    """
    _check_loss_options(loss_type, beta, label_smoothing, simpo_gamma)
    if loss_type == "hinge":
        return hinge_pair_loss(margins, beta)
    if loss_type == "ipo":
        return ipo_pair_loss(margins, beta)
    if loss_type == "robust":
        return robust_pair_loss(margins, beta, label_smoothing)
    if loss_type == "simpo":
        margins = margins - simpo_gamma / beta
    return sigmoid_pair_loss(margins, beta, label_smoothing)  # sigmoid、sigmoid_norm、simpo


# --8<-- [end:dpo_pair_losses]


# --8<-- [start:normalize_by_length]
def normalize_by_length(scores: Tensor, lengths: Tensor) -> Tensor:
    r"""把整条回答的分数除以回答长度（token 数），长度先限幅为至少 1：空回答（长度 0）的分数是 0，不是 NaN。

    与 TRL 1.16.0 `DPOTrainer._compute_loss` 的 `ipo`、`sigmoid_norm` 相同（`clamp(min=1)`）。
    TRL v0.28 及以前在 `concatenated_forward` 里直接除以 `loss_mask.sum(-1)`；提示词占满 `max_length`、回答被整段截掉时
    掩码全 0，得到 0/0 = NaN（TRL issue #1033）。这样的偏好对在这里分数为 0、没有梯度，但 IPO 的损失仍计入常数 $1/(4\beta^2)$。

    Args:
        scores: 形状 `(B,)`，浮点，例如对数概率比 $\log\pi_\theta(y) - \log\pi_{ref}(y)$。
        lengths: 回答长度（掩码之和），形状 `(B,)`，整数或浮点，$\ge 0$。

    Returns:
        $s / \max(\lvert y\rvert, 1)$，形状 `(B,)`，dtype 同 `scores`。
    """
    return scores / lengths.to(scores.dtype).clamp(min=1)


# --8<-- [end:normalize_by_length]


# --8<-- [start:dpo_loss]
def dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor | None,
    ref_rejected_logps: Tensor | None,
    beta: float = 0.1,
    *,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    chosen_lengths: Tensor | None = None,
    rejected_lengths: Tensor | None = None,
    simpo_gamma: float = 0.5,
) -> tuple[Tensor, dict[str, float]]:
    r"""DPO 家族的损失（默认是 sigmoid 损失 $-\log\sigma(\beta\Delta)$）及 TRL 记录的隐式奖励指标。

    $$\Delta = \Big[\log\pi_\theta(y_w) - \log\pi_{ref}(y_w)\Big] - \Big[\log\pi_\theta(y_l) - \log\pi_{ref}(y_l)\Big]$$

    默认即论文式 (7)；TRL 1.16.0 `DPOTrainer` 的 `loss_type="sigmoid"`（不含标签平滑）。其他 `loss_type`：
    `hinge`、`ipo`、`robust` 用同一个 $\Delta$（`ipo` 给了长度时先把两个对数概率比各自除以长度，同 TRL 1.16.0）；
    `sigmoid_norm` 是按长度归一化的 sigmoid 损失；`simpo` 不用参考模型，
    $\Delta = \log\pi_\theta(y_w)/\lvert y_w\rvert - \log\pi_\theta(y_l)/\lvert y_l\rvert$（SimPO，Meng et al. 2024, arXiv 2405.14734）。
    逐对损失见 `dpo_pair_losses`。

    Args:
        chosen_logps: 策略对被选回答 $y_w$（chosen）的序列对数概率，形状 `(B,)`，浮点，带梯度。
        rejected_logps: 策略对被拒回答 $y_l$（rejected）的序列对数概率，形状 `(B,)`。
        ref_chosen_logps: 参考模型对 $y_w$ 的序列对数概率，形状 `(B,)`，不带梯度；`simpo` 时必须是 `None`。
        ref_rejected_logps: 参考模型对 $y_l$ 的序列对数概率，形状 `(B,)`；`simpo` 时必须是 `None`。
        beta: KL 系数 $\beta \ge 0$（TRL `beta`，默认 0.1）；越小越允许偏离参考模型。
        loss_type: `DPO_LOSS_TYPES` 之一，默认 `"sigmoid"`。
        label_smoothing: 标签翻转概率 $\epsilon \in [0, 0.5)$（TRL `label_smoothing`，默认 0）；
            `sigmoid` 时即 cDPO（同 TRL v0.28 及以前；TRL 1.16.0 的 `sigmoid` 不读它），`robust` 时是鲁棒 DPO 的 $\epsilon$，
            `simpo` 时同 TRL `CPOTrainer`。
        chosen_lengths: $y_w$ 的长度（掩码之和），形状 `(B,)`，整数或浮点，$\ge 0$；限幅为至少 1 后使用。
            `sigmoid_norm`、`simpo` 必须给，`ipo` 可选（不给就是论文的整条回答 IPO），其他类型不接受。
        rejected_lengths: $y_l$ 的长度，同上；与 `chosen_lengths` 同时给或同时不给。
        simpo_gamma: SimPO 的目标奖励间隔 $\gamma \ge 0$（TRL `CPOConfig.simpo_gamma`，默认 0.5），只用于 `simpo`。

    Returns:
        `(loss, metrics)`：批平均的标量损失；`metrics` 与 TRL 同名同义，对所有 `loss_type` 都是
        `rewards/chosen` $=\overline{\beta(\log\pi_\theta(y_w)-\log\pi_{ref}(y_w))}$（不按长度归一化）、`rewards/rejected`、
        `rewards/margins`（两者之差的平均）、`rewards/accuracies`（严格大于的比例，第 0 步为 0.0）；
        `simpo` 没有参考模型，奖励是 $\beta\log\pi_\theta(y)/\lvert y\rvert$（同 TRL `CPOTrainer`）。

    Raises:
        ValueError: 输入不是同形状的一维张量、含非有限值、参考模型的对数概率带梯度，或 `beta < 0`；未知的 `loss_type`（信息里列出可选值）；
            选项不相容：`label_smoothing` 不在 $[0, 0.5)$ 内或用在 `hinge`、`ipo`、`sigmoid_norm` 上，
            `ipo`、`simpo` 的 `beta` 不大于 0，`simpo` 给了参考模型或其他类型缺参考模型，
            `sigmoid_norm`、`simpo` 缺长度或其他不归一化的类型给了长度，长度为负。

    Examples:
        >>> import torch
        >>> z = torch.zeros(2)
        >>> loss, m = dpo_loss(z, z, z, z, beta=0.1)
        >>> round(loss.item(), 4), m["rewards/accuracies"]
        (0.6931, 0.0)
        >>> round(dpo_loss(z, z, z, z, beta=0.1, loss_type="ipo")[0].item(), 2)  # (0 − 1/(2β))²
        25.0
    """
    _check_dpo_inputs(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)
    _check_loss_options(loss_type, beta, label_smoothing, simpo_gamma)
    _check_reference_and_lengths(
        loss_type, chosen_logps, ref_chosen_logps, ref_rejected_logps, chosen_lengths, rejected_lengths
    )
    if loss_type == "simpo":  # 无参考模型：分数是逐 token 平均的对数概率
        chosen_scores = normalize_by_length(chosen_logps, chosen_lengths)
        rejected_scores = normalize_by_length(rejected_logps, rejected_lengths)
        chosen_rewards, rejected_rewards = beta * chosen_scores.detach(), beta * rejected_scores.detach()
    else:  # 分数是对数概率比 log π_θ − log π_ref
        chosen_scores = chosen_logps - ref_chosen_logps
        rejected_scores = rejected_logps - ref_rejected_logps
        chosen_rewards, rejected_rewards = beta * chosen_scores.detach(), beta * rejected_scores.detach()
        if chosen_lengths is not None:  # ipo、sigmoid_norm：各自除以回答长度
            chosen_scores = normalize_by_length(chosen_scores, chosen_lengths)
            rejected_scores = normalize_by_length(rejected_scores, rejected_lengths)
    losses = dpo_pair_losses(chosen_scores - rejected_scores, beta, loss_type, label_smoothing, simpo_gamma)
    loss = losses.mean()
    metrics = {
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
    }
    return loss, metrics


# --8<-- [end:dpo_loss]
