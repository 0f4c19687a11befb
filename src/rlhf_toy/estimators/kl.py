r"""KL 散度的单样本估计量 k1、k2、k3（Schulman, *Approximating KL Divergence*, 2020）。

样本来自当前策略 $\pi_\theta$，估计的是反向 KL
$\mathrm{KL}(\pi_\theta\,\|\,\pi_{\mathrm{ref}})$。记
$d = \log\pi_{\mathrm{ref}}(y) - \log\pi_\theta(y)$（即 Schulman 的 $\log r$）：

* k1 = $-d$，无偏，方差大，约一半样本为负；
* k2 = $d^2/2$，有偏，方差小，恒非负；
* k3 = $e^{d} - d - 1$，无偏，方差小，恒非负（DeepSeekMath 式 (4)、verl `low_var_kl`；TRL `GRPOTrainer` 在
  `use_bias_correction_kl=False` 时所用）。

可选的限幅（clamp）与 verl、OpenRLHF 相同；`importance_corrected_k3` 是 DeepSeek-V3.2 的重要性采样修正
（TRL `use_bias_correction_kl=True`，TRL 1.16.0 的默认）。各估计量放进损失或奖励时的梯度见第 7 章与 `rlhf_toy.studies.kl_estimators`。
"""

# --8<-- [start:imports]
from __future__ import annotations

from torch import Tensor

from rlhf_toy._checks import check_choice, check_detached, check_finite, check_shape, check_tensor

# --8<-- [end:imports]

ESTIMATORS = ("k1", "k2", "k3")


def _check_clamp(name: str, value: float | None) -> None:
    if value is not None and not value > 0:  # also rejects NaN
        raise ValueError(f"{name} 应为正数或 None（不限幅），实际是 {value}")


# --8<-- [start:kl]
def kl_estimate(
    logps: Tensor,
    ref_logps: Tensor,
    estimator: str = "k3",
    *,
    log_ratio_clamp: float | None = None,
    value_clamp: float | None = None,
) -> Tensor:
    r"""逐 token 的 KL 估计（KL estimator），形状与输入相同。

    Args:
        logps: 当前策略对采样 token 的对数概率 $\log\pi_\theta(y_t)$，形状 `(B, T)`，浮点。
        ref_logps: 参考模型（reference model）对同一批 token 的对数概率，形状 `(B, T)`。
        estimator: `"k1"`、`"k2"` 或 `"k3"`（默认，与 DeepSeekMath、verl `low_var_kl` 及关掉
            `use_bias_correction_kl` 的 TRL GRPO 相同，但默认不限幅）。
        log_ratio_clamp: 先把 $d = \log\pi_{\mathrm{ref}} - \log\pi_\theta$ 限幅到 $[-c, c]$（verl `low_var_kl`
            用 $c = 20$）；`None`（默认）不限幅。
        value_clamp: 最后把估计值限幅到 $[-c, c]$（verl `low_var_kl` 与 OpenRLHF `compute_approx_kl`
            用 $c = 10$）；`None`（默认）不限幅。被限幅的位置梯度为 0。

    Returns:
        形状 `(B, T)` 的逐 token 估计值，单位是 nat。梯度经过 `logps`；填充位置由调用方用 mask 去掉。

    Raises:
        ValueError: 形状不一致、含 NaN / ±inf（函数不知道哪里是填充，填充处请填有限值），
            `estimator` 不在 `("k1", "k2", "k3")` 中，或限幅阈值不是正数。

    Examples:
        >>> import torch
        >>> kl_estimate(torch.tensor([[-1.0]]), torch.tensor([[-1.0]])).item()
        0.0
        >>> kl_estimate(torch.tensor([[-30.0]]), torch.tensor([[-1.0]]), log_ratio_clamp=20, value_clamp=10).item()
        10.0
    """
    check_tensor("logps", logps)
    check_shape("ref_logps", ref_logps, logps.shape, like="logps")
    check_finite("logps", logps)  # 这里没有掩码：填充位置也请填有限值
    check_finite("ref_logps", ref_logps)
    check_choice("estimator", estimator, ESTIMATORS)
    _check_clamp("log_ratio_clamp", log_ratio_clamp)
    _check_clamp("value_clamp", value_clamp)
    d = ref_logps - logps  # log r = log π_ref − log π_θ
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    if estimator == "k1":
        kl = -d
    elif estimator == "k2":
        kl = 0.5 * d**2
    else:
        kl = d.exp() - d - 1
    if value_clamp is not None:
        kl = kl.clamp(-value_clamp, value_clamp)
    return kl


# --8<-- [end:kl]


# --8<-- [start:importance_corrected_k3]
def importance_corrected_k3(logps: Tensor, ref_logps: Tensor, old_logps: Tensor | None = None) -> Tensor:
    r"""重要性采样修正的 k3：$w\,k_3$，$w = \exp(\log\pi_\theta - \log\pi_{old})$ 带梯度。

    DeepSeek-V3.2（arXiv 2512.02556）的“无偏 KL 估计”，即 TRL `GRPOConfig(use_bias_correction_kl=True)`
    （TRL 1.16.0 的默认；逐 token 的比率，即 `importance_sampling_level="token"`）：
    $T = 1$（或给定前缀、只看一个位置）时，样本来自 $\pi_{old}$ 则 $\mathbb E_{\pi_{old}}[w\,k_3] = \mathrm{KL}(\pi_\theta\,\|\,\pi_{\mathrm{ref}})$，
    而且把它放进损失，每个位置上（前缀固定）的期望梯度正是反向 KL 的梯度（未修正的 k3 给出的是正向 KL 的梯度）。
    $T > 1$ 时逐 token 求和的 $w\,k_3$ 只给出反向序列 KL 梯度的一部分（第 7 章“$T > 1$”一节）；
    异策略时前缀仍来自 $\pi_{old}$，逐 token 的 $w$ 不修正它，所以求和后连值也不再是序列反向 KL 的无偏估计。
    未修正的 k3 只在第 1 个位置上给出序列正向 KL 的梯度，后面的位置按 $\pi_\theta(\text{前缀})/\pi_{\mathrm{ref}}(\text{前缀})$
    重新加权（第 6 章）。
    同策略时 $w$ 的值为 1，数值与 [`kl_estimate`][rlhf_toy.estimators.kl.kl_estimate] 的 k3 相同，只有梯度不同。

    Args:
        logps: 当前策略的逐 token 对数概率，形状 `(B, T)`，浮点，带梯度。
        ref_logps: 参考模型的对数概率，形状 `(B, T)`。
        old_logps: 采样时旧策略的对数概率，形状 `(B, T)`，不带梯度；`None`（默认）取 `logps.detach()`，
            即同策略（TRL 每批只更新一次时的做法）。

    Returns:
        形状 `(B, T)` 的逐 token 值 $w\,k_3$，梯度经过 $w$ 与 $k_3$ 两处。

    Raises:
        ValueError: 形状不一致、含 NaN / ±inf，或 `old_logps` 带梯度。

    Examples:
        >>> import torch
        >>> logps = torch.tensor([[-2.0]], requires_grad=True)
        >>> importance_corrected_k3(logps, torch.tensor([[-1.0]])).item() == kl_estimate(logps, torch.tensor([[-1.0]])).item()
        True
    """
    check_tensor("logps", logps)
    check_shape("ref_logps", ref_logps, logps.shape, like="logps")
    if old_logps is None:
        old_logps = logps.detach()
    check_shape("old_logps", old_logps, logps.shape, like="logps")
    check_finite("old_logps", old_logps)
    check_detached("old_logps", old_logps, "w = exp(logps − old_logps) 对参数的梯度恰好抵消为 0")
    ratio = (logps - old_logps).exp()  # 值是 π_θ/π_old，同策略时恰为 1；梯度照常流过
    return ratio * kl_estimate(logps, ref_logps, "k3")


# --8<-- [end:importance_corrected_k3]
