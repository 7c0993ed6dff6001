"""PyTorch's PREMUL_SUM on one rank: f32, f16 and bf16, scalar on the host and as a tensor.
Run it once as is (NVIDIA's NCCL) and once with LD_PRELOAD=BUILD/src/nccl/libnccl.so.2 (weft):
the two must print the same. It showed that PyTorch passes a float scalar for bf16, which NCCL
reads as two bytes (bench/results/2026-12-01-h200-nccl-abi.txt).
usage: python3 scripts/gpu/premul_probe.py (on a GPU machine with PyTorch)"""
import os

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
for dt in (torch.float32, torch.float16, torch.bfloat16):
    x = torch.full((4,), 3.0, dtype=dt, device="cuda")
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.0))
    y = torch.full((4,), 3.0, dtype=dt, device="cuda")
    f = torch.tensor([2.0], device="cuda", dtype=torch.float32 if dt == torch.bfloat16 else dt)
    try:
        dist.all_reduce(y, op=dist._make_nccl_premul_sum(f))
        ty = y.tolist()
    except Exception as e:
        ty = "err: %s" % str(e).splitlines()[0]
    print(os.environ.get("LD_PRELOAD", "real-nccl")[-20:], dt, "host scalar 2.0 * 3 ->", x.tolist(), "| tensor factor ->", ty, flush=True)
dist.destroy_process_group()
