r"""推理型任务：带草稿（scratchpad）的两位数加法，`"47+88="` → `"15.13=135"`。

第 9 章的加法任务（同一个词表、同一批题目、同一个留出集），只是回答可以先写一段**草稿**再写答案：

* 草稿从个位写起，每一位写两个数字 $s_i = a_i + b_i + c_i$（两个操作数在这一位的数字加上进位，`00`–`19`），
  位与位之间用 `.` 隔开；然后写 `=`，再写答案和 EOS。`47+88=` 的完整回答是 `15.13=135<eos>`：
  个位 $7+8=15$（写 5 进 1），十位 $4+8+1=13$，答案就是 `13` 接上 `5`。
* 也可以不写草稿，直接写 `=135<eos>`（第 9 章的做法多一个 `=`）。第一个 token 是数字还是 `=`，就是“想不想写草稿”。
* **答案奖励**（accuracy reward）只看最后一个 `=` 之后、EOS 之前的文字是不是正确的和，不看草稿；
  **格式奖励**（format reward）只看形状：草稿为空或恰好 `n_digits` 步、每步两位数字，然后 `=`、不带前导零的数字与 EOS。
  两者都不检查草稿算得对不对，这正是格式奖励可以被投机的地方（见 `format_reward`）。
"""

# --8<-- [start:imports]
from __future__ import annotations

import re

import torch
from torch import Tensor

from rlhf_toy._checks import check_ndim
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.estimators.overlong import soft_overlong_punishment
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.policies.transformer import TinyTransformerPolicy, completion_mask
from rlhf_toy.tasks.addition import EOS, PAD, AdditionTask, decode, encode

# --8<-- [end:imports]


# --8<-- [start:scratchpad_text]
def scratchpad(a: int, b: int, n_digits: int = 2) -> str:
    r"""`a + b` 的草稿：从个位起每位两个数字（本位之和加进位），用 `.` 隔开。

    Args:
        a: 第一个操作数，$0 \le a < 10^{n}$。
        b: 第二个操作数，$0 \le b < 10^{n}$。
        n_digits: 位数 $n$（草稿的步数）。

    Returns:
        草稿字符串。

    Raises:
        ValueError: 操作数为负或超过 `n_digits` 位。

    Examples:
        >>> scratchpad(47, 88), scratchpad(7, 58), scratchpad(0, 0)
        ('15.13', '15.06', '00.00')
    """
    if not (0 <= a < 10**n_digits and 0 <= b < 10**n_digits):
        raise ValueError(f"a、b 应在 [0, {10**n_digits}) 内，实际是 {a}、{b}")
    steps, carry = [], 0
    for i in range(n_digits):
        s = (a // 10**i) % 10 + (b // 10**i) % 10 + carry
        steps.append(f"{s:02d}")
        carry = s // 10
    return ".".join(steps)


def completion_text(a: int, b: int, with_scratchpad: bool = True, n_digits: int = 2) -> str:
    """标准回答（不含 EOS）：`"15.13=135"`，或不写草稿的 `"=135"`。

    Examples:
        >>> completion_text(47, 88), completion_text(47, 88, with_scratchpad=False)
        ('15.13=135', '=135')
    """
    return (scratchpad(a, b, n_digits) if with_scratchpad else "") + f"={a + b}"


# --8<-- [end:scratchpad_text]


def to_completions(texts: list[str], width: int | None = None) -> Tensor:
    """把回答文字编码成右填充的 token 张量；结尾的 `|` 表示 EOS（与 `decode(..., stop_at_eos=False)` 对称）。

    Args:
        texts: 回答文字，例如 `"15.13=135|"`。
        width: 张量宽度；`None` 表示最长那条的长度。

    Returns:
        形状 `(B, width)` 的 int64 张量。

    Examples:
        >>> to_completions(["=7|", "15"])
        tensor([[14, 10,  2],
                [ 4,  8,  0]])
    """
    rows = [encode(t[:-1]) + [EOS] if t.endswith("|") else encode(t) for t in texts]
    width = max(len(r) for r in rows) if width is None else width
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


# --8<-- [start:rewards]
def parse_completion(row: list[int] | Tensor) -> tuple[str, str | None, bool]:
    """把一条回答拆成 `(草稿, 答案, 是否写了 EOS)`：答案是最后一个 `=` 之后的文字，没有 `=` 时为 `None`。

    Examples:
        >>> parse_completion(encode("15.13=135") + [EOS])
        ('15.13', '135', True)
        >>> parse_completion(encode("1513"))
        ('1513', None, False)
    """
    ids = row.tolist() if isinstance(row, Tensor) else list(row)
    text = decode(ids)
    scratch, sep, answer = text.rpartition("=")
    return (scratch, answer, EOS in ids) if sep else (text, None, EOS in ids)


def accuracy_reward(answers: list[int], completions: Tensor) -> Tensor:
    r"""答案奖励（验证器）：最后一个 `=` 之后恰好是正确的和、并以 EOS 结束时为 1.0，否则为 0.0；不看草稿。

    $r_{\text{acc}}(x, y) = \mathbb 1[\text{answer}(y) = a + b \ \wedge\ \text{EOS} \in y]$。

    Args:
        answers: 每行的正确的和，长 `B`。
        completions: 回答 token，形状 `(B, T)`，EOS 之后是填充。

    Returns:
        形状 `(B,)` 的浮点奖励。

    Raises:
        ValueError: `completions` 不是二维，或行数与 `answers` 不同。

    Examples:
        >>> c = to_completions(["15.13=135|", "99.99=135|", "=135"])
        >>> accuracy_reward([135, 135, 135], c)
        tensor([1., 1., 0.])
    """
    check_ndim("completions", completions, 2, "(B, T)")
    if len(answers) != completions.shape[0]:
        raise ValueError(
            f"completions 的形状是 {tuple(completions.shape)}，期望第 0 维为 {len(answers)}（与 answers 相同）"
        )
    out = []
    for answer, row in zip(answers, completions, strict=True):
        _, given, ended = parse_completion(row)
        out.append(float(ended and given == str(answer)))
    return torch.tensor(out)


def format_reward(completions: Tensor, n_digits: int = 2) -> Tensor:
    r"""格式奖励：回答形如“空草稿或恰好 `n_digits` 步两位数字（`.` 隔开）、`=`、不带前导零的数字、EOS”时为 1.0。

    只检查形状，不检查草稿或答案算得对不对：`00.00=0<eos>` 对任何题都得 1 分。这就是格式奖励的投机风险：
    只要格式奖励在总奖励里占了分量，一个什么都不会算、只会写对格式的模型也能拿到它。

    Args:
        completions: 回答 token，形状 `(B, T)`。
        n_digits: 草稿的步数。

    Returns:
        形状 `(B,)` 的浮点奖励。

    Raises:
        ValueError: `completions` 不是二维。

    Examples:
        >>> format_reward(to_completions(["15.13=135|", "00.00=0|", "15=135|", "=135|", "=0135|"]))
        tensor([1., 1., 0., 1., 0.])
    """
    check_ndim("completions", completions, 2, "(B, T)")
    pattern = re.compile(r"(\d\d(\.\d\d){" + str(n_digits - 1) + r"})?=(0|[1-9]\d*)")
    out = []
    for row in completions.tolist():
        out.append(float(EOS in row and pattern.fullmatch(decode(row)) is not None))
    return torch.tensor(out)


# --8<-- [end:rewards]


# --8<-- [start:scratchpad_task]
class ScratchpadAdditionTask(AdditionTask):
    r"""带草稿的加法任务：题目、划分与抽题同 `AdditionTask`，回答格式、奖励与 SFT 数据不同。

    训练用的奖励是 $r = r_{\text{acc}} + w_{\text{fmt}}\, r_{\text{fmt}} + R_{\text{length}}$：
    答案奖励、乘以 `format_weight` 的格式奖励，以及（给了 `overlong` 时）DAPO 的软超长惩罚
    （[`soft_overlong_punishment`][rlhf_toy.estimators.overlong.soft_overlong_punishment]，长度是掩码内 token 数，含 EOS）。

    Args:
        n_digits: 每个操作数最多几位（1–3），也是完整草稿的步数。
        batch_size: 每步的训练提示词数。
        n_heldout: 留出集题数。
        seed: 随机种子（任务自带的 `torch.Generator`）。
        balanced: 按题型均衡地抽训练题（见 `AdditionTask`）。
        p_scratchpad: SFT 数据里带草稿的回答所占比例（其余直接写 `=答案`）。
        content: SFT 数据的内容：`"correct"` 是正确的草稿与答案；`"random"` 是格式正确、数字随机的草稿与答案
            （只教格式，R1-Zero 式起点用）。
        format_weight: 训练奖励里格式奖励的权重 $w_{\text{fmt}}$。
        overlong: `None`，或 `(max_completion_len, soft_punish_cache)`，见 `soft_overlong_punishment`。
        max_completion_length: 回答最多几个 token；`None` 表示完整草稿加最长答案加 EOS 再多留 2 个。

    Raises:
        ValueError: 参数超出范围。
    """

    def __init__(
        self,
        n_digits: int = 2,
        batch_size: int = 32,
        n_heldout: int = 500,
        seed: int = 0,
        balanced: bool = True,
        p_scratchpad: float = 1.0,
        content: str = "correct",
        format_weight: float = 0.0,
        overlong: tuple[int, int] | None = None,
        max_completion_length: int | None = None,
    ):
        full = 3 * n_digits - 1 + 1 + (n_digits + 1) + 1  # 草稿、=、最长答案、EOS
        length = full + 2 if max_completion_length is None else max_completion_length
        super().__init__(n_digits, batch_size, n_heldout, 0, length, seed, 0.0, balanced)
        if not 0.0 <= p_scratchpad <= 1.0:
            raise ValueError(f"p_scratchpad 应在 [0, 1] 内，实际是 {p_scratchpad}")
        if content not in ("correct", "random"):
            raise ValueError(f"content 应是 'correct' 或 'random'，实际是 {content!r}")
        if format_weight < 0:
            raise ValueError(f"format_weight 应 ≥ 0，实际是 {format_weight}")
        if length < full:
            raise ValueError(f"max_completion_length={length} 放不下完整草稿、答案与 EOS（{full}）")
        self.p_scratchpad, self.content, self.format_weight, self.overlong = (
            p_scratchpad,
            content,
            format_weight,
            overlong,
        )
        if overlong is not None:  # 提前检查参数（soft_overlong_punishment 会报错）
            soft_overlong_punishment(torch.zeros(1), *overlong)

    # --8<-- [end:scratchpad_task]

    def sft_batch(self, batch_size: int) -> tuple[Tensor, Tensor, Tensor]:
        """SFT 的一批：按 `p_scratchpad` 决定带不带草稿，按 `content` 决定内容正确还是随机。

        Args:
            batch_size: 题数。

        Returns:
            `(prompts, completions, mask)`：`(B, Lp)`、`(B, max_completion_length)`、`(B, max_completion_length)`。
        """
        problems = self.draw(batch_size)
        g, n = self.generator, self.n_digits
        use = (torch.rand(batch_size, generator=g) < self.p_scratchpad).tolist()
        rows = []
        for (a, b), with_scratch in zip(problems.tolist(), use, strict=True):
            if self.content == "correct":
                text = completion_text(a, b, with_scratch, n)
            else:  # 只有格式：每步是随机的 00–19，答案是和的取值范围内的随机数
                steps = torch.randint(20, (n,), generator=g).tolist()
                answer = int(torch.randint(2 * 10**n - 1, (1,), generator=g))
                text = (".".join(f"{s:02d}" for s in steps) if with_scratch else "") + f"={answer}"
            rows.append(encode(text) + [EOS])
        width = self.max_completion_length
        completions = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
        return self.encode_prompts(problems), completions, (completions != PAD).float()

    # --8<-- [start:reward]
    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        r"""训练奖励 $r_{\text{acc}} + w_{\text{fmt}} r_{\text{fmt}} + R_{\text{length}}$，形状 `(B,)`。

        Args:
            prompts: 提示词，形状 `(B, Lp)`。
            completions: 回答，形状 `(B, T)`。

        Returns:
            形状 `(B,)` 的浮点奖励。

        Raises:
            ValueError: 形状不符。
        """
        rewards = accuracy_reward(self.answers(prompts), completions)
        if self.format_weight:
            rewards = rewards + self.format_weight * format_reward(completions, self.n_digits)
        if self.overlong is not None:
            lengths = completion_mask(completions, EOS).sum(1)
            rewards = rewards + soft_overlong_punishment(lengths, *self.overlong)
        return rewards

    # --8<-- [end:reward]

    # --8<-- [start:evaluate]
    @torch.no_grad()
    def evaluate(
        self, policy: TinyTransformerPolicy, ref_policy: TinyTransformerPolicy | None = None
    ) -> dict[str, float]:
        """在留出集上评估：贪心正确率；按温度采样一遍，统计长度、写草稿的比例、草稿算对的比例与格式正确率。

        Args:
            policy: 要评估的策略。
            ref_policy: 参考模型；给了时另算 `kl`（逐 token $k_3$ 在掩码内平均）。

        Returns:
            `accuracy`（贪心）、`accuracy_sampled`（采样）、`accuracy_with_scratchpad` / `accuracy_without_scratchpad`
            （采样回答里写了 / 没写草稿的那些的正确率，没有时为 NaN）、`completion_length`（采样回答的平均 token 数，含 EOS）、
            `scratchpad_rate`（采样回答里写了草稿的比例）、`scratchpad_correct`（写了草稿的回答里草稿完全算对的比例，
            没有时为 NaN）、`format`（格式正确率）、`entropy`（逐 token 熵在掩码内的平均），有 `ref_policy` 时另有 `kl`。
        """
        prompts = self.heldout_prompts()
        answers = self.answers(prompts)
        greedy, _, _ = policy.generate(prompts, greedy=True)
        completions, mask, _ = policy.generate(prompts)
        logps, entropies = policy.logps_and_entropies(prompts, completions)
        parsed = [parse_completion(row)[0] for row in completions]
        truth = [scratchpad(a, b, self.n_digits) for a, b in self.heldout.tolist()]
        wrote = torch.tensor([s != "" for s in parsed])
        right = torch.tensor([s == t for s, t in zip(parsed, truth, strict=True)])
        correct = accuracy_reward(answers, completions)
        nan = float("nan")
        out = {
            "accuracy": accuracy_reward(answers, greedy).mean().item(),
            "accuracy_sampled": correct.mean().item(),
            "accuracy_with_scratchpad": correct[wrote].mean().item() if wrote.any() else nan,
            "accuracy_without_scratchpad": correct[~wrote].mean().item() if (~wrote).any() else nan,
            "completion_length": mask.sum(1).mean().item(),
            "scratchpad_rate": wrote.float().mean().item(),
            "scratchpad_correct": right[wrote].float().mean().item() if wrote.any() else nan,
            "format": format_reward(completions, self.n_digits).mean().item(),
            "entropy": masked_mean(entropies, mask).item(),
        }
        if ref_policy is not None:
            out["kl"] = masked_mean(kl_estimate(logps, ref_policy.logps(prompts, completions), "k3"), mask).item()
        return out


# --8<-- [end:evaluate]
