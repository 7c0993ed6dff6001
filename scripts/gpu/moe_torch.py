#!/usr/bin/env python3
"""PyTorch's MoE baseline for moebench --compare torch: what a trainer does without weft.

layout:   argsort of the flat top-k ids (stable) and bincount per expert, then (more than one
          rank) the per-rank counts exchanged with all_to_all_single and read on the host.
dispatch: index_select of each (token, choice) row in expert order (the permute), then (more
          than one rank) all_to_all_single of the rows with those counts.
combine:  the reverse all_to_all_single, then index_add_ of the rows times their weights into
          an f32 [tokens, hidden] (the weighted unpermute), cast back to the payload type.

One process per GPU (torchrun sets the ranks; a single process needs nothing). Each phase
is timed as moebench times weft's calls (host clock from the call until the GPU is done,
after a barrier), over the same iterations; the slowest rank's mean is
written as moebench's JSON rows (phase, time_us). Not a dependency of libweft.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
         "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("-d", "--datatype", default="bf16", choices=TYPES)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup_iters", type=int, default=5)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if world > 1:
        dist.init_process_group("nccl")
    dev = torch.device("cuda")
    T, H, K, E = a.tokens, a.hidden, a.topk, a.experts
    local = E // world
    g = torch.Generator(device=dev).manual_seed(1234 + rank)
    # k distinct experts per token, uniform: the top k of random scores
    ids = torch.rand(T, E, device=dev, generator=g).topk(K, dim=1).indices
    w = torch.full((T, K), 1.0 / K, device=dev)
    x = torch.randn(T, H, device=dev, generator=g).to(TYPES[a.datatype])

    state = {}

    def layout():
        flat = ids.flatten()
        order = flat.argsort(stable=True)
        per_expert = torch.bincount(flat, minlength=E)
        state["order"], state["per_expert"] = order, per_expert
        if world > 1:
            send = per_expert.view(world, local).sum(1)
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send)
            state["send"], state["recv"] = send.tolist(), recv.tolist()

    def dispatch():
        rows = x.index_select(0, state["order"] // K)
        if world > 1:
            out = rows.new_empty(sum(state["recv"]), H)
            dist.all_to_all_single(out, rows, state["recv"], state["send"])
            rows = out
        state["rows"] = rows

    def combine():
        rows = state["rows"]
        if world > 1:
            back = rows.new_empty(T * K, H)
            dist.all_to_all_single(back, rows, state["send"], state["recv"])
            rows = back
        order = state["order"]
        scaled = rows.float() * w.flatten()[order].unsqueeze(1)
        y = torch.zeros(T, H, device=dev, dtype=torch.float32)
        y.index_add_(0, order // K, scaled)
        state["y"] = y.to(x.dtype)

    rows_out = []
    for name, fn in (("layout", layout), ("dispatch", dispatch), ("combine", combine)):
        total = 0.0
        for i in range(a.warmup_iters + a.iters):
            if world > 1:
                dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            if i >= a.warmup_iters:
                total += (time.perf_counter() - t0) * 1e6
        mean = torch.tensor([total / a.iters], device=dev)
        if world > 1:
            dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        rows_out.append({"phase": name, "time_us": mean.item()})
    # identity experts with weights summing to 1 give x back: the baseline is checked too
    err = (state["y"].float() - x.float()).abs().max().item()
    if rank == 0:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "world": world, "max_error": err,
                       "rows": rows_out}, f)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
