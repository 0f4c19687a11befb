r"""可验证的序列任务：两位数加法 `"23+58="` → `"81"`，由包自己生成，不需要下载。

* 词表是字符级的：`<pad>`、`<bos>`、`<eos>`、数字 `0`–`9`、`+`、`=`，以及可选的草稿符号 `.`。
* 提示词是 `<bos>` 加上算式，例如 `<bos>7+58=`；操作数不写前导零，所以提示词长短不一（左填充）。
* 回答是和的十进制数字加 `<eos>`，例如 `65<eos>`。可验证奖励（verifiable reward）：回答恰好是正确的和、
  并以 EOS 结束时得 1，否则得 0。
* 可选的草稿区（`scratch > 0`）：回答可以先写任意个 `.` 再写答案（`..65<eos>`），奖励只看 `.` 之后的部分。
  它给回答长度留出变化的空间，用来演示长度归一化带来的长度偏差。
* 全部 $10^{n}\times 10^{n}$ 道题用固定种子打乱，前 `n_heldout` 道作留出集，只用于评估；训练提示词从其余题目里抽（可以按题型均衡地抽，见 `balanced`）。
"""

# --8<-- [start:imports]
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import Tensor

from rlhf_toy._checks import check_ndim
from rlhf_toy.estimators.kl import kl_estimate
from rlhf_toy.losses.aggregate import masked_mean
from rlhf_toy.policies.transformer import TinyTransformerPolicy

# --8<-- [end:imports]

VOCAB = ("<pad>", "<bos>", "<eos>", *"0123456789", "+", "=", ".")
PAD, BOS, EOS = 0, 1, 2
SCRATCH = VOCAB.index(".")
_ID = {s: i for i, s in enumerate(VOCAB)}


# --8<-- [start:tokenizer]
def encode(text: str) -> list[int]:
    """把字符串编码成 token 编号（每个字符一个 token）；不加 BOS / EOS。

    Args:
        text: 只含数字、`+`、`=`、`.` 的字符串。

    Returns:
        token 编号列表。

    Raises:
        ValueError: 含词表以外的字符。

    Examples:
        >>> encode("23+58=")
        [5, 6, 13, 8, 11, 14]
    """
    bad = sorted({c for c in text if c not in _ID})
    if bad:
        raise ValueError(f"text 含词表以外的字符 {bad}；词表：{''.join(VOCAB[3:])}")
    return [_ID[c] for c in text]


def decode(ids: list[int] | Tensor, stop_at_eos: bool = True) -> str:
    """把 token 编号解码成字符串：去掉 PAD 与 BOS；EOS 写成 `|`，默认在第一个 EOS 处停止（不含 EOS）。

    Args:
        ids: token 编号（列表或一维张量）。
        stop_at_eos: 是否在第一个 EOS 处停止。

    Returns:
        字符串。

    Examples:
        >>> decode([1, 5, 6, 13, 8, 11, 14])
        '23+58='
        >>> decode([10, 3, 2, 0]), decode([10, 3, 2, 0], stop_at_eos=False)
        ('70', '70|')
    """
    out = []
    for i in ids.tolist() if isinstance(ids, Tensor) else ids:
        if i == EOS:
            if stop_at_eos:
                break
            out.append("|")
        elif i not in (PAD, BOS):
            out.append(VOCAB[i])
    return "".join(out)


# --8<-- [end:tokenizer]


def shapes(problems: Tensor) -> list[str]:
    """每道题的题型（shape）：两个操作数各有几位，例如 `(7, 58)` 是 `"1+2"`。

    Args:
        problems: 形状 `(P, 2)` 的非负整数张量，每行是 `(a, b)`。

    Returns:
        长 `P` 的字符串列表。

    Raises:
        ValueError: `problems` 不是二维张量。

    Examples:
        >>> shapes(torch.tensor([[7, 58], [23, 5], [40, 11]]))
        ['1+2', '2+1', '2+2']
    """
    check_ndim("problems", problems, 2, "(P, 2)")
    return [f"{len(str(a))}+{len(str(b))}" for a, b in problems.tolist()]


def _pad_rows(rows: list[list[int]], left: bool) -> Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([[PAD] * (width - len(r)) + r if left else r + [PAD] * (width - len(r)) for r in rows])


# --8<-- [start:addition_task]
class AdditionTask:
    """两位数（或 `n_digits` 位数）加法任务：数据、分词、可验证奖励、留出集评估。

    Args:
        n_digits: 每个操作数最多几位（1–3）。
        batch_size: 每次 `prompts()` 抽多少个训练提示词（TRL 里是每步的提示词数）。
        n_heldout: 留出集的题数（只评估，不训练）。
        scratch: 草稿区最多几个 `.`（0 表示没有草稿区）；SFT 数据里草稿长度在 `0..scratch` 均匀抽取。
        max_completion_length: 回答最多几个 token（含 EOS）；`None` 表示刚好放得下最长答案、草稿与 EOS。
        seed: 打乱题目与抽提示词用的随机种子（任务自带 `torch.Generator`，不影响全局随机数）。
        ramble: SFT 数据里有这个比例的回答只写 `.`、一直写到最大长度（没有答案，也没有 EOS）：
            模拟“想个没完”的坏习惯。这样的回答总是错的，又总是最长的（长度一课用）。0 表示没有；需要 `scratch > 0`。
        balanced: `True` 时训练题（SFT 与强化学习的提示词）按题型（见 `shapes`）均衡地抽，每种题型被抽到的概率相同：
            两位数加法的 `"1+1"`、`"1+2"`、`"2+1"`、`"2+2"` 各占四分之一（题数少的题型，每道题被抽到得更频繁）。`False` 时在全部训练题里均匀抽，
            两位数加法里两个操作数都是两位数的题占八成以上。
            留出集不受影响，总是全部题目的均匀样本。

    Raises:
        ValueError: 参数超出范围，或 `max_completion_length` 放不下最长的答案加 EOS。
    """

    def __init__(
        self,
        n_digits: int = 2,
        batch_size: int = 32,
        n_heldout: int = 500,
        scratch: int = 0,
        max_completion_length: int | None = None,
        seed: int = 0,
        ramble: float = 0.0,
        balanced: bool = False,
    ):
        if n_digits not in (1, 2, 3):
            raise ValueError(f"n_digits 应是 1、2 或 3，实际是 {n_digits}")
        n_problems = 10 ** (2 * n_digits)
        if not 0 < n_heldout < n_problems:
            raise ValueError(f"n_heldout 应在 1 到 {n_problems - 1} 之间，实际是 {n_heldout}")
        if batch_size < 1 or scratch < 0:
            raise ValueError(f"需要 batch_size ≥ 1、scratch ≥ 0，实际是 {batch_size}、{scratch}")
        if not 0 <= ramble < 1 or (ramble > 0 and scratch == 0):
            raise ValueError(
                f"ramble 应在 [0, 1) 内，且 ramble > 0 时需要 scratch > 0；实际是 ramble={ramble}、scratch={scratch}"
            )
        answer_len = n_digits + 2  # 最长的和有 n_digits + 1 位，再加 EOS
        self.max_completion_length = answer_len + scratch if max_completion_length is None else max_completion_length
        if self.max_completion_length < answer_len:
            raise ValueError(f"max_completion_length={self.max_completion_length} 放不下最长答案加 EOS（{answer_len}）")
        self.n_digits, self.batch_size, self.scratch, self.ramble = n_digits, batch_size, scratch, ramble
        self.max_prompt_length = 2 * n_digits + 3  # <bos> a + b =
        self.generator = torch.Generator().manual_seed(seed)
        order = torch.randperm(n_problems, generator=self.generator)
        base = 10**n_digits
        self.problems = torch.stack([order // base, order % base], dim=1)  # (n_problems, 2)：a, b
        self.heldout, self.train = self.problems[:n_heldout], self.problems[n_heldout:]
        self.balanced = balanced
        if balanced:  # 每种题型被抽到的总概率相同：一道题的权重是 1 / 同题型的题数
            labels = shapes(self.train)
            count = Counter(labels)
            self._weights = torch.tensor([1.0 / count[s] for s in labels])

    # --8<-- [end:addition_task]

    def make_policy(self, **kwargs: Any) -> TinyTransformerPolicy:
        """按本任务的词表与长度建一个 `TinyTransformerPolicy`（其余参数原样传入）。

        Args:
            **kwargs: `d_model`、`n_layers`、`n_heads`、`temperature` 等。

        Returns:
            新的随机初始化策略（消耗全局随机数生成器）。
        """
        return TinyTransformerPolicy(
            len(VOCAB),
            PAD,
            EOS,
            max_prompt_length=self.max_prompt_length,
            max_completion_length=self.max_completion_length,
            **kwargs,
        )

    # --8<-- [start:data]
    def encode_prompts(self, problems: Tensor) -> Tensor:
        """把 `(a, b)` 编码成左填充的提示词 `<bos>a+b=`。

        Args:
            problems: 形状 `(P, 2)` 的整数张量。

        Returns:
            形状 `(P, max_prompt_length)` 的提示词 token（左填充）。
        """
        check_ndim("problems", problems, 2, "(P, 2)")
        rows = [[BOS, *encode(f"{a}+{b}=")] for a, b in problems.tolist()]
        rows.append([PAD] * self.max_prompt_length)  # 统一宽度
        return _pad_rows(rows, left=True)[:-1]

    def draw(self, n: int) -> Tensor:
        """从训练集里有放回地抽 `n` 道题；`balanced=True` 时按题型加权（见 `balanced`）。

        用任务自带的随机数生成器 `self.generator`（会推进它的状态，不影响全局随机数）；
        `prompts()`、`sft_batch()` 与第 9 章造 DPO 偏好对都通过它抽题。

        Args:
            n: 题数。

        Returns:
            形状 `(n, 2)` 的 int64 张量，每行是 `(a, b)`。
        """
        if self.balanced:
            idx = torch.multinomial(self._weights, n, replacement=True, generator=self.generator)
        else:
            idx = torch.randint(len(self.train), (n,), generator=self.generator)
        return self.train[idx]

    def prompts(self) -> Tensor:
        """从训练集里（有放回地）抽 `batch_size` 道题，返回提示词 `(batch_size, max_prompt_length)`。"""
        return self.encode_prompts(self.draw(self.batch_size))

    def heldout_prompts(self) -> Tensor:
        """留出集的全部提示词，形状 `(n_heldout, max_prompt_length)`。"""
        return self.encode_prompts(self.heldout)

    def answers(self, prompts: Tensor) -> list[int]:
        """从提示词 token 解析出正确的和。

        Args:
            prompts: 形状 `(B, Lp)` 的提示词，左填充或右填充。

        Returns:
            长 `B` 的整数列表。
        """
        check_ndim("prompts", prompts, 2, "(B, Lp)")
        return [sum(int(x) for x in decode(row).rstrip("=").split("+")) for row in prompts]

    def sft_batch(self, batch_size: int) -> tuple[Tensor, Tensor, Tensor]:
        """监督微调（SFT）的一批：训练集里随机抽题，回答是正确答案（有草稿区时先写随机个 `.`）。

        Args:
            batch_size: 题数。

        Returns:
            `(prompts, completions, mask)`：`(B, Lp)`、`(B, max_completion_length)`、`(B, max_completion_length)`。
        """
        problems = self.draw(batch_size)
        dots = torch.randint(self.scratch + 1, (batch_size,), generator=self.generator).tolist()
        rows = [[SCRATCH] * k + encode(str(a + b)) + [EOS] for (a, b), k in zip(problems.tolist(), dots, strict=True)]
        if self.ramble > 0:  # 一部分回答只写 `.`，写满最大长度
            rambling = (torch.rand(batch_size, generator=self.generator) < self.ramble).tolist()
            rows = [[SCRATCH] * self.max_completion_length if r else row for row, r in zip(rows, rambling, strict=True)]
        rows.append([PAD] * self.max_completion_length)
        completions = _pad_rows(rows, left=False)[:-1, : self.max_completion_length]
        return self.encode_prompts(problems), completions, (completions != PAD).float()

    # --8<-- [end:data]

    # --8<-- [start:reward]
    def reward(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """可验证奖励：回答里有 EOS，且第一个 EOS 之前的 token 解码成的字符串恰好是正确的和时为 1.0，否则为 0.0。

        解码用 `decode`：它丢掉 PAD 与 BOS，所以夹在答案里的 PAD、BOS 不影响得分（`8<pad>1<eos>` 也得 1 分）；
        有草稿区时（`scratch > 0`）再去掉开头的 `.`。EOS 之后的 token 不看。

        Args:
            prompts: 提示词，形状 `(B, Lp)`。
            completions: 回答，形状 `(B, T)`，EOS 之后是填充。

        Returns:
            形状 `(B,)` 的浮点奖励。

        Raises:
            ValueError: 形状不符。

        Examples:
            >>> task = AdditionTask()
            >>> p = task.encode_prompts(torch.tensor([[23, 58], [23, 58], [23, 58]]))
            >>> c = torch.tensor([encode("81") + [EOS], encode("81") + [PAD], encode("8") + [EOS, PAD]])
            >>> task.reward(p, c)
            tensor([1., 0., 0.])
        """
        check_ndim("completions", completions, 2, "(B, T)")
        if completions.shape[0] != prompts.shape[0]:
            raise ValueError(
                f"completions 的形状是 {tuple(completions.shape)}，期望第 0 维为 {prompts.shape[0]}（与 prompts 相同）"
            )
        rewards = []
        for answer, row in zip(self.answers(prompts), completions.tolist(), strict=True):
            ended = EOS in row
            text = decode(row).lstrip(".") if self.scratch else decode(row)
            rewards.append(float(ended and text == str(answer)))
        return torch.tensor(rewards)

    # --8<-- [end:reward]

    # --8<-- [start:evaluate]
    @torch.no_grad()
    def evaluate(
        self, policy: TinyTransformerPolicy, ref_policy: TinyTransformerPolicy | None = None
    ) -> dict[str, float]:
        """在留出集上评估：贪心解码的正确率与回答长度；给了参考模型时再采样一遍，估计 KL 与熵。

        Args:
            policy: 要评估的策略。
            ref_policy: 参考模型；`None` 时不计算 `kl`、`entropy`。

        Returns:
            `{"accuracy", "completion_length"}`（贪心，留出集）；有 `ref_policy` 时另有
            `"kl"`（按温度采样，逐 token $k_3$ 在掩码内平均，同 TRL 日志的 `kl`）、
            `"entropy"`（同一批样本的逐 token 熵的平均）和 `"sample_length"`（采样回答的平均长度）。
        """
        prompts = self.heldout_prompts()
        completions, mask, _ = policy.generate(prompts, greedy=True)
        out = {
            "accuracy": self.reward(prompts, completions).mean().item(),
            "completion_length": mask.sum(1).mean().item(),
        }
        if ref_policy is not None:
            completions, mask, _ = policy.generate(prompts)
            logps, entropies = policy.logps_and_entropies(prompts, completions)
            kl = kl_estimate(logps, ref_policy.logps(prompts, completions), "k3")
            out.update(
                kl=masked_mean(kl, mask).item(),
                entropy=masked_mean(entropies, mask).item(),
                sample_length=mask.sum(1).mean().item(),
            )
        return out


# --8<-- [end:evaluate]
