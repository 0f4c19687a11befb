r"""极小的因果 Transformer 策略：与查表策略同一个接口，但回答是 $T > 1$ 个 token 的序列。

只用纯 PyTorch 写成（约两百行）：token 与位置嵌入、若干个 pre-LN 解码器块（因果自注意力 + MLP）、输出层。
它实现 [`Policy`][rlhf_toy.policies.Policy] 接口：

* `sample` / `generate`：带 KV 缓存的自回归采样（温度、最大长度、遇到 EOS 停止），返回回答与掩码；
* `logps`：给定回答的逐 token 对数概率，与 TRL `GRPOTrainer._get_per_token_logps_and_entropies` 相同：
  把提示词与回答拼在一起做一次前向，logits 除以采样温度后取 `log_softmax`，只取回答位置。

约定（同 TRL）：提示词可以左填充或右填充（内部一律转成左填充），回答右填充；回答的掩码从生成长度得到，
**第一个 EOS 计入掩码**，其后的填充不计入；没有生成 EOS 的回答（被超长截停）整行掩码为 1。
"""

# --8<-- [start:imports]
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlhf_toy._checks import check_ndim, check_nonnegative

# --8<-- [end:imports]


# --8<-- [start:masks]
def completion_mask(completions: Tensor, eos_id: int) -> Tensor:
    r"""回答的损失掩码：第一个 EOS 及其之前的位置为 1，之后（填充）为 0。

    与 TRL 1.16.0 `GRPOTrainer._generate_single_turn` 的结果相同：TRL 用 `is_eos.int().argmax(1)`
    找第一个 EOS 的位置 `eos_idx`（没有 EOS 的行取 T），`mask = (idx <= eos_idx)`；这里用 `cumsum`
    得到同样的掩码。没有 EOS 的行（被超长截停）全为 1。

    Args:
        completions: 回答 token，形状 `(B, T)`，整数。
        eos_id: EOS 的 token 编号。

    Returns:
        形状 `(B, T)` 的 0/1 浮点掩码。

    Raises:
        ValueError: `completions` 不是二维张量。

    Examples:
        >>> completion_mask(torch.tensor([[5, 2, 0], [5, 6, 7]]), eos_id=2)
        tensor([[1., 1., 0.],
                [1., 1., 1.]])
    """
    check_ndim("completions", completions, 2, "(B, T)")
    is_eos = (completions == eos_id).long()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0  # 严格位于第一个 EOS 之后
    return (~after_eos).float()


def left_pad(prompts: Tensor, pad_id: int) -> Tensor:
    """把每行的填充挪到左边（保持真实 token 的顺序）：右填充、左填充、无填充都得到同一个左填充张量。

    Args:
        prompts: 提示词 token，形状 `(B, L)`，整数，填充位置是 `pad_id`。
        pad_id: 填充 token 的编号。

    Returns:
        形状 `(B, L)` 的左填充提示词。

    Raises:
        ValueError: `prompts` 不是二维张量。

    Examples:
        >>> left_pad(torch.tensor([[7, 8, 0], [0, 7, 8]]), pad_id=0)
        tensor([[0, 7, 8],
                [0, 7, 8]])
    """
    check_ndim("prompts", prompts, 2, "(B, L)")
    order = torch.sort((prompts != pad_id).long(), dim=1, stable=True).indices  # 填充（0）排前面
    return prompts.gather(1, order)


# --8<-- [end:masks]


class _Block(nn.Module):
    """一个 pre-LN 解码器块：因果自注意力 + 两层 MLP，各带残差。"""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor, attn_mask: Tensor, cache: tuple[Tensor, Tensor] | None = None):
        B, S, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        if cache is not None:  # KV 缓存：之前位置的 K、V 不必重算
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, D))
        return x + self.mlp(self.ln2(x)), (k, v)


# --8<-- [start:tiny_transformer]
class TinyTransformerPolicy(nn.Module):
    r"""极小的因果 Transformer 策略 $\pi_\theta(y_t\mid x, y_{<t})$（字符级词表，含 PAD / BOS / EOS）。

    Args:
        vocab_size: 词表大小 $V$。
        pad_id: 填充 token 的编号。
        eos_id: 结束 token（EOS）的编号。
        max_prompt_length: 提示词最长 token 数（含 BOS）。
        max_completion_length: 回答最多生成的 token 数 $L$（TRL `max_completion_length`，含 EOS）。
        d_model: 隐藏维度 $d$。
        n_layers: 解码器块数。
        n_heads: 注意力头数，须整除 `d_model`。
        temperature: 采样温度（TRL `temperature`）；`logps` 也用它缩放 logits，与 TRL 一致。

    Raises:
        ValueError: 尺寸不是正数、`n_heads` 不整除 `d_model`，或 `temperature <= 0`。
    """

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        eos_id: int,
        *,
        max_prompt_length: int,
        max_completion_length: int,
        d_model: int = 48,
        n_layers: int = 2,
        n_heads: int = 4,
        temperature: float = 1.0,
    ):
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size),
            ("max_prompt_length", max_prompt_length),
            ("max_completion_length", max_completion_length),
            ("d_model", d_model),
            ("n_layers", n_layers),
            ("n_heads", n_heads),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} 应是正整数，实际是 {value!r}")
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} 应整除 d_model={d_model}")
        if not temperature > 0:
            raise ValueError(f"temperature 应 > 0，实际是 {temperature}")
        self.pad_id, self.eos_id, self.temperature = pad_id, eos_id, temperature
        self.max_prompt_length, self.max_completion_length = max_prompt_length, max_completion_length
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_prompt_length + max_completion_length, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def _prefill(self, prompts: Tensor):
        """左填充提示词 `(P, Lp)` 的前向：返回最后位置的隐状态、KV 缓存、键的有效位与下一个位置编号。"""
        Lp = prompts.shape[1]
        valid = prompts != self.pad_id
        positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)  # 左填充不占位置编号（同 HF）
        causal = torch.ones(Lp, Lp, dtype=torch.bool).tril()
        attn_mask = (causal & valid[:, None, :]) | torch.eye(Lp, dtype=torch.bool)  # 填充位置只看自己，避免 NaN
        hidden, caches = self._run(prompts, positions, attn_mask[:, None])
        return hidden[:, -1], caches, valid, valid.sum(dim=1, keepdim=True)

    def _run(self, ids: Tensor, positions: Tensor, attn_mask: Tensor, caches: list | None = None):
        """对 `ids (B, S)` 做前向，返回最后一层隐状态 `(B, S, d)` 与每层新的 KV 缓存。"""
        x = self.tok_emb(ids) + self.pos_emb(positions)
        new_caches = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, attn_mask, None if caches is None else caches[i])
            new_caches.append(kv)
        return self.ln_f(x), new_caches

    # --8<-- [end:tiny_transformer]

    # --8<-- [start:logits]
    def completion_logits(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """一次前向得到每个回答位置的 logits（未除以温度）：位置 $t$ 的 logits 预测回答的第 $t$ 个 token。

        Args:
            prompts: 提示词，形状 `(B, Lp)`，整数，左填充或右填充均可（填充为 `pad_id`）。
            completions: 回答，形状 `(B, T)`，整数，右填充。

        Returns:
            形状 `(B, T, V)` 的浮点 logits，带梯度。

        Raises:
            ValueError: 形状不符，或提示词与回答合起来超过位置嵌入的长度。
        """
        return self.head(self.completion_hidden(prompts, completions))

    def completion_hidden(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """预测回答第 $t$ 个 token 的那个位置的最后一层隐状态（PPO 的价值头也读它）。

        Args:
            prompts: 提示词，形状 `(B, Lp)`，左填充或右填充。
            completions: 回答，形状 `(B, T)`，右填充。

        Returns:
            形状 `(B, T, d_model)` 的浮点张量，带梯度。

        Raises:
            ValueError: 形状不符，或提示词与回答合起来超过位置嵌入的长度。
        """
        check_ndim("prompts", prompts, 2, "(B, Lp)")
        check_ndim("completions", completions, 2, "(B, T)")
        if completions.shape[0] != prompts.shape[0]:
            raise ValueError(
                f"completions 的形状是 {tuple(completions.shape)}，期望第 0 维为 {prompts.shape[0]}（与 prompts 相同）"
            )
        Lp, T = prompts.shape[1], completions.shape[1]
        if Lp + T > self.pos_emb.num_embeddings:
            raise ValueError(
                f"提示词长 {Lp} + 回答长 {T} 超过了 max_prompt_length + max_completion_length = {self.pos_emb.num_embeddings}"
            )
        # 同一提示词的 G 个回答共用前缀：每个不同的提示词只前向一次，K、V 再按行复制（梯度照常回传）
        unique, inverse = torch.unique(left_pad(prompts, self.pad_id), dim=0, return_inverse=True)
        last, caches, valid, next_pos = self._prefill(unique)
        last, valid, next_pos = last[inverse], valid[inverse], next_pos[inverse]
        caches = [(k[inverse], v[inverse]) for k, v in caches]
        B = completions.shape[0]
        positions = next_pos + torch.arange(T)  # (B, T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        attn_mask = torch.cat([valid[:, None, :].expand(B, T, Lp), causal.expand(B, T, T)], dim=2)
        hidden, _ = self._run(completions, positions, attn_mask[:, None], caches)
        # 右移一位：提示词最后一个位置预测回答第 0 个 token，回答第 t 个位置预测第 t+1 个
        return torch.cat([last[:, None], hidden[:, :-1]], dim=1)

    def logps_and_entropies(
        self, prompts: Tensor, completions: Tensor, temperature: float | None = None
    ) -> tuple[Tensor, Tensor]:
        r"""逐 token 对数概率与熵（TRL `_get_per_token_logps_and_entropies`）。

        $\log\pi_\theta(y_t) = \big[\log\mathrm{softmax}(z_t / \tau)\big]_{y_t}$，$\tau$ 是采样温度；
        熵 $H_t = -\sum_v p_v\log p_v$ 用同一个缩放后的分布。

        Args:
            prompts: 提示词，形状 `(B, Lp)`，左填充或右填充。
            completions: 回答，形状 `(B, T)`，右填充。
            temperature: 覆盖 `self.temperature`（SFT 用 1.0）；`None` 表示用 `self.temperature`。

        Returns:
            `(logps, entropies)`，形状均为 `(B, T)`，浮点；`logps` 带梯度。第一个 EOS 之后（填充）的位置为 0，
            所以 `logps.sum(-1)` 就是整条回答的对数概率（TRL `DPOTrainer` 用掩码求和，结果相同）。
        """
        tau = self.temperature if temperature is None else temperature
        log_probs = F.log_softmax(self.completion_logits(prompts, completions) / tau, dim=-1)
        logps = log_probs.gather(-1, completions.unsqueeze(-1)).squeeze(-1)
        entropies = -(log_probs.exp() * log_probs).sum(-1)
        mask = completion_mask(completions, self.eos_id)  # EOS 之后置 0：logps.sum(-1) 就是整条回答的对数概率
        return logps * mask, entropies * mask

    def logps(self, prompts: Tensor, completions: Tensor, temperature: float | None = None) -> Tensor:
        """给定回答的逐 token 对数概率 $\\log\\pi_\\theta(y_t\\mid x, y_{<t})$，logits 先除以温度。

        Args:
            prompts: 提示词，形状 `(B, Lp)`，左填充或右填充。
            completions: 回答，形状 `(B, T)`，右填充。
            temperature: 覆盖 `self.temperature`；`None` 表示用 `self.temperature`。

        Returns:
            形状 `(B, T)`，浮点，带梯度。
        """
        return self.logps_and_entropies(prompts, completions, temperature)[0]

    # --8<-- [end:logits]

    # --8<-- [start:generate]
    @torch.no_grad()
    def generate(
        self,
        prompts: Tensor,
        num_generations: int = 1,
        *,
        greedy: bool = False,
        temperature: float | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        r"""带 KV 缓存的自回归生成：每步只把新 token 送进网络，之前位置的 K、V 从缓存里取。

        提示词只做一次前向（prefill），其 KV 缓存再复制给同组的 `num_generations` 个回答。

        Args:
            prompts: 提示词，形状 `(P, Lp)`，整数，左填充或右填充。
            num_generations: 每个提示词生成几个回答 $G$；同一提示词的回答在输出里相邻，`B = P * G`。
            greedy: `True` 时每步取概率最大的 token（评估用），否则按温度采样。
            temperature: 覆盖 `self.temperature`；`None` 表示用 `self.temperature`。
            generator: 可选的 `torch.Generator`，用于可复现的采样。

        Returns:
            `(completions, mask, logps)`：形状均为 `(B, T)`，`T ≤ max_completion_length`（所有行都生成 EOS
            后提前停止）。EOS 之后填 `pad_id`；`mask` 见 `completion_mask`；`logps` 是采样时各 token 的
            对数概率（温度缩放后，贪心时也照此计算），填充位置为 0。

        Raises:
            ValueError: `prompts` 不是二维，`num_generations` 不是正整数，或 `temperature <= 0`。
        """
        check_ndim("prompts", prompts, 2, "(P, Lp)")
        if not isinstance(num_generations, int) or num_generations < 1:
            raise ValueError(f"num_generations 应是正整数，实际是 {num_generations!r}")
        tau = self.temperature if temperature is None else temperature
        check_nonnegative("temperature", tau)
        if tau == 0:
            raise ValueError("temperature 应 > 0；要贪心解码请用 greedy=True")
        last, caches, valid, next_pos = self._prefill(left_pad(prompts, self.pad_id))  # 预填充，每个提示词一次
        G = num_generations  # 把提示词的 KV 缓存复制给组内的 G 个回答
        caches = [(k.repeat_interleave(G, dim=0), v.repeat_interleave(G, dim=0)) for k, v in caches]
        logits = self.head(last).repeat_interleave(G, dim=0)
        valid, next_pos = valid.repeat_interleave(G, dim=0), next_pos.repeat_interleave(G, dim=0)
        B = valid.shape[0]
        done = torch.zeros(B, dtype=torch.bool)
        tokens, logps = [], []
        for t in range(self.max_completion_length):
            log_probs = F.log_softmax(logits / tau, dim=-1)
            if greedy:
                token = log_probs.argmax(dim=-1)
            else:
                token = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(1)
            token = token.masked_fill(done, self.pad_id)  # 已结束的行只填 PAD
            logps.append(log_probs.gather(1, token[:, None]).squeeze(1).masked_fill(done, 0.0))
            tokens.append(token)
            done = done | (token == self.eos_id)
            if done.all() or t == self.max_completion_length - 1:
                break
            valid = torch.cat([valid, torch.ones(B, 1, dtype=torch.bool)], dim=1)
            hidden, caches = self._run(token[:, None], next_pos, valid[:, None, None, :], caches)
            logits = self.head(hidden[:, -1])
            next_pos = next_pos + 1
        completions = torch.stack(tokens, dim=1)
        return completions, completion_mask(completions, self.eos_id), torch.stack(logps, dim=1)

    def sample(self, prompts: Tensor, num_generations: int) -> tuple[Tensor, Tensor]:
        """为每个提示词按温度采样 `num_generations` 个回答（同一提示词的回答相邻）。

        Args:
            prompts: 提示词，形状 `(P, Lp)`，整数。
            num_generations: 每组回答数 $G$。

        Returns:
            `(completions, mask)`：形状均为 `(P * G, T)`。
        """
        completions, mask, _ = self.generate(prompts, num_generations)
        return completions, mask

    # --8<-- [end:generate]

    def entropy(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """每个回答位置上（温度缩放后）整个词表分布的熵，形状 `(B, T)`，带梯度。

        Args:
            prompts: 提示词，形状 `(B, Lp)`。
            completions: 回答，形状 `(B, T)`。

        Returns:
            形状 `(B, T)` 的浮点张量，单位 nat。
        """
        return self.logps_and_entropies(prompts, completions)[1]

    def frozen_copy(self) -> TinyTransformerPolicy:
        """冻结的副本（参考模型）：参数不再需要梯度。"""
        ref = copy.deepcopy(self)
        ref.requires_grad_(False)
        return ref
