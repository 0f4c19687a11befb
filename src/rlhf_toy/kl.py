r"""KL 散度的单样本估计量 k1、k2、k3（Schulman, *Approximating KL Divergence*, 2020）。

样本来自当前策略 $\pi_\theta$，估计的是反向 KL
$\mathrm{KL}(\pi_\theta\,\|\,\pi_{\mathrm{ref}})$。记
$d = \log\pi_{\mathrm{ref}}(y) - \log\pi_\theta(y)$（即 Schulman 的 $\log r$）：

* k1 = $-d$，无偏，方差大，约一半样本为负；
* k2 = $d^2/2$，有偏，方差小，恒非负；
* k3 = $e^{d} - d - 1$，无偏，方差小，恒非负（DeepSeekMath 式 (4)，TRL `GRPOTrainer` 所用）。
"""

# --8<-- [start:imports]
from __future__ import annotations

from torch import Tensor

from rlhf_toy._checks import check_choice, check_shape, check_tensor

# --8<-- [end:imports]

ESTIMATORS = ("k1", "k2", "k3")


# --8<-- [start:kl]
def kl_estimate(logps: Tensor, ref_logps: Tensor, estimator: str = "k3") -> Tensor:
    r"""逐 token 的 KL 估计（KL estimator），形状与输入相同。

    Args:
        logps: 当前策略对采样 token 的对数概率 $\log\pi_\theta(y_t)$，形状 `(B, T)`，浮点。
        ref_logps: 参考模型（reference model）对同一批 token 的对数概率，形状 `(B, T)`。
        estimator: `"k1"`、`"k2"` 或 `"k3"`（默认，与 TRL GRPO、verl `low_var_kl` 相同，但不截断）。

    Returns:
        形状 `(B, T)` 的逐 token 估计值，单位是 nat。梯度经过 `logps`；填充位置由调用方用 mask 去掉。

    Raises:
        ValueError: 形状不一致，或 `estimator` 不在 `("k1", "k2", "k3")` 中。

    Examples:
        >>> import torch
        >>> kl_estimate(torch.tensor([[-1.0]]), torch.tensor([[-1.0]])).item()
        0.0
    """
    check_tensor("logps", logps)
    check_shape("ref_logps", ref_logps, logps.shape, like="logps")
    check_choice("estimator", estimator, ESTIMATORS)
    d = ref_logps - logps  # log r = log π_ref − log π_θ
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d**2
    return d.exp() - d - 1


# --8<-- [end:kl]
