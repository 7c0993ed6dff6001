/* The table of every WEFT_* variable (collbench --params prints it). docs/parameters.md
 * documents the same entries by hand (test_api checks that it names each one); keep the help
 * text short and true. */
#include "param.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

static const struct {
  const char *name, *dflt, *help;
} params[] = {
    {"WEFT_DEBUG", "", "log level: WARN, INFO or TRACE (default: silent)"},
    {"WEFT_DEBUG_SUBSYS", "ALL", "log filter: comma list of INIT,BOOT,NET,SHM,COLL,TUNE,ALL"},
    {"WEFT_DEBUG_FILE", "", "log to this file instead of stderr; %h = host, %p = pid"},
    {"WEFT_TIMEOUT_MS", "300000", "timeout of every blocking wait (bootstrap, connect, each op)"},
    {"WEFT_HEARTBEAT_MS", "20000",
     "a local peer that has not run for this long is stopped or frozen (0: off)"},
    {"WEFT_TRANSPORT", "auto", "force a transport between all ranks: auto, shm or tcp"},
    {"WEFT_ALGO", "auto",
     "force an algorithm: auto, ring, rhd, tree, direct, pairwise, chain (host); auto, "
     "oneshot, twoshot, ring (device allreduce; ring and direct also device reduce_scatter and "
     "allgather). Collectives without it keep the tuner's choice; an unknown name, or one that "
     "cannot serve the call (rhd for reduce_scatter on 3 ranks), fails the call"},
    {"WEFT_CHUNK_BYTES", "0", "pipeline chunk size in bytes (0: the tuner picks)"},
    {"WEFT_SHM_RING_BYTES", "262144", "bytes of each shared-memory ring (one per local pair)"},
    {"WEFT_TCP_FRAME_BYTES", "524288", "largest TCP frame payload; larger frames are refused"},
    {"WEFT_TCP_SOCKETS", "0", "sockets per pair of ranks, 1-8 (0: 2 between hosts, 1 on one host)"},
    {"WEFT_TCP_BUF_BYTES", "4194304", "bytes of each TCP receive staging ring"},
    {"WEFT_SOCKET_IFADDR", "", "IPv4 address to bind listeners to (default: all interfaces)"},
    {"WEFT_SOCKET_IFNAME", "", "network interface whose IPv4 address weft uses (e.g. eth0)"},
    {"WEFT_P2P_CHUNK_BYTES", "262144",
     "device: bytes of each staging slot (one chunk), multiple of 16"},
    {"WEFT_P2P_STAGES", "2", "device: staging slots per channel and peer (2-16)"},
    {"WEFT_P2P_CHANNELS", "64", "device: most blocks (channels) one collective uses, 1-64"},
    {"WEFT_P2P_BLOCK_BYTES", "8192", "device: bytes per block below which fewer blocks run"},
    {"WEFT_P2P_SPLIT", "1",
     "device: 1 gives sending, reducing and gathering blocks of their own; 0: one block does all"},
    {"WEFT_P2P_ROUNDS", "4",
     "device reductions: a channel's share in this many rounds (not under 32 KiB) to pipeline"},
    {"WEFT_LL_MAX_BYTES", "0",
     "device: low-latency kernel up to this many bytes per peer (0: 1 MiB, its most)"},
    {"WEFT_LL128_MAX_BYTES", "auto",
     "device over NVLink: past the low-latency kernel, its 128-byte-line kernel up to this many "
     "bytes per peer (auto: on 2 ranks 16 MiB for copies and 64 MiB for reductions, on 4 "
     "ranks 1 MiB and 8 MiB, else never; 0: never)"},
    {"WEFT_LL_BLOCK_BYTES", "4096",
     "device: payload per block of the low-latency allreduce (16-byte multiple, 512-16384)"},
    {"WEFT_ONESHOT_MAX_BYTES", "0", "device allreduce: one-shot up to this size (0: the tuner's)"},
    {"WEFT_P2P_SETS", "2",
     "device send/recv: a group holds this many messages per peer and direction (1, 2, 4, 8); "
     "each gets 32 / N channels"},
    {"WEFT_CE_MIN_BYTES", "0",
     "device allgather/alltoall on registered windows: copy engines from this many bytes per "
     "peer block, allreduce from segments of twice this (0: never; auto: 64 MiB on 2 ranks on "
     "2 GPUs); off by default: their path cannot check that the ranks' window offsets agree"},
    {"WEFT_DIRECT_MIN_BYTES", "1",
     "device allgather/alltoall/reduce_scatter on registered windows: kernels write into the "
     "peers' recvbufs (read their sendbufs) from this many bytes per block where the "
     "low-latency kernel does not run (0: never)"},
    {"WEFT_DIRECT_CHANNELS", "128",
     "device reduce_scatter and allreduce on windows: most channels (one block each), 1-128"},
    {"WEFT_DIRECT_READ_MAX_BYTES", "67108864",
     "device reduce_scatter on registered windows: reads the peers' sendbufs up to this many "
     "bytes per block, stages past it"},
    {"WEFT_P2P_DISABLE", "0",
     "device: 1 stages through host shared memory even where GPUs could map each other"},
    {"WEFT_CHECK", "0", "1: compare every rank's call before each collective (debugging aid)"},
    {"WEFT_SPIN", "2000", "progress-loop spins before a waiting rank sleeps"},
    {"WEFT_HOSTID", "", "override the host identity (fake several hosts on one machine)"},
    {"WEFT_ROOT", "", "host:port of rank 0 for weft_comm_init_env"},
    {"WEFT_RANK", "", "this process's rank for weft_comm_init_env"},
    {"WEFT_NRANKS", "", "number of ranks for weft_comm_init_env"},
};

#define NPARAMS ((int)(sizeof params / sizeof params[0]))

static int find(const char *name) {
  for (int i = 0; i < NPARAMS; i++)
    if (strcmp(params[i].name, name) == 0) return i;
  return -1;
}

const char *weft_param_str(const char *name) {
  int i = find(name);
  if (i < 0) return "";
  const char *v = getenv(name);
  return v ? v : params[i].dflt;
}

int64_t weft_param_int(const char *name) {
  const char *s = weft_param_str(name);
  char *end = NULL;
  long long v = strtoll(s, &end, 0);
  if (end == s || *end != 0) {
    int i = find(name);
    WEFT_WARN(WEFT_SUB_INIT, "%s=%s is not an integer; using %s", name, s,
              i >= 0 ? params[i].dflt : "0");
    v = i >= 0 ? strtoll(params[i].dflt, NULL, 0) : 0;
  }
  return (int64_t)v;
}

int weft_param_count(void) { return NPARAMS; }

weft_result_t weft_param_info(int index, const char **name, const char **value,
                              const char **default_value, const char **help) {
  if (index < 0 || index >= NPARAMS)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "param index %d not in [0, %d)", index, NPARAMS);
  if (name) *name = params[index].name;
  if (value) *value = weft_param_str(params[index].name);
  if (default_value) *default_value = params[index].dflt;
  if (help) *help = params[index].help;
  return WEFT_SUCCESS;
}
