#!/usr/bin/env python3
"""A rank SIGKILLed in the middle of a PyTorch job: the survivor must learn of it in bounded time.

Two ranks with torchrun's environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK),
both on cuda:0 (or WEFT_TORCH_DEVICE), a 30 s process-group timeout; the driver
(scripts/gpu/nccl_torch.sh) sets TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (a failed collective takes
the process down) and WEFT_KILL_FILE. Both ranks run all_reduce in lock-step and check every
result. After KILL_AT (20) good iterations rank 1 writes its time.time() to WEFT_KILL_FILE
(atomically, then prints "KILL ...") and SIGKILLs itself. Rank 0 goes on issuing all_reduces
and waits on each with work.wait(timeout) -- which polls the work and raises when the
collective fails, whether NCCL (weft) reports an error or the wait times out.

What counts as pass (exactly):
  (a) rank 0 prints "PASS kill: error after X s: <first line of the error>" -- a collective
      raised within 90 s of the kill time read from WEFT_KILL_FILE -- and exits 0; or
  (b) rank 0 prints no verdict because PyTorch's watchdog tore the process down (SIGABRT
      after "...taking the entire process down", or a timeout/NCCL error report); the driver
      then passes it when rank 0 exited nonzero by itself (not the driver's `timeout`), its
      log shows the watchdog's or NCCL's error message, and it ended within 90 s of the kill
      time. The driver also requires rank 1 to have printed "KILL" and died of SIGKILL.
Fails:
  * "FAIL kill: ..." from rank 0: an all_reduce issued after the kill completed without an
    error (its value cannot be right: rank 1 never contributed), or no error within 90 s
    (a watchdog thread in this script prints that and exits 1 even when the main thread is
    stuck inside a CUDA or NCCL call), or an error before the kill, or rank 1 never killed
    itself (nothing in WEFT_KILL_FILE 180 s after start);
  * rank 0 killed by the driver's `timeout`, or rank 1 not dying as planned.
"""
import os
import signal
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "2"))
DEV = torch.device(os.environ.get("WEFT_TORCH_DEVICE", "cuda:0"))
if DEV.index is None:  # "cuda" alone: GPU 0
    DEV = torch.device(DEV.type, 0)
KILL_AT = 20
BOUND_S = 90.0  # the error must come within this many seconds of the kill
NO_KILL_S = 180.0  # rank 1 must have killed itself this long after rank 0 started
KILL_FILE = os.environ.get("WEFT_KILL_FILE") or (
    f"/tmp/weft_torch_kill.{os.environ.get('MASTER_PORT', 'x')}")
N = 4096


def say(line):
    print(line, flush=True)
    sys.stderr.flush()


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:400]


def kill_time(wait_s=0.0):
    """Rank 1's kill time from KILL_FILE, or None (waits up to wait_s for it to appear)."""
    end = time.time() + wait_s
    while True:
        try:
            with open(KILL_FILE) as f:
                return float(f.read().strip())
        except (OSError, ValueError):
            if time.time() >= end:
                return None
            time.sleep(0.05)


def watchdog(start):
    """Rank 0's deadline, independent of the main thread (which may be stuck in a C call)."""
    while True:
        time.sleep(0.25)
        now = time.time()
        k = kill_time()
        if k is not None and now > k + BOUND_S:
            say(f"FAIL kill: no error within {BOUND_S:.0f} s of rank 1's death")
            os._exit(1)
        if k is None and now > start + NO_KILL_S:
            say(f"FAIL kill: rank 1 did not kill itself within {NO_KILL_S:.0f} s")
            os._exit(1)


def expected(it):
    return float(sum((r + 1) * (it + 1) for r in range(WORLD)))


def main():
    torch.cuda.set_device(DEV)
    dist.init_process_group("nccl", device_id=DEV, timeout=timedelta(seconds=30))
    if RANK == 0:
        try:
            os.unlink(KILL_FILE)  # a stale file from an earlier run would start the clock
        except OSError:
            pass
    dist.barrier()
    start = time.time()
    if RANK == 0:
        say(f"torch {torch.__version__}, world {WORLD} on {DEV}, "
            f"TORCH_NCCL_ASYNC_ERROR_HANDLING={os.environ.get('TORCH_NCCL_ASYNC_ERROR_HANDLING')}")
        threading.Thread(target=watchdog, args=(start,), daemon=True).start()
    it = 0
    while True:
        if RANK == 1 and it == KILL_AT:
            tmp = KILL_FILE + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{time.time():.6f}\n")
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, KILL_FILE)
            say(f"KILL rank 1 after {KILL_AT} all_reduces: SIGKILL to pid {os.getpid()}")
            os.kill(os.getpid(), signal.SIGKILL)
        t = torch.full((N,), float((RANK + 1) * (it + 1)), device=DEV)
        try:
            work = dist.all_reduce(t, async_op=True)
            # A timeout makes wait() block this thread until the work completes or fails, and
            # raise on failure (without one it would only order the streams).
            work.wait(timedelta(seconds=60))
            got = t[0].item()
            wrong = int((t != expected(it)).sum().item())
        except Exception as e:
            when = time.time()
            if RANK != 0:
                say(f"rank {RANK}: error at iteration {it}: {first_line(e)}")
                os._exit(1)
            k = kill_time(wait_s=5.0)
            if k is None or when < k:
                say(f"FAIL kill: error at iteration {it} before rank 1 was killed: {first_line(e)}")
                os._exit(1)
            dt = when - k
            verdict = "PASS" if dt <= BOUND_S else "FAIL"
            say(f"{verdict} kill: error after {dt:.1f} s: {first_line(e)}")
            os._exit(0 if verdict == "PASS" else 1)
        if it >= KILL_AT:
            say(f"FAIL kill: all_reduce {it}, issued after rank 1's death, completed without an "
                f"error (value {got}, want {expected(it)}; {wrong} of {N} elements differ)")
            os._exit(1)
        if wrong:
            say(f"FAIL kill: [rank {RANK}] all_reduce {it} before the kill: {wrong} of {N} "
                f"elements wrong (first {got}, want {expected(it)})")
            os._exit(1)
        it += 1
        time.sleep(0.02)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        say(f"FAIL kill: [rank {RANK}] {first_line(e)}")
        os._exit(1)
