#!/usr/bin/env python3
"""A small GPT-style Transformer trained three ways whose losses must agree.

  --mode single   one process, the whole global batch, no process group
  --mode ddp      DistributedDataParallel; rank r takes slice r of the same global batch
  --mode fsdp     FSDP2 (fully_shard on every block, then on the root); same slicing
  --mode compare  --ref A.json --cand B.json [--tol T]: PASS when the per-step losses agree

The distributed modes run as N processes with torchrun's environment (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK); every rank uses cuda:0 (or WEFT_TORCH_DEVICE).
The model is built on the CPU under a fixed seed and then moved to the GPU (before any
wrapping), the data come from a seeded generator and are the same global batches in every
mode, and every rank's loss is the mean over its equal share of tokens, so the loss reported
for a step (the all_reduce AVG of the local losses) is the global batch's mean loss -- what the
single run computes. Rank 0 writes {"losses": [...], "mean_step_s": ...} to --out.

compare: max over steps of |a - b| / max(1, |a|) must be <= tol; it prints
"PASS compare ..." or "FAIL compare ..." with the worst step and exits 1 on failure.
"""
import argparse
import json
import math
import os
import sys
import time

VOCAB, D_MODEL, HEADS, LAYERS, SEQ = 256, 128, 4, 2, 64

# Why the tolerance is not zero: the distributed runs sum the gradients in another order than
# the single run (each rank's backward sums over its half of the batch, then the collective
# adds the halves -- in weft's order -- and divides), and the GEMMs see other shapes (half
# the batch), so cuBLAS may pick kernels that accumulate in another order. Float32 rounding
# therefore differs in the last bits, and 50 AdamW steps carry that along (Adam's update
# g / sqrt(v) magnifies tiny differences where gradients are near zero). A wrong reduction
# (a missing rank, a double count, a stale buffer) moves the loss by far more than 1e-4.
DEFAULT_TOL = {"f32": 1e-4, "bf16": 2e-2}


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", required=True, choices=["single", "ddp", "fsdp", "compare"])
    p.add_argument("--out", help="JSON file for the losses (rank 0 writes it)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--global-batch", type=int, default=24, help="sequences per step, all ranks")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                   help="bf16: forward under torch.autocast(bfloat16)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ref", help="compare: the reference JSON (the single run)")
    p.add_argument("--cand", help="compare: the JSON to check against it")
    p.add_argument("--tol", type=float, default=None,
                   help="compare: max relative difference (default 1e-4 for f32, 2e-2 for bf16)")
    return p.parse_args()


def compare(args):
    if not args.ref or not args.cand:
        print("FAIL compare: --ref and --cand are required", flush=True)
        return 1
    try:
        with open(args.ref) as f:
            a = json.load(f)
        with open(args.cand) as f:
            b = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL compare: cannot read the runs: {e}", flush=True)
        return 1
    name = f"{b.get('mode', args.cand)} vs {a.get('mode', args.ref)}"
    la, lb = a.get("losses", []), b.get("losses", [])
    if not la or len(la) != len(lb):
        print(f"FAIL compare {name}: {len(lb)} steps against {len(la)}", flush=True)
        return 1
    bad = [i for i in range(len(la)) if not (math.isfinite(la[i]) and math.isfinite(lb[i]))]
    if bad:
        print(f"FAIL compare {name}: non-finite loss at step {bad[0]} "
              f"(ref {la[bad[0]]}, got {lb[bad[0]]})", flush=True)
        return 1
    tol = args.tol
    if tol is None:
        both = {a.get("dtype", "f32"), b.get("dtype", "f32")}
        tol = DEFAULT_TOL["f32"] if both == {"f32"} else DEFAULT_TOL["bf16"]
    rel = [abs(x - y) / max(1.0, abs(x)) for x, y in zip(la, lb)]
    worst = max(range(len(rel)), key=rel.__getitem__)
    speed = ""
    if a.get("mean_step_s") and b.get("mean_step_s"):
        speed = (f"; mean step {1e3 * b['mean_step_s']:.2f} ms "
                 f"(ref {1e3 * a['mean_step_s']:.2f} ms)")
    detail = (f"{name}: max rel diff {rel[worst]:.3g} at step {worst} (ref {la[worst]:.6f}, "
              f"got {lb[worst]:.6f}), tol {tol:g}, {len(la)} steps, loss {la[0]:.4f} -> "
              f"{la[-1]:.4f}{speed}")
    ok = rel[worst] <= tol
    print(f"{'PASS' if ok else 'FAIL'} compare {detail}", flush=True)
    return 0 if ok else 1


def build_model(torch):
    nn = torch.nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(c, dim=2)
            q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // HEADS))
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
            return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D_MODEL)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(D_MODEL)
            self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(),
                                     nn.Linear(4 * D_MODEL, D_MODEL))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, D_MODEL)
            self.pos = nn.Embedding(SEQ, D_MODEL)
            self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(D_MODEL)
            self.head = nn.Linear(D_MODEL, VOCAB, bias=False)  # untied: simpler under FSDP

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))

    return GPT()


def make_data(torch, steps, batch, seed):
    """Arithmetic sequences mod VOCAB with a random start and stride per sequence: learnable
    (the stride is visible in the context), so the loss falls well within 50 steps."""
    g = torch.Generator().manual_seed(seed + 1)
    start = torch.randint(0, VOCAB, (steps, batch, 1), generator=g)
    stride = torch.randint(1, 9, (steps, batch, 1), generator=g)
    return (start + stride * torch.arange(SEQ + 1)) % VOCAB  # (steps, batch, SEQ + 1)


def train(args):
    import contextlib

    import torch
    import torch.nn.functional as F

    distributed = args.mode in ("ddp", "fsdp")
    rank = int(os.environ.get("RANK", "0")) if distributed else 0
    world = int(os.environ.get("WORLD_SIZE", "1")) if distributed else 1
    device = torch.device(os.environ.get("WEFT_TORCH_DEVICE", "cuda:0"))
    if device.index is None:  # "cuda" alone: GPU 0
        device = torch.device(device.type, 0)
    if args.global_batch % world:
        print(f"FAIL train: global batch {args.global_batch} does not split over {world} ranks",
              flush=True)
        return 1
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False  # plain float32 GEMMs in every mode
    torch.backends.cudnn.allow_tf32 = False
    dist = None
    if distributed:
        import torch.distributed as dist
        from datetime import timedelta

        dist.init_process_group("nccl", device_id=device, timeout=timedelta(seconds=120))

    torch.manual_seed(args.seed)
    model = build_model(torch)  # on the CPU: the same numbers in every mode and on every rank
    model.to(device)
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[device.index])
    elif args.mode == "fsdp":
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # PyTorch before 2.6
            from torch.distributed._composable.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh

        # CUDA is initialised and the device set, so the mesh keeps cuda:0 (it would pick
        # cuda:LOCAL_RANK only on an uninitialised device).
        mesh = init_device_mesh("cuda", (world,))
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    data = make_data(torch, args.steps, args.global_batch, args.seed)
    share = args.global_batch // world
    lo, hi = rank * share, (rank + 1) * share
    amp = (torch.autocast("cuda", dtype=torch.bfloat16) if args.dtype == "bf16"
           else contextlib.nullcontext())

    losses, times = [], []
    for step in range(args.steps):
        batch = data[step, lo:hi].to(device)
        x, y = batch[:, :-1], batch[:, 1:]
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with amp:
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        report = loss.detach().clone()
        if distributed:
            dist.all_reduce(report, op=dist.ReduceOp.AVG)  # equal shares: the global mean
        losses.append(report.item())
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)

    warm = times[3:] or times
    result = {
        "mode": args.mode,
        "world_size": world,
        "dtype": args.dtype,
        "steps": args.steps,
        "global_batch": args.global_batch,
        "seed": args.seed,
        "losses": losses,
        "mean_step_s": sum(warm) / len(warm),
        "first_step_s": times[0],
        "torch": torch.__version__,
        "device": str(device),
    }
    finite = all(math.isfinite(v) for v in losses)
    if rank == 0:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
        print(f"torch_train: mode {args.mode}, world {world}, {args.dtype}, {args.steps} steps, "
              f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, mean step "
              f"{1e3 * result['mean_step_s']:.2f} ms", flush=True)
        if not finite:
            print("FAIL train: a loss is not finite", flush=True)
    if distributed:
        dist.destroy_process_group()
    return 0 if finite else 1


def main():
    args = parse()
    if args.mode == "compare":
        return compare(args)
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
