/* NCCL as collbench's peer on GPUs: libnccl.so.2 is loaded at run time (dlopen), so weft
 * neither builds nor links against it; its communicator is made from an id broadcast over
 * weft's host communicator. */
#ifndef WEFT_BENCH_NCCL_PEER_H
#define WEFT_BENCH_NCCL_PEER_H

#include "bench.h"

/* Loads NCCL and makes a communicator of all ranks; NULL (with a message) on failure. */
void *bench_nccl_open(weft_comm_t ctl, int rank, int nranks, char *version, size_t len);
void bench_nccl_close(void *peer);
/* ncclCommRegister of buf (collbench --window: NCCL gets registered buffers too); -1 with
 * the reason in why where this NCCL lacks it or refuses. */
int bench_nccl_register(void *peer, void *buf, size_t bytes, void **handle, char *why, size_t len);
void bench_nccl_deregister(void *peer, void *handle);
/* One call of coll through NCCL on o->stream; alltoall is a group of sends and receives,
 * as in nccl-tests, and so is alltoallv (NCCL has none), on the same blocks as weft's. */
weft_result_t bench_nccl_call(void *peer, int coll, const void *s, void *r, size_t count,
                              const bench_opts_t *o, int rank, int nranks);

#endif
