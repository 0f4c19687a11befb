"""Op-by-op fingerprint of the computations behind the book's printed numbers: one line per op, `name shape hash`.

    .venv/bin/python tests/numerics/fingerprint.py > mine.txt     # under the pinned settings (make exports them)
    diff tests/numerics/expected.txt mine.txt                     # the first differing line names the op

Each line is `name shape sha256[:16]` of the tensor's bytes, in the format of the AMD reference
(`tests/numerics/amd-epyc-avx2.txt`, made on an AMD EPYC with AVX2 and no AVX-512). Part 1 is single ops at the
chapter-9 model's shapes; part 2 hooks every module of the chapter-9 policy for 3 SFT steps with the optimizer the
package uses (fused AdamW); part 3 is the bandit runs behind chapters 4 and 6 (reward model, PPO and GRPO, 2 steps).

Left out on purpose: `torch.sqrt` and the unfused Adam/AdamW. torch routes them to MKL's vector-math sqrt, whose
CNR `COMPATIBLE` branch is not correctly rounded and gives other bits on AMD than on Intel (the AMD reference and
`tests/test_numerics.py` show it). The package never calls either: every optimizer is `fused=True` (its CPU kernel
takes the IEEE square root) and scalar square roots use `math.sqrt`.
"""

import hashlib  # noqa: I001  (rlhf_toy first: its pins before torch)

import rlhf_toy  # noqa: F401  (applies the pinned numeric settings before torch is used)
import torch
import torch.nn.functional as F


def h(t):
    t = t.detach().contiguous()
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16]


def show(name, t):
    print(f"{name:48s} {str(tuple(t.shape)):18s} {h(t)}")


def single_ops():
    torch.manual_seed(0)
    x = torch.randn(64, 12, 64)
    w = torch.randn(192, 64) * 0.1
    b = torch.randn(192) * 0.1
    for n, (m, k, p) in {
        "small": (8, 8, 8),
        "model": (768, 64, 192),
        "mlp": (768, 64, 256),
        "big": (256, 256, 256),
    }.items():
        A, B = torch.randn(m, k), torch.randn(k, p)
        show(f"matmul {n}", A @ B)
        show(f"matmul A^T {n}", A.t().contiguous().t() @ B)
        show(f"matmul (B^T A^T)^T {n}", (B.t() @ A.t()).t())
    show("linear 3-D", F.linear(x, w, b))
    show("addmm", torch.addmm(b, x.reshape(-1, 64), w.t()))
    show("bmm", torch.bmm(x, x.transpose(1, 2)))
    show("gelu erf", F.gelu(x))
    show("gelu tanh", F.gelu(x, approximate="tanh"))
    show("erf", torch.erf(x))
    show("exp", torch.exp(x))
    show("log", torch.log(x.abs() + 1e-3))
    show("tanh", torch.tanh(x))
    show("softmax", torch.softmax(x, -1))
    show("log_softmax", torch.log_softmax(x, -1))
    show("logsumexp", torch.logsumexp(x, -1))
    show("layer_norm", F.layer_norm(x, (64,)))
    show("sum", x.sum(-1))
    show("mean all", x.mean().reshape(1))
    show("cumsum", x.cumsum(-1))
    q = torch.randn(64, 4, 12, 16)
    mask = torch.ones(12, 12, dtype=torch.bool).tril()
    show("sdpa causal mask", F.scaled_dot_product_attention(q, q * 0.5, q * 0.25, attn_mask=mask))
    show("sdpa is_causal", F.scaled_dot_product_attention(q, q * 0.5, q * 0.25, is_causal=True))
    gen = torch.Generator().manual_seed(1)
    show("multinomial n=1 (exponential_ path)", torch.multinomial(torch.softmax(x[:, 0], -1), 1, generator=gen).float())
    show(
        "multinomial replacement",
        torch.multinomial(torch.softmax(x[:, 0], -1), 8, replacement=True, generator=gen).float(),
    )
    show("exponential_ float32", torch.empty(4096).exponential_(generator=gen))
    show("exponential_ float64", torch.empty(4096, dtype=torch.float64).exponential_(generator=gen))
    show("rand", torch.rand(4096, generator=gen))
    show("randn", torch.randn(4096, generator=gen))
    show("softmax 8 + cumsum", torch.softmax(x[:, 0, :8], -1).cumsum(-1))
    show("pow", x.abs().pow(0.37))
    show("rsqrt", (x.abs() + 0.1).rsqrt())
    show("std", x.std(-1))
    show("div", x / (x.abs() + 0.1))
    show("sigmoid", torch.sigmoid(x))
    show("logsigmoid", F.logsigmoid(x))
    show("softplus", F.softplus(x))
    show("float64 exp/log", torch.log1p(x.double().exp()))
    show("float64 sigmoid", torch.sigmoid(x.double()))  # SAPO gate in float64 (ratio-shaping.md)
    # the transformers Qwen2 of chapters 10 and 13: SwiGLU's silu, RoPE's cos/sin, RMSNorm's mean of squares;
    # the chapter-13 end-to-end run's SFT loss (per-token cross entropy over a 400-token vocabulary)
    show("silu", F.silu(x))
    show("cos/sin (RoPE)", torch.cat([torch.cos(x), torch.sin(x)]))
    show("pow 2 mean (RMSNorm)", x.pow(2).mean(-1, keepdim=True))
    logits400 = torch.randn(16, 400, 24, generator=torch.Generator().manual_seed(3))
    targets = torch.randint(0, 400, (16, 24), generator=torch.Generator().manual_seed(4))
    show("cross_entropy 400 none", F.cross_entropy(logits400, targets, reduction="none"))
    p = torch.nn.Parameter(torch.randn(192, 64))
    opt = torch.optim.AdamW([p], lr=3e-3, fused=True)
    for _ in range(3):
        opt.zero_grad()
        (p.sin() * w).sum().backward()
        opt.step()
    show("adamw fused 3 steps", p)


def sft_steps():
    print("# chapter 9 policy, SFT steps 1-3")
    from rlhf_toy.demos.tiny_lm import sft_config
    from rlhf_toy.losses.aggregate import masked_mean
    from rlhf_toy.tasks.addition import AdditionTask

    torch.manual_seed(0)
    task = AdditionTask(seed=0, balanced=True)
    policy = task.make_policy()
    for name, prm in policy.named_parameters():
        show(f"init {name}", prm)
    step = [0]
    for mname, module in policy.named_modules():
        if mname:
            module.register_forward_hook(
                lambda mod, inp, out, mname=mname: show(
                    f"s{step[0]} fwd {mname}", out[0] if isinstance(out, tuple) else out
                )
            )
    config = sft_config()
    opt = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay, fused=True)
    for s in range(1, 4):
        step[0] = f"{s}" if s == 1 else f"{s}-fused"  # from step 2 on, the weights come from fused AdamW
        prompts, completions, m = task.sft_batch(config.batch_size)
        show(f"s{step[0]} batch prompts", prompts.float())
        logps = policy.logps(prompts, completions, temperature=1.0)
        show(f"s{step[0]} logps", logps)
        loss = -masked_mean(logps, m)
        opt.zero_grad()
        loss.backward()
        for name, prm in policy.named_parameters():
            show(f"s{step[0]} grad {name}", prm.grad)
        opt.step()
        for name, prm in policy.named_parameters():
            show(f"s{s}-fused param {name}", prm)


def bandit_runs():
    print("# chapters 4 and 6: the 20 x 8 bandit")
    from rlhf_toy import BanditTask, PPOConfig, TablePolicy, TableValueModel, train_ppo
    from rlhf_toy.demos.rlhf import build_reward_model
    from rlhf_toy.train.grpo import GRPOConfig, train_grpo

    torch.manual_seed(0)
    task = BanditTask.make(n_prompts=20, n_answers=8)
    reward_model, _, _ = build_reward_model(task)
    for name, prm in reward_model.named_parameters():
        show(f"reward model {name}", prm)
    policy = TablePolicy.random(20, 8)
    ref = policy.frozen_copy()
    value = TableValueModel(20)
    train_ppo(policy, value, task, PPOConfig(steps=2), reward_model, ref)
    show("ppo 2 steps policy logits", policy.logits)
    for name, prm in value.named_parameters():
        show(f"ppo 2 steps value {name}", prm)
    torch.manual_seed(0)
    policy = TablePolicy.random(20, 8)
    train_grpo(policy, task, GRPOConfig(steps=2))
    show("grpo 2 steps policy logits", policy.logits)


if __name__ == "__main__":
    print(
        "# torch",
        torch.__version__,
        "capability",
        torch.backends.cpu.get_cpu_capability(),
        "threads",
        torch.get_num_threads(),
        "mkldnn",
        torch.backends.mkldnn.enabled,
    )
    single_ops()
    sft_steps()
    bandit_runs()
