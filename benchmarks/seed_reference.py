"""The original seed demo, verbatim (code cells of the seed notebook), kept as the benchmark baseline.

benchmarks/seed.py times it against `python -m rlhf_toy seed`; both print the same lines."""

# 环境准备：在 Colab 等缺少依赖的环境中自动安装（本地已装好依赖时什么也不做）
import importlib.util, os, subprocess, sys
sys.argv = sys.argv[:1]   # notebook 内核会带上 -f 等参数，清掉以免脚本把它们当成命令行参数
# os.environ["DQN_QUICK"] = "1"   # 取消注释：支持该开关的脚本只跑很短的版本，用于快速检查
import torch
import torch.nn.functional as F

torch.manual_seed(0)
N_PROMPTS, N_ANS = 20, 8
correct = torch.randint(0, N_ANS, (N_PROMPTS,))
def new_policy():
    # 每个问题一组 logits，相当于一个查表式的“语言模型”；初始化带少量随机性
    return (0.1 * torch.randn(N_PROMPTS, N_ANS)).requires_grad_()
def accuracy(logits):
    return F.softmax(logits, -1)[torch.arange(N_PROMPTS), correct].mean().item()
# ======================= GRPO =======================
G, CLIP, BETA, LR, STEPS = 8, 0.2, 0.04, 0.5, 60
logits = new_policy()
ref = logits.detach().clone()                      # 参考模型（冻结）
opt = torch.optim.Adam([logits], lr=LR)
print(f"[GRPO] 初始：正确回答的平均概率 {accuracy(logits):.3f}")
for step in range(STEPS):
    with torch.no_grad():
        old_logp_all = F.log_softmax(logits, -1)
        samples = torch.multinomial(old_logp_all.exp(), G, replacement=True)   # 每个问题采样 G 个回答
        rewards = (samples == correct[:, None]).float()
        # 组内相对优势：A_i = (r_i - mean(r)) / (std(r) + eps)，不需要价值网络
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
        old_logp = old_logp_all.gather(1, samples)
    for _ in range(2):                             # 同一批样本上做少量优化步
        logp_all = F.log_softmax(logits, -1)
        logp = logp_all.gather(1, samples)
        ratio = (logp - old_logp).exp()
        pg = torch.min(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv)
        # KL(π || π_ref) 的无偏估计（k3）：exp(ref - logp) - (ref - logp) - 1
        ref_logp = F.log_softmax(ref, -1).gather(1, samples)
        kl = (ref_logp - logp).exp() - (ref_logp - logp) - 1
        loss = -(pg - BETA * kl).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    if (step + 1) % 20 == 0:
        print(f"[GRPO] step {step + 1:3d}：正确回答的平均概率 {accuracy(logits):.3f}，本批平均奖励 {rewards.mean():.3f}")

# ======================= DPO =======================
BETA_DPO, LR, STEPS = 0.1, 0.5, 200
logits = new_policy()
ref = logits.detach().clone()
opt = torch.optim.Adam([logits], lr=LR)
# 偏好数据：对每个问题，(正确回答 y_w) ≻ (随机错误回答 y_l)
idx = torch.arange(N_PROMPTS)
wrong = (correct + torch.randint(1, N_ANS, (N_PROMPTS,))) % N_ANS
print(f"[DPO ] 初始：正确回答的平均概率 {accuracy(logits):.3f}")
for step in range(STEPS):
    logp, ref_logp = F.log_softmax(logits, -1), F.log_softmax(ref, -1)
    # 隐式奖励差：β[(log π(y_w) - log π_ref(y_w)) - (log π(y_l) - log π_ref(y_l))]
    margin = BETA_DPO * ((logp[idx, correct] - ref_logp[idx, correct]) - (logp[idx, wrong] - ref_logp[idx, wrong]))
    loss = -F.logsigmoid(margin).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if (step + 1) % 50 == 0:
        p = F.softmax(logits, -1)
        print(f"[DPO ] step {step + 1:3d}：loss {loss.item():.4f}，正确回答平均概率 {accuracy(logits):.3f}，"
              f"被拒绝回答平均概率 {p[idx, wrong].mean():.3f}")
