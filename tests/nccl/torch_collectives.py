#!/usr/bin/env python3
"""torch.distributed's collectives over the "nccl" backend, checked against exact oracles.

Run as N processes with the environment torchrun gives (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE, LOCAL_RANK); scripts/gpu/nccl_torch.sh starts them with
LD_PRELOAD=<build>/src/nccl/libnccl.so.2, so PyTorch's ProcessGroupNCCL runs on weft. Every
rank uses cuda:0 (WEFT_TORCH_DEVICE=cuda:N picks another GPU): weft lets ranks share one GPU.

Every rank can compute every rank's input from (rank, world size), so each result is compared
with an oracle computed on the spot. Reductions use small integer values, exact in every dtype
(bfloat16 included), so SUM/PRODUCT/MIN/MAX/PREMUL_SUM must match exactly; AVG alone gets a
per-dtype tolerance (NCCL may compute it as a sum of x * (1/n), and 1/3 is not exact).

Pass / fail:
  * each check is recorded on every rank (same names, same order on every rank); rank 0
    prints "PASS name" or "FAIL name: detail" for its own result as it goes, other ranks print
    their FAIL lines into their own logs;
  * "SKIP name: why" marks what this PyTorch cannot do (not counted either way);
  * at the end the per-check failure flags are summed over the ranks with an all_reduce, rank 0
    prints a FAIL line for every check that failed only on other ranks, then
    "torch_collectives: N passed, M failed, S skipped (world W)"; every rank exits 1 when any
    check failed anywhere (or when the final tally could not be made), else 0.
"""
import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
DEV = torch.device(os.environ.get("WEFT_TORCH_DEVICE", "cuda:0"))
if DEV.index is None:  # "cuda" alone: GPU 0
    DEV = torch.device(DEV.type, 0)
BIG = 1000003  # odd, > 1 MiB of floats
SIZES = (1, 7, BIG)
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INTS = (torch.int32, torch.int64, torch.uint8, torch.int8)
DTYPES = FLOATS + INTS
PREMUL_FACTOR = 3.0  # x * 3 stays exact for the small values used here
FILL = 122  # what output buffers hold before a collective: outside pattern()'s 0..120
# AVG tolerance (atol, rtol); everything else is compared exactly.
AVG_TOL = {
    torch.float64: (1e-12, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (1e-2, 2e-3),
    torch.bfloat16: (7e-2, 1e-2),
}

results = []  # (name, failed 0/1, skipped bool), identical names and order on every rank


class Skip(Exception):
    """The check cannot run with this PyTorch; same decision on every rank."""


def dname(dtype):
    return str(dtype).replace("torch.", "")


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def check(name, fn, *args):
    """Runs fn(*args): None or True means pass, a string is the failure's detail."""
    try:
        detail = fn(*args)
    except Skip as s:
        results.append((name, 0, True))
        if RANK == 0:
            print(f"SKIP {name}: {s}", flush=True)
        return
    except Exception as e:  # a collective that raised is a failure of that check
        detail = first_line(e)
        if os.environ.get("WEFT_TORCH_TRACEBACK"):
            traceback.print_exc()
    ok = detail is None or detail is True
    results.append((name, 0 if ok else 1, False))
    if ok:
        if RANK == 0:
            print(f"PASS {name}", flush=True)
    else:
        print(f"FAIL {name}: [rank {RANK}] {detail}", flush=True)


# ---- inputs (int64 on the device; each rank can make any rank's) ----

def ar(n):
    return torch.arange(n, device=DEV, dtype=torch.int64)


def small_vals(r, n, signed):
    """0..10 (or -5..5): sums over a few ranks stay exact even in bfloat16."""
    v = (ar(n) * 7 + r * 13 + 1) % 11
    return v - 5 if signed else v


def prod_vals(r, n, signed):
    """1..3 (with some negated when signed): a product over 3 ranks is at most 27."""
    i = ar(n)
    v = (i * 5 + r * 3) % 3 + 1
    if signed:
        v = torch.where((i + r) % 4 == 0, -v, v)
    return v


def pattern(r, n):
    """Payload for data movement: 0..120, exact in every dtype (int8 and bfloat16 included)."""
    return (ar(n) * 7 + r * 31 + 3) % 121


def filled(n, dtype):
    return torch.full((n,), FILL, dtype=dtype, device=DEV)


def mismatch(out, exp, tol=None):
    """None when out equals exp (within tol=(atol, rtol) for floats), else the first difference."""
    out = out.reshape(-1)
    exp = exp.reshape(-1)
    if out.numel() != exp.numel():
        return f"{out.numel()} elements, want {exp.numel()}"
    if out.numel() == 0:
        return None
    if out.dtype.is_floating_point:
        o, e = out.to(torch.float64), exp.to(torch.float64)
        atol, rtol = tol if tol else (0.0, 0.0)
        bad = ~((o - e).abs() <= atol + rtol * e.abs())  # NaN is bad too
    else:
        o, e = out.to(torch.int64), exp.to(torch.int64)
        bad = o != e
    nbad = int(bad.sum().item())
    if nbad == 0:
        return None
    i = int(bad.nonzero()[0, 0].item())
    return f"{nbad} of {o.numel()} elements differ; first at {i}: got {o[i].item()} want {e[i].item()}"


# ---- reductions ----

def redop(name):
    if name == "sum":
        return dist.ReduceOp.SUM
    if name == "prod":
        return dist.ReduceOp.PRODUCT
    if name == "min":
        return dist.ReduceOp.MIN
    if name == "max":
        return dist.ReduceOp.MAX
    if name == "avg":
        return dist.ReduceOp.AVG
    if name == "premul":
        make = getattr(dist, "_make_nccl_premul_sum", None)
        if make is None:
            raise Skip("torch.distributed._make_nccl_premul_sum is not in this PyTorch")
        return make(PREMUL_FACTOR)
    raise ValueError(name)


def inputs(op, r, n, dtype):
    signed = dtype != torch.uint8
    return prod_vals(r, n, signed) if op == "prod" else small_vals(r, n, signed)


def reduced(op, n, dtype, ranks=None):
    """The oracle: op over the inputs of ranks (default: all), as int64 or float64."""
    ranks = list(range(WORLD)) if ranks is None else ranks
    s = torch.stack([inputs(op, r, n, dtype) for r in ranks])
    if op == "sum":
        return s.sum(0)
    if op == "prod":
        return s.prod(0)
    if op == "min":
        return s.amin(0)
    if op == "max":
        return s.amax(0)
    if op == "avg":
        return s.to(torch.float64).sum(0) / len(ranks)
    if op == "premul":
        return s.to(torch.float64).sum(0) * PREMUL_FACTOR
    raise ValueError(op)


def ops_for(dtype):
    ops = ["sum", "prod", "min", "max"]
    if dtype.is_floating_point:
        ops += ["avg", "premul"]  # AVG: floats only; PREMUL_SUM: PyTorch takes floats only
    return ops


def t_all_reduce(op, dtype, n):
    if op == "premul" and dtype == torch.bfloat16:
        # PyTorch 2.11 hands NCCL a float scalar for a bfloat16 PreMulSum; NCCL (2.28.3 and
        # 2.28.9) copies the type's 2 bytes of it, the low half of the float, so with its
        # own library too the result is 0 for 2.0 (scripts/gpu/premul_probe.py, one rank,
        # bench/results/2026-12-01-h200-nccl-abi.txt). weft reads it as NCCL does.
        raise Skip("bfloat16 PREMUL_SUM: PyTorch passes a float scalar, NCCL itself gives 0")
    o = redop(op)
    x = inputs(op, RANK, n, dtype).to(dtype)
    dist.all_reduce(x, op=o)
    return mismatch(x, reduced(op, n, dtype), AVG_TOL.get(dtype) if op == "avg" else None)


def t_all_reduce_async(k):
    """k all_reduces in flight at once, then waited for."""
    xs = [small_vals(RANK + j, 4099 + j, True).to(torch.float32) for j in range(k)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for w in works:
        w.wait()
    for j, x in enumerate(xs):
        exp = torch.stack([small_vals(r + j, 4099 + j, True) for r in range(WORLD)]).sum(0)
        bad = mismatch(x, exp)
        if bad:
            return f"op {j}: {bad}"
    return None


def t_broadcast(root, dtype, n):
    exp = pattern(root, n).to(dtype)
    t = exp.clone() if RANK == root else filled(n, dtype)
    dist.broadcast(t, src=root)
    return mismatch(t, exp)


def t_reduce(root, op, dtype, n):
    x = inputs(op, RANK, n, dtype).to(dtype)
    dist.reduce(x, root, op=redop(op))
    if RANK != root:
        return None  # NCCL writes the result on the root only
    return mismatch(x, reduced(op, n, dtype))


def t_all_gather_into_tensor(dtype, n):
    out = filled(n * WORLD, dtype)
    dist.all_gather_into_tensor(out, pattern(RANK, n).to(dtype))
    return mismatch(out, torch.cat([pattern(r, n) for r in range(WORLD)]))


def t_all_gather(dtype, n):
    outs = [filled(n, dtype) for _ in range(WORLD)]
    dist.all_gather(outs, pattern(RANK, n).to(dtype))
    for r in range(WORLD):
        bad = mismatch(outs[r], pattern(r, n))
        if bad:
            return f"from rank {r}: {bad}"
    return None


def t_reduce_scatter_tensor(op, dtype, n):
    o = redop(op)
    x = inputs(op, RANK, n * WORLD, dtype).to(dtype)
    out = filled(n, dtype)
    dist.reduce_scatter_tensor(out, x, op=o)
    exp = reduced(op, n * WORLD, dtype)[RANK * n:(RANK + 1) * n]
    return mismatch(out, exp, AVG_TOL.get(dtype) if op == "avg" else None)


# ---- all-to-all ----

def t_all_to_all_single_even(dtype, n):
    inp = pattern(RANK, n * WORLD).to(dtype)  # chunk j goes to rank j
    out = filled(n * WORLD, dtype)
    dist.all_to_all_single(out, inp)
    exp = torch.cat([pattern(j, n * WORLD)[RANK * n:(RANK + 1) * n] for j in range(WORLD)])
    return mismatch(out, exp)


def split(r, j, scale):
    """Elements rank r sends to rank j: uneven, and 0 from rank 0 to itself."""
    return ((r + 2 * j) % 4) * scale


def t_all_to_all_single_uneven(dtype, scale):
    in_splits = [split(RANK, j, scale) for j in range(WORLD)]
    out_splits = [split(j, RANK, scale) for j in range(WORLD)]
    inp = pattern(RANK, sum(in_splits)).to(dtype)
    out = filled(sum(out_splits), dtype)
    dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
    parts = []
    for j in range(WORLD):
        src = pattern(j, sum(split(j, k, scale) for k in range(WORLD)))
        off = sum(split(j, k, scale) for k in range(RANK))
        parts.append(src[off:off + split(j, RANK, scale)])
    return mismatch(out, torch.cat(parts))


def t_all_to_all_list(dtype, scale):
    def length(r, j):
        return (1 + r + 2 * j) * scale

    inp = [pattern(RANK * WORLD + j, length(RANK, j)).to(dtype) for j in range(WORLD)]
    out = [filled(length(j, RANK), dtype) for j in range(WORLD)]
    dist.all_to_all(out, inp)
    for j in range(WORLD):
        bad = mismatch(out[j], pattern(j * WORLD + RANK, length(j, RANK)))
        if bad:
            return f"from rank {j}: {bad}"
    return None


# ---- point to point ----

def t_ring(dtype, n):
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    send = pattern(RANK, n).to(dtype)
    recv = filled(n, dtype)
    ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return mismatch(recv, pattern(prv, n))


def t_send_recv(n):
    if RANK > 1:
        return None  # only ranks 0 and 1 take part
    peer = 1 - RANK
    mine = pattern(RANK + 40, n).to(torch.float32)
    got = filled(n, torch.float32)
    if RANK == 0:
        dist.send(mine, 1)
        dist.recv(got, 1)
    else:
        dist.recv(got, 0)
        dist.send(mine, 0)
    return mismatch(got, pattern(peer + 40, n))


def t_self_p2p(n):
    send = pattern(RANK + 7, n).to(torch.float32)
    recv = filled(n, torch.float32)
    ops = [dist.P2POp(dist.isend, send, RANK), dist.P2POp(dist.irecv, recv, RANK)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return mismatch(recv, pattern(RANK + 7, n))


def t_barrier():
    """Rank 0 arrives 1 s late: everyone else must be held in the barrier."""
    torch.cuda.synchronize(DEV)
    if RANK == 0:
        time.sleep(1.0)
    t0 = time.monotonic()
    dist.barrier()
    torch.cuda.synchronize(DEV)
    waited = time.monotonic() - t0
    if RANK != 0 and waited < 0.5:
        return f"returned after {waited:.3f} s although rank 0 came 1 s late"
    return None


# ---- groups ----

def t_new_group(state):
    members = [0, 1]
    g = dist.new_group(ranks=members)  # every rank calls it, members or not
    state["sub"] = g
    if RANK not in members:
        return None
    if dist.get_world_size(g) != 2 or dist.get_rank(g) != members.index(RANK):
        return f"size {dist.get_world_size(g)} rank {dist.get_rank(g)}"
    x = small_vals(RANK, 1001, True).to(torch.int64)
    dist.all_reduce(x, group=g)
    bad = mismatch(x, reduced("sum", 1001, torch.int64, members))
    if bad:
        return f"all_reduce: {bad}"
    b = pattern(1, 77).to(torch.float32) if RANK == 1 else filled(77, torch.float32)
    dist.broadcast(b, src=1, group=g)  # src is a global rank
    bad = mismatch(b, pattern(1, 77))
    return f"broadcast from rank 1: {bad}" if bad else None


def t_split_group():
    if not hasattr(dist, "split_group"):
        raise Skip("torch.distributed.split_group is not in this PyTorch")
    parts = [[0, 1]] + ([list(range(2, WORLD))] if WORLD > 2 else [])
    g = dist.split_group(split_ranks=parts)
    mine = next(p for p in parts if RANK in p)
    if g is None:
        return "split_group returned None for a member"
    if dist.get_world_size(g) != len(mine):
        return f"group size {dist.get_world_size(g)}, want {len(mine)}"
    x = small_vals(RANK, 999, True).to(torch.int64)
    dist.all_reduce(x, group=g)
    bad = mismatch(x, reduced("sum", 999, torch.int64, mine))
    return f"all_reduce over {mine}: {bad}" if bad else None


# ---- objects ----

def obj_of(r):
    return {"rank": r, "items": list(range(r + 3)), "text": "weft" * (r + 1), "pair": (r, -r)}


def need_numpy():
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise Skip("numpy is not installed, and PyTorch's object collectives need it") from None


def t_all_gather_object():
    need_numpy()
    out = [None] * WORLD
    dist.all_gather_object(out, obj_of(RANK))
    want = [obj_of(r) for r in range(WORLD)]
    return None if out == want else f"got {out!r}"


def t_broadcast_object_list(src):
    need_numpy()
    objs = [obj_of(src), "second", 3.5] if RANK == src else [None, None, None]
    dist.broadcast_object_list(objs, src=src)
    want = [obj_of(src), "second", 3.5]
    return None if objs == want else f"got {objs!r}"


# ---- unsigned 32/64-bit (not every PyTorch maps them onto NCCL types) ----

def t_unsigned(dname_, op):
    dtype = getattr(torch, dname_, None)
    if dtype is None:
        raise Skip(f"torch.{dname_} does not exist in this PyTorch")
    try:
        x = small_vals(RANK, 1001, False).to(dtype)
    except Exception as e:
        raise Skip(f"cannot make {dname_} tensors on {DEV}: {first_line(e)}")
    try:
        dist.all_reduce(x, op=redop(op))
    except Exception as e:
        # ProcessGroupNCCL's own refusal of the dtype (before any NCCL call) is a skip; any
        # error from the NCCL library itself is a failure.
        if isinstance(e, TypeError) or "not supported for NCCL process group" in str(e):
            raise Skip(f"PyTorch refuses {dname_} on NCCL: {first_line(e)}")
        raise
    return mismatch(x, reduced(op, 1001, torch.uint8))  # uint8: the unsigned inputs (0..10)


def tally():
    """Sums every check's failure flag over the ranks; returns the global failure count."""
    n = len(results)
    cnt = torch.tensor([n, -n], dtype=torch.int64, device=DEV)
    dist.all_reduce(cnt, op=dist.ReduceOp.MAX)
    if int(cnt[0].item()) != n or -int(cnt[1].item()) != n:
        mine = torch.tensor([1 + sum(f for _, f, _ in results)], dtype=torch.int64, device=DEV)
        dist.all_reduce(mine)
        if RANK == 0:
            print(f"FAIL tally: ranks recorded different numbers of checks "
                  f"({-int(cnt[1].item())}..{int(cnt[0].item())})", flush=True)
        return int(mine.item()), 0, 0
    flags = torch.tensor([f for _, f, _ in results], dtype=torch.int32, device=DEV)
    if n:
        dist.all_reduce(flags)
    flags = flags.tolist()
    failed = passed = skipped = 0
    for (name, mine, skip), anywhere in zip(results, flags):
        if skip and not anywhere:
            skipped += 1
        elif anywhere:
            failed += 1
            if RANK == 0 and not mine:
                print(f"FAIL {name}: failed on {anywhere} other rank(s); see their logs", flush=True)
        else:
            passed += 1
    return failed, passed, skipped


def main():
    torch.cuda.set_device(DEV)
    dist.init_process_group("nccl", device_id=DEV, timeout=timedelta(seconds=120))
    assert dist.get_rank() == RANK and dist.get_world_size() == WORLD
    if RANK == 0:
        print(f"torch {torch.__version__}, world {WORLD}, all ranks on {DEV}, "
              f"torch.cuda.nccl.version() {torch.cuda.nccl.version()}", flush=True)

    for dtype in DTYPES:
        for op in ops_for(dtype):
            for n in SIZES:
                check(f"all_reduce_{op}_{dname(dtype)}_n{n}", t_all_reduce, op, dtype, n)
    check("all_reduce_sum_float32_n0", t_all_reduce, "sum", torch.float32, 0)
    check("all_reduce_async_x4", t_all_reduce_async, 4)

    for root in range(WORLD):
        for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
            for n in SIZES:
                check(f"broadcast_root{root}_{dname(dtype)}_n{n}", t_broadcast, root, dtype, n)
    for root in range(WORLD):
        for op, dtype in (("sum", torch.float32), ("sum", torch.int32), ("max", torch.bfloat16),
                          ("min", torch.int8)):
            for n in (7, BIG):
                check(f"reduce_root{root}_{op}_{dname(dtype)}_n{n}", t_reduce, root, op, dtype, n)

    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
                  torch.int64):
        for n in SIZES:
            check(f"all_gather_into_tensor_{dname(dtype)}_n{n}", t_all_gather_into_tensor, dtype, n)
    for dtype in (torch.float32, torch.int32):
        for n in SIZES:
            check(f"all_gather_list_{dname(dtype)}_n{n}", t_all_gather, dtype, n)
    for op, dtype in (("sum", torch.float32), ("sum", torch.bfloat16), ("sum", torch.int32),
                      ("max", torch.int8), ("min", torch.uint8), ("prod", torch.float64),
                      ("avg", torch.float32), ("avg", torch.bfloat16), ("premul", torch.float32),
                      ("premul", torch.float16)):
        for n in SIZES:
            check(f"reduce_scatter_tensor_{op}_{dname(dtype)}_n{n}", t_reduce_scatter_tensor,
                  op, dtype, n)

    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
        for n in (1, 7, 100003):
            check(f"all_to_all_single_even_{dname(dtype)}_n{n}", t_all_to_all_single_even,
                  dtype, n)
    for dtype in (torch.float32, torch.int8):
        for scale in (1, 4099):
            check(f"all_to_all_single_uneven_{dname(dtype)}_x{scale}", t_all_to_all_single_uneven,
                  dtype, scale)
    for dtype in (torch.float32, torch.int64):
        for scale in (1, 1001):
            check(f"all_to_all_list_{dname(dtype)}_x{scale}", t_all_to_all_list, dtype, scale)

    for dtype in (torch.float32, torch.int8):
        for n in (7, BIG):
            check(f"batch_isend_irecv_ring_{dname(dtype)}_n{n}", t_ring, dtype, n)
    if WORLD >= 2:
        for n in (7, BIG):
            check(f"send_recv_0_1_n{n}", t_send_recv, n)
    check("barrier", t_barrier)

    state = {}
    if WORLD >= 2:
        check(f"new_group_0_1_of_{WORLD}", t_new_group, state)
        check(f"split_group_of_{WORLD}", t_split_group)
    check("all_gather_object", t_all_gather_object)
    for src in range(WORLD):
        check(f"broadcast_object_list_src{src}", t_broadcast_object_list, src)

    # Last, as the likeliest to upset a process group: p2p to oneself, unsigned dtypes.
    for n in (7, BIG):
        check(f"batch_isend_irecv_self_n{n}", t_self_p2p, n)
    for name in ("uint32", "uint64"):
        for op in ("sum", "max"):
            check(f"all_reduce_{op}_{name}", t_unsigned, name, op)

    failed, passed, skipped = tally()
    if RANK == 0:
        print(f"torch_collectives: {passed} passed, {failed} failed, {skipped} skipped "
              f"(world {WORLD})", flush=True)
    try:
        dist.destroy_process_group()
    except Exception as e:
        print(f"destroy_process_group: {first_line(e)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        code = main()
    except Exception as e:  # setup or tally failed: nothing can be trusted
        print(f"FAIL torch_collectives: [rank {RANK}] {first_line(e)}", flush=True)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.exit(code)
