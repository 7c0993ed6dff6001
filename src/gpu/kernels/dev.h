/* What the host and the CUDA kernels share: the layout of each rank's peer-mapped region
 * (flags, then staging slots), the launch description (work items), and the error record
 * a kernel leaves in host-mapped memory. Plain C, included by .c and .cu files. */
#ifndef WEFT_DEV_H
#define WEFT_DEV_H

#include <stdint.h>

enum {
  WEFT_DEV_MAX_RANKS = 8,      /* peer slots of a rank; ranks of the all-peer algorithms */
  WEFT_DEV_COLL_CHANNELS = 64, /* channels 0..63: collectives */
  WEFT_DEV_P2P_CHANNELS = 32,  /* channels 64..95: send/recv, in WEFT_P2P_SETS equal sets */
  WEFT_DEV_P2P_MAX_SETS = 8,
  WEFT_DEV_MAX_CHANNELS = WEFT_DEV_COLL_CHANNELS + WEFT_DEV_P2P_CHANNELS,
  WEFT_DEV_DIRECT_CHANNELS = 128, /* channels of an operation on windows (alone in its launch) */
  WEFT_DEV_MAX_ITEMS = 16,        /* work items (group members) in one launch */
  WEFT_DEV_MAX_A2AV = 2,          /* alltoallv items in one launch */
  WEFT_DEV_THREADS = 512,
  WEFT_DEV_LL_CHANNELS = 128,     /* most blocks of the low-latency kernel */
  WEFT_DEV_LL_SLOT_BYTES = 32768, /* per channel, parity and source: 16 KiB of payload */
  WEFT_DEV_LL_MAX_BYTES = WEFT_DEV_LL_CHANNELS * WEFT_DEV_LL_SLOT_BYTES / 2,
  WEFT_DEV_LL128_CHANNELS = 128,   /* blocks of every 128-byte low-latency launch */
  WEFT_DEV_LL128_LINE_BYTES = 128, /* a line: 120 bytes of payload, then its flag */
  WEFT_DEV_LL128_DATA_BYTES = 120,
  WEFT_DEV_LL128_LINES = 576, /* lines per channel, parity and source on 2 ranks (/ (n-1) on n) */
  WEFT_DEV_LL128_STEP = 64,   /* lines a block moves in one step (ll128.cu) */
  WEFT_DEV_FLAG_STRIDE = 64,  /* bytes between flags: one writer per cache line */
  WEFT_DEV_MIN_UNIT_BYTES = 32768 /* shortest round a channel's share is cut into */
};

/* Region of rank r, mapped by every peer; [src] and [dst] are slots of r's table:
 *   ready[ch][src]  posted chunk count from src (written by src); after it in its line, the
 *                   bytes of chunk seq as a uint32 at WEFT_DEV_SIZE_OFF (what a proxy carries)
 *   done[ch][dst]   chunks of ours that dst has consumed (written by dst)
 *   din[ch][src]    direct operations src has entered on direct channel ch: src may be
 *                   written into or read (written by src, with its windows' offsets and the
 *                   size beside)
 *   dout[ch][src]   direct operations src has finished writing into us or reading from us
 *                   (written by src)
 *   stage[ch][src][stage]  chunk_bytes each, written by src, at src's stage_in index */
#define WEFT_DEV_READY_OFF(ch, peer)                                                               \
  ((uint64_t)((ch)*WEFT_DEV_MAX_RANKS + (peer)) * WEFT_DEV_FLAG_STRIDE)
/* Where the length of chunk seq lies beside its ready flag (ready_off); a proxy reads it after
 * the flag, so the words must outnumber the chunks a sender may post ahead: the stages. */
#define WEFT_DEV_SIZE_WORDS               14
#define WEFT_DEV_SIZE_OFF(ready_off, seq) ((ready_off) + 8 + 4 * ((seq) % WEFT_DEV_SIZE_WORDS))
#define WEFT_DEV_DONE_OFF(ch, peer)                                                                \
  (WEFT_DEV_READY_OFF(WEFT_DEV_MAX_CHANNELS, 0) + WEFT_DEV_READY_OFF(ch, peer))
#define WEFT_DEV_DIN_OFF(ch, peer)                                                                 \
  (2 * WEFT_DEV_READY_OFF(WEFT_DEV_MAX_CHANNELS, 0) + WEFT_DEV_READY_OFF(ch, peer))
#define WEFT_DEV_DOUT_OFF(ch, peer)                                                                \
  (WEFT_DEV_DIN_OFF(WEFT_DEV_DIRECT_CHANNELS, 0) + WEFT_DEV_READY_OFF(ch, peer))
#define WEFT_DEV_STAGE_OFF WEFT_DEV_DOUT_OFF(WEFT_DEV_DIRECT_CHANNELS, 0)

/* The peers a rank's kernels reach, by slot: arrays of the launch (region, inbox, the
 * counters) and the flags of a region are indexed by slot, not by rank. Up to
 * WEFT_DEV_MAX_RANKS ranks every rank is in the slot of its number (identity). Past that a
 * rank reaches its ring neighbours alone: slot 0 is rank - 1, 1 itself, 2 rank + 1, and only
 * the ring algorithms run (allreduce, reduce_scatter and allgather as rings, broadcast and
 * reduce as chains, send/recv between neighbours). Each table entry says where this rank
 * stands in the peer's own table, so that a rank writes its flags and chunks where the peer
 * looks for them (src/gpu/slots.c makes the tables; the proxy follows them too). */
typedef struct {
  int32_t rank[WEFT_DEV_MAX_RANKS];      /* slot -> rank */
  uint8_t flag_out[WEFT_DEV_MAX_RANKS];  /* our slot in that peer's table: where our flags lie in
                                            its region */
  uint8_t stage_in[WEFT_DEV_MAX_RANKS];  /* that peer's staging slots in our region */
  uint8_t stage_out[WEFT_DEV_MAX_RANKS]; /* ours in that peer's region */
  uint8_t nslots, self;
  uint8_t nsrc;     /* staging slots a region holds per channel: one per sending peer */
  uint8_t identity; /* slot == rank for every rank */
} weft_dev_slots_t;

#ifdef __CUDACC__
#define WEFT_DEV_HOST_DEVICE __host__ __device__
#else
#define WEFT_DEV_HOST_DEVICE
#endif

/* Where chunk seq on channel ch of the sender whose staging index is idx (stage_in) lies in
 * a region: staging exists for the communicator's coll_channels collective channels, then for
 * the send/recv sets, each with nsrc senders of `stages` slots (host, kernels and proxy). */
static inline WEFT_DEV_HOST_DEVICE uint64_t weft_dev_stage_off(int ch, int coll_channels, int nsrc,
                                                               int idx, uint32_t stages,
                                                               uint32_t chunk_bytes, uint64_t seq) {
  uint64_t sc = ch < WEFT_DEV_COLL_CHANNELS
                    ? (uint64_t)ch
                    : (uint64_t)(ch - WEFT_DEV_COLL_CHANNELS + coll_channels);
  uint64_t i = (sc * (uint64_t)nsrc + (uint64_t)idx) * stages + seq % stages;
  return WEFT_DEV_STAGE_OFF + i * chunk_bytes;
}

/* The slot of rank r, or -1 where this rank's kernels do not reach it (host and kernels). */
static inline WEFT_DEV_HOST_DEVICE int weft_dev_slot_of(const weft_dev_slots_t *s, int r) {
  for (int i = 0; i < s->nslots; i++)
    if (s->rank[i] == r) return i;
  return -1;
}

typedef enum {
  WEFT_DEV_ALLREDUCE_ONESHOT = 0,
  WEFT_DEV_ALLREDUCE_TWOSHOT,
  WEFT_DEV_REDUCE_SCATTER,
  WEFT_DEV_ALLGATHER,
  WEFT_DEV_BROADCAST,
  WEFT_DEV_REDUCE,
  WEFT_DEV_ALLTOALL,
  WEFT_DEV_ALLTOALLV,
  WEFT_DEV_SEND,
  WEFT_DEV_RECV,
  WEFT_DEV_KIND_COUNT
} weft_dev_kind_t;

/* An item runs on nblocks = channels x roles blocks. With one role a block does every step
 * of a round in turn (send, then receive or reduce, then gather); with two, receiving has
 * blocks of its own, so a channel's NVLink writes go on while its reductions run. The
 * blocks of one channel are adjacent (block = channel * roles + role), so a channel is
 * whole once its first block is resident. */
typedef struct {
  uint8_t kind, dtype, op;
  uint8_t roles;  /* 1, or 2 (send + gather | receive) */
  uint8_t direct; /* on windows: straight between the peers' buffers (weft_dev_launch_t.direct);
                     an allgather's or alltoall's second role copies our own block */
  uint8_t ring;   /* allreduce (two-shot's segments), reduce_scatter or allgather as a pipelined
                     ring: each chunk passes rank to rank + 1 (one role); broadcast and reduce
                     as a chain from the root round to it */
  uint8_t pad_[2];
  int16_t root;     /* broadcast/reduce root (a rank); send/recv peer (its slot) */
  int16_t a2av;     /* index into the launch's alltoallv table */
  uint16_t block0;  /* first block of this item */
  uint16_t nblocks; /* channels x roles */
  uint16_t chan0;   /* first channel */
  uint16_t pad2_;
  uint64_t count; /* elements: per rank block for rs/ag/a2a, whole buffer otherwise */
  const void *send;
  void *recv;
} weft_dev_item_t;

typedef struct {
  uint64_t sendcounts[WEFT_DEV_MAX_RANKS], sdispls[WEFT_DEV_MAX_RANKS];
  uint64_t recvcounts[WEFT_DEV_MAX_RANKS], rdispls[WEFT_DEV_MAX_RANKS];
} weft_dev_a2av_t;

/* What a kernel found wrong; code 0 while none. First writer wins. */
typedef struct {
  uint32_t code; /* WEFT_DEV_ERR_* */
  int32_t peer;
  int32_t channel;
  uint32_t kind;
  /* a general kernel's timeout: which flag of its own region it waited on (its offset there),
   * the count it awaited and the last it read (0, 0, 0 where not known): a flag short of the
   * operation's first step says the peer did none of it */
  uint64_t where, want, seen;
  /* A wait note (weft_dev_launch_t.waiting): how long the wait had lasted when a waiting block
   * last wrote it, written after the fields above; the host zeroes it once it said so. */
  uint64_t waited_ns;
} weft_dev_error_t;

/* weft_dev_error_t.where of a wait on the in-place rounds' progress (weft_dev_launch_t.progress):
 * the block waited for its own rank's sender block, not for a flag of the region. */
#define WEFT_DEV_WHERE_PROGRESS UINT64_MAX
/* ... of an MoE kernel's wait (src/moe/win.cuh) on a peer's record of the running round, or on
 * its acks of the last one. */
#define WEFT_DEV_WHERE_MOE_RECORDS (UINT64_MAX - 1)
#define WEFT_DEV_WHERE_MOE_ACKS    (UINT64_MAX - 2)

/* MISMATCH: a peer's buffer of a direct operation lies in another window or at another offset,
 * or holds another size, than ours (it was neither read nor written). */
enum {
  WEFT_DEV_ERR_NONE = 0,
  WEFT_DEV_ERR_TIMEOUT = 1,
  WEFT_DEV_ERR_ABORTED = 2,
  WEFT_DEV_ERR_MISMATCH = 3
};

typedef struct {
  char *region[WEFT_DEV_MAX_RANKS]; /* each slot's region as mapped here (own included) */
  /* This rank's region as slot p writes into it: region[self], or for p on another host the
   * host memory the proxy fills with what p sent (and where it raises p's flags) */
  char *inbox[WEFT_DEV_MAX_RANKS];
  weft_dev_slots_t slots;
  uint64_t *counters; /* private: [ch][slot][2] sent, received */
  uint64_t *progress; /* private: per collective channel, rounds its sender finished in this
                         launch (in-place items), one per WEFT_DEV_FLAG_STRIDE bytes */
  uint64_t *dseq;     /* private: per direct channel, direct operations so far */
  volatile int32_t *abort_flag; /* host-mapped; nonzero: give up */
  weft_dev_error_t *error;      /* host-mapped */
  /* host-mapped: a wait past report_ns (WEFT_WAIT_REPORT_S; 0: never) notes itself here, again
   * and again, for the host to say at WARN */
  weft_dev_error_t *waiting;
  int32_t rank, nranks; /* the communicator's (slots.self is this rank's slot) */
  uint32_t chunk_bytes, stages;
  uint32_t rounds, pad_; /* WEFT_P2P_ROUNDS: a channel's share in this many rounds (or more) */
  uint64_t timeout_ns, report_ns;
  int32_t nitems;
  int32_t coll_channels; /* collective channels with staging; send/recv sets follow them */
  weft_dev_item_t items[WEFT_DEV_MAX_ITEMS];
  weft_dev_a2av_t a2av[WEFT_DEV_MAX_A2AV];
  /* The direct item's recvbuf (reduce_scatter: sendbuf) on every rank, as mapped here, an
   * allreduce's sendbuf too, and what each rank checks of its peers' before touching them:
   * (window serial << 48 | offset in the window) of both, and bytes. */
  char *direct[WEFT_DEV_MAX_RANKS], *direct_send[WEFT_DEV_MAX_RANKS];
  uint64_t direct_where, direct_where_send, direct_bytes;
} weft_dev_launch_t;

/* The low-latency kernels (allreduce, allgather, alltoall, reduce_scatter from small to
 * large; broadcast and reduce small): payload travels with a flag in the same store, so the
 * receiver polls the data itself, with no fence or flag round trip. The small one sends every
 * 8 bytes with two copies of it in one 16-byte store; the 128-byte one (over NVLink only,
 * where a warp's 128-byte store arrives whole) sends 120 bytes and a flag in each 128-byte
 * line. Parity buffers alternate between operations. */
typedef struct {
  char *region[WEFT_DEV_MAX_RANKS];
  /* where the lines of rank p land (weft_dev_launch_t.inbox): region[rank], or for p on
   * another host the host memory its proxy fills */
  char *inbox[WEFT_DEV_MAX_RANKS];
  /* bit p: rank p is on another host, and a proxy carries what is written into its region
   * (a mirror here): after a block's lines it posts their count at post_off
   * (WEFT_DEV_LL_POST_OFF), for the proxy to follow */
  uint32_t remote;
  uint32_t pad_;
  uint64_t post_off;
  uint64_t *seq;        /* private: per LL channel, operations so far (and ll.cu's owed mask) */
  uint64_t *seq128;     /* private: per LL128 channel, likewise (every launch runs all of them) */
  uint64_t ll128_off;   /* where the LL128 buffers start in each region */
  uint32_t ll128_lines; /* lines of each LL128 slot */
  volatile int32_t *abort_flag;
  weft_dev_error_t *error, *waiting; /* waiting: as weft_dev_launch_t's */
  uint64_t ll_off;                   /* where the LL buffers start in each region */
  uint64_t timeout_ns, report_ns;
  const void *send;
  void *recv;
  uint64_t count;       /* elements of each peer's payload */
  uint32_t block_bytes; /* payload per block, a multiple of 8, at most half a slot */
  int32_t rank, nranks;
  int32_t root; /* broadcast's and reduce's (the small kernel only) */
  uint8_t dtype, op;
  uint8_t kind; /* WEFT_DEV_ALLREDUCE_ONESHOT, _ALLGATHER, _ALLTOALL, _REDUCE_SCATTER, and for
                   the small kernel _BROADCAST and _REDUCE */
} weft_dev_ll_t;

/* What a direct item (weft_dev_item_t.direct) records as weft_dev_error_t.kind, or'd in. */
#define WEFT_DEV_DIRECT_KIND 0x100u

/* ... and a ring item (weft_dev_item_t.ring). */
#define WEFT_DEV_RING_KIND 0x200u

/* ... and the MoE low-latency kernels (src/moe/ll.cu), or'd with 1 (dispatch) or 2 (combine). */
#define WEFT_DEV_MOE_KIND 0x400u

/* What a low-latency kernel records as weft_dev_error_t.kind. */
#define WEFT_DEV_LL_KIND(k) (WEFT_DEV_KIND_COUNT + (k))

/* ... and a 128-byte low-latency kernel. */
#define WEFT_DEV_LL128_KIND(k) (2 * WEFT_DEV_KIND_COUNT + (k))

#define WEFT_DEV_LL128_OFF(ch, parity, slot, nranks, lines)                                        \
  ((((uint64_t)(ch)*2 + (parity)) * (uint64_t)((nranks)-1) + (slot)) *                             \
   (uint64_t)(lines)*WEFT_DEV_LL128_LINE_BYTES)

/* After the lines: the credit word each receiver keeps in a sender's region, per channel,
 * warp and receiver (see ll128.cu). */
#define WEFT_DEV_LL128_CREDIT_OFF(ch, warp, slot, nranks, lines)                                   \
  (WEFT_DEV_LL128_OFF(WEFT_DEV_LL128_CHANNELS, 0, 0, nranks, lines) +                              \
   (((uint64_t)(ch) * (WEFT_DEV_THREADS / 32) + (warp)) * (uint64_t)((nranks)-1) + (slot)) * 8)

#define WEFT_DEV_LL_OFF(ch, parity, slot, nranks)                                                  \
  ((((uint64_t)(ch)*2 + (parity)) * (uint64_t)((nranks)-1) + (slot)) * WEFT_DEV_LL_SLOT_BYTES)

/* Across hosts, what a block of the small kernel wrote into a remote rank's region (a mirror):
 * word 0 the operation's seq (written last), word 1 its lines, per channel, parity and sender,
 * one flag line each, from weft_dev_ll_t.post_off. The proxy sends the lines once seq moves. */
#define WEFT_DEV_LL_POST_OFF(ch, parity, slot, nranks)                                             \
  ((((uint64_t)(ch)*2 + (parity)) * (uint64_t)((nranks)-1) + (slot)) * WEFT_DEV_FLAG_STRIDE)

#ifdef __cplusplus
extern "C" {
#endif
int weft_dev_launch_ll(const weft_dev_ll_t *l, int nblocks, void *stream);
/* The 128-byte low-latency kernel, on WEFT_DEV_LL128_CHANNELS blocks. */
int weft_dev_launch_ll128(const weft_dev_ll_t *l, void *stream);
/* Launches one kernel running all items on stream; returns a cudaError_t as int. */
int weft_dev_launch(const weft_dev_launch_t *l, int nblocks, void *stream);
/* Blocks of the general kernel, and of the low-latency one, that one SM keeps resident (CUDA's
 * occupancy; 1 where CUDA cannot say). */
int weft_dev_occupancy(void);
int weft_dev_occupancy_ll(void);
/* cudaGetErrorString of such a code. */
const char *weft_dev_error_string(int code);
#ifdef __cplusplus
}
#endif

#endif
