#!/usr/bin/env python3
"""PyTorch eager training of the example GPT's shape, for examples/zero's tokens/s on one GPU.

The same model as examples/common (token and position embeddings, pre-norm blocks of causal
self-attention and a tanh-GELU MLP, a tied head, cross-entropy, AdamW with betas 0.9/0.95),
in f32 with TF32 off (as weft's CUDA back end computes), or with --amp bf16 under autocast
(products in bf16, as weft's --bf16, though autocast also keeps their outputs in bf16), on
random tokens. Attention either as the example computes it (scores, mask, softmax, product:
"manual") or through scaled_dot_product_attention ("sdpa", PyTorch's fused kernels). Prints
one line per variant: "torch attn=A amp=P tokens/s X step_ms Y" (median of the timed steps).
Not a dependency of libweft.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads, attn):
        super().__init__()
        self.heads, self.attn = heads, attn
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.fcproj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
            y = s.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(a.vocab, a.channels), nn.Embedding(a.seq, a.channels)
        self.blocks = nn.ModuleList(Block(a.channels, a.heads, a.attn) for _ in range(a.layers))
        self.lnf = nn.LayerNorm(a.channels)
        for name, p in self.named_parameters():  # GPT-2's initial weights, as the example's
            if p.dim() == 1 and "ln" not in name:
                nn.init.zeros_(p)
            elif p.dim() > 1:
                std = 0.02 / math.sqrt(2 * a.layers) if "proj" in name else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens, targets):
        t = tokens.size(1)
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def run(a):
    torch.manual_seed(1)
    model = GPT(a).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    tok = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device="cuda")
    times = []
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.amp == "bf16"):
            loss = model(tok[:, :-1], tok[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()  # as weft's trainer, which reads every step's loss
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    dt = statistics.median(times)
    print(f"torch attn={a.attn} amp={a.amp} tokens/s {a.batch * a.seq / dt:.0f} step_ms {dt * 1e3:.2f} "
          f"loss {loss.item():.4f} params {sum(p.numel() for p in model.parameters())}",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("batch", 8), ("seq", 256), ("channels", 384), ("layers", 6),
                          ("heads", 6), ("vocab", 13), ("steps", 20), ("warmup", 5)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--attn", default="manual,sdpa")
    ap.add_argument("--amp", default="f32", choices=["f32", "bf16"])
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for attn in a.attn.split(","):
        a.attn = attn
        run(a)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
