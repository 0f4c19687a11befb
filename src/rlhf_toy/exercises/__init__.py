r"""读者自己动手写的练习，以及会说出“错在哪里”的检查器。

每章有一两个“动手写”的函数：读者照参考实现的签名写一个自己的版本，交给 `check_<名字>`。检查器把一串输入
（随机的与边界的：组内奖励全相同、整行掩码为 0、极端的 logits、填充……）分别交给读者的函数与本书的参考实现，
比较值（以及对输入的梯度），在第一处不符时停下，用中文说明是哪个输入、期望什么、得到什么，以及这种症状背后
通常是什么错误（来自各章的“常见错误”）；全部通过时说明检查了哪些情形。检查器返回 `CheckResult`
（`bool(result)` 即是否通过，`result.key` 是稳定的报告键），读者的函数出错时也不抛异常；`your_fn`
不可调用时抛 `ValueError`。

| 章 | 检查器 | 读者要写的函数 |
|---|---|---|
| 1 | `check_sequence_logps` | `sequence_logps(logps, mask)` |
| 2 | `check_rloo_advantages` | `rloo_advantages(rewards, num_generations)` |
| 3 | `check_bradley_terry_loss` | `bradley_terry_loss(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None)` |
| 4 | `check_ppo_policy_loss`、`check_gae_advantages` | `ppo_policy_loss(logps, old_logps, advantages, mask, epsilon=0.2)`、`gae_advantages(rewards, values, mask, gamma=1.0, lam=0.95)` |
| 5 | `check_dpo_loss` | `dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1)` |
| 5（续） | `check_ipo_loss` | `ipo_loss(..., beta=0.1, chosen_lengths=None, rejected_lengths=None)` |
| 6 | `check_group_advantages` | `group_advantages(rewards, num_generations, scale_rewards="group", eps=1e-4)` |
| 6（续） | `check_aggregate_loss` | `aggregate_loss(per_token_loss, mask, loss_type="grpo", max_completion_length=None)` |
| 6（续二） | `check_cispo_loss`、`check_sapo_gate` | `cispo_loss(logps, old_logps, advantages, mask, epsilon_high=5.0)`、`sapo_gate(ratio, advantages, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05)` |
| 7 | `check_kl_estimate` | `kl_estimate(logps, ref_logps, estimator="k3", *, log_ratio_clamp=None, value_clamp=None)` |
| 8 | `check_reverse_kl_optimum` | `reverse_kl_optimum(ref_logps, rewards, beta)` |
| 9 | `check_completion_mask` | `completion_mask(completions, eos_id)` |
| 10 | `check_addition_reward` | `addition_reward(completion_ids, a, b, **kwargs)`（TRL 的奖励函数） |
| 11 | `check_pass_at_k` | `pass_at_k(n, c, k)` |
| 12 | `check_importance_weights` | `importance_weights(logps, sampler_logps, mask, mode="sequence_mask", clip_max=3.0, clip_min=None)` |
| 13 | `check_chat_completion_mask`、`check_lora_trainable_parameters` | `chat_completion_mask(input_ids, header_ids, eos_id)`、`lora_trainable_parameters(shapes, r)` |
| 13（续） | `check_training_state_bytes`、`check_pass_rate_window` | `training_state_bytes(n_params, dtype_bytes=2, mixed_precision=True)`、`pass_rate_window(correct, n, low=0.2, high=0.8)` |

加一道新练习：新建一个模块，写出用例（`Case`）、常见错误（`Mistake`，每个带一份
有这个错误的实现）和 `Exercise`，用 `run_check` 写 `check_<名字>`，把它加进本模块的 `EXERCISES` 与 `__all__`；
`tests/test_exercises.py` 会要求参考实现通过、每个报告键都被一个错误实现触发，并要求章节页与 notebook 里有 `check_` 调用。

Examples:
    >>> from rlhf_toy.exercises import check_group_advantages
    >>> result = check_group_advantages(lambda rewards, num_generations, scale_rewards="group", eps=1e-4: rewards * 0,
    ...                                 verbose=False)
    >>> result.passed, result.key
    (False, 'value')
"""

from rlhf_toy.exercises import (
    comparison,
    dpo,
    dpo_variants,
    grpo,
    grpo_variants,
    kl,
    offpolicy,
    overview,
    policy_gradient,
    ppo,
    ratio_shaping,
    reasoning,
    reward_model,
    tiny_lm,
    trl,
    your_run,
    your_run_settings,
)
from rlhf_toy.exercises._core import CheckResult, Exercise
from rlhf_toy.exercises.comparison import check_reverse_kl_optimum
from rlhf_toy.exercises.dpo import check_dpo_loss
from rlhf_toy.exercises.dpo_variants import check_ipo_loss
from rlhf_toy.exercises.grpo import check_group_advantages
from rlhf_toy.exercises.grpo_variants import check_aggregate_loss
from rlhf_toy.exercises.kl import check_kl_estimate
from rlhf_toy.exercises.offpolicy import check_importance_weights
from rlhf_toy.exercises.overview import check_sequence_logps
from rlhf_toy.exercises.policy_gradient import check_rloo_advantages
from rlhf_toy.exercises.ppo import check_gae_advantages, check_ppo_policy_loss
from rlhf_toy.exercises.ratio_shaping import check_cispo_loss, check_sapo_gate
from rlhf_toy.exercises.reasoning import check_pass_at_k
from rlhf_toy.exercises.reward_model import check_bradley_terry_loss
from rlhf_toy.exercises.tiny_lm import check_completion_mask
from rlhf_toy.exercises.trl import check_addition_reward
from rlhf_toy.exercises.your_run import check_chat_completion_mask, check_lora_trainable_parameters
from rlhf_toy.exercises.your_run_settings import check_pass_rate_window, check_training_state_bytes

EXERCISES: dict[str, Exercise] = {
    e.name: e
    for e in (
        overview.EXERCISE,
        policy_gradient.EXERCISE,
        reward_model.EXERCISE,
        ppo.POLICY_EXERCISE,
        ppo.GAE_EXERCISE,
        dpo.EXERCISE,
        dpo_variants.EXERCISE,
        grpo.EXERCISE,
        grpo_variants.EXERCISE,
        ratio_shaping.CISPO_EXERCISE,
        ratio_shaping.GATE_EXERCISE,
        kl.EXERCISE,
        comparison.EXERCISE,
        tiny_lm.EXERCISE,
        trl.EXERCISE,
        reasoning.EXERCISE,
        offpolicy.EXERCISE,
        your_run.MASK_EXERCISE,
        your_run.COUNT_EXERCISE,
        your_run_settings.BYTES_EXERCISE,
        your_run_settings.WINDOW_EXERCISE,
    )
}
"""全部练习，键是函数名（`check_<键>` 是它的检查器）。"""

__all__ = [
    "EXERCISES",
    "CheckResult",
    "check_addition_reward",
    "check_aggregate_loss",
    "check_bradley_terry_loss",
    "check_chat_completion_mask",
    "check_cispo_loss",
    "check_completion_mask",
    "check_dpo_loss",
    "check_gae_advantages",
    "check_group_advantages",
    "check_importance_weights",
    "check_ipo_loss",
    "check_kl_estimate",
    "check_lora_trainable_parameters",
    "check_pass_at_k",
    "check_pass_rate_window",
    "check_ppo_policy_loss",
    "check_reverse_kl_optimum",
    "check_rloo_advantages",
    "check_sapo_gate",
    "check_sequence_logps",
    "check_training_state_bytes",
]
