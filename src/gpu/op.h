/* One description of a device operation: collective x algorithm x protocol (and whether it
 * runs straight between the peers' window buffers). The planner, the choice of kernel and the
 * error messages speak it; op.c alone maps it to and from the kernels' encoding (dev.h's
 * kinds, and the flags a kernel's error report carries), which stays as the kernels read it.
 * No CUDA here: the unit tests run it anywhere. */
#ifndef WEFT_DEV_OP_H
#define WEFT_DEV_OP_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"

typedef enum {
  WEFT_PROTO_SIMPLE = 0, /* the general kernel: staging slots, chunks and flags */
  WEFT_PROTO_LL,         /* low latency: 16-byte packets of 8 bytes of data and a flag */
  WEFT_PROTO_LL128,      /* 128-byte lines with a flag in each (NVLink only) */
  WEFT_PROTO_COUNT
} weft_proto_t;

typedef struct {
  weft_coll_t coll;
  /* ONESHOT or TWOSHOT (allreduce), RING (allreduce on two-shot's segments, reduce_scatter,
   * allgather), else DIRECT: every rank exchanges with every peer at once */
  weft_algo_t algo;
  weft_proto_t proto;
  int windows; /* between the peers' registered buffers (weft_dev_item_t.direct) */
  int moe;     /* 1, 2: MoE dispatch or combine in low-latency mode (src/moe/ll.cu) */
} weft_dev_op_t;

/* What t (tuned: t->algo is set) runs as under proto. */
weft_dev_op_t weft_dev_op_of(const weft_task_t *t, weft_proto_t proto);
/* The kernels' kind for op (weft_dev_kind_t), and whether its item runs as a ring. */
int weft_dev_op_kind(weft_dev_op_t op);
int weft_dev_op_ring(weft_dev_op_t op);
/* The operation a kernel's error report names (weft_dev_error_t.kind). */
weft_dev_op_t weft_dev_op_from_report(uint32_t kind);
/* "ring allreduce", "one-shot allreduce", "alltoall": the operation as messages name it. */
const char *weft_dev_op_name(weft_dev_op_t op);
/* "", "low-latency " or "128-byte low-latency ": the kernel that runs the protocol. */
const char *weft_dev_proto_prefix(weft_proto_t proto);

#endif
