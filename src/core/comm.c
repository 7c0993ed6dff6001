/* Communicator lifecycle: unique ids, init (from an id or the environment), split, abort
 * and destroy. Init is: bootstrap ring, host identities (who shares memory with whom), each
 * transport's collective setup, then the setup of the engine that serves the config. */
#include "comm.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "param.h"
#include "socket.h"
#include "topo.h"

weft_result_t weft_get_unique_id(weft_unique_id_t *id) {
  if (!id) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_get_unique_id: id is NULL");
  int fd = -1;
  weft_id_body_t body = {.magic = weft_random_u64(), .version = WEFT_WIRE_VERSION};
  CHECK(weft_sock_listen_public(0, &fd, &body.root));
  CHECK(weft_bootstrap_root_start(fd, body.magic, 0));
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &body, sizeof body);
  return WEFT_SUCCESS;
}

void weft_comm_fail(weft_comm_t c, weft_result_t err, const char *msg, uint64_t seq) {
  pthread_mutex_lock(&c->mu);
  int first = c->async_error == WEFT_SUCCESS;
  if (first) {
    c->async_error = err;
    snprintf(c->error, sizeof c->error, "%s", msg);
  }
  pthread_mutex_unlock(&c->mu);
  if (first) weft_fail_notify(c, err, seq ? seq : 1, msg);
}

weft_result_t weft_comm_agree(weft_comm_t c, weft_result_t mine, const char *what) {
  return weft_bootstrap_agree(c->boot, mine, "weft_comm_init", what);
}

static void *heartbeat_main(void *arg) {
  weft_comm_t c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->hb_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&c->hb_cv, &c->mu, &ts);
    for (int t = 0; t < WEFT_MAX_TRANSPORTS; t++)
      if (c->tr[t] && c->tr_state[t] && c->tr[t]->beat) c->tr[t]->beat(c->tr_state[t]);
    if (c->engine) { /* failures no host thread waits for (a kernel's) */
      pthread_mutex_unlock(&c->mu);
      c->engine->watch(c);
      pthread_mutex_lock(&c->mu);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void heartbeat_stop(weft_comm_t c) {
  if (!c->hb_started) return;
  pthread_mutex_lock(&c->mu);
  c->hb_stop = 1;
  pthread_cond_broadcast(&c->hb_cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->hb_thread, NULL);
  c->hb_started = 0;
}

static void comm_free(weft_comm_t c) {
  heartbeat_stop(c);
  if (c->engine) c->engine->free(c);
  weft_bootstrap_bye(c->boot); /* our sockets close next: that is no failure */
  for (int t = 0; t < WEFT_MAX_TRANSPORTS; t++)
    if (c->tr[t] && c->tr_state[t]) c->tr[t]->teardown(c->tr_state[t]);
  weft_bootstrap_free(c->boot);
  if (c->wake_fd >= 0) close(c->wake_fd);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->hb_cv);
  free(c->local_rank);
  free(c->host_labels);
  free(c->peer_tr);
  free(c);
}

static weft_transport_init_t transport_init(weft_comm_t c, const uint8_t *use, int eager) {
  return (weft_transport_init_t){.boot = c->boot,
                                 .rank = c->rank,
                                 .nranks = c->nranks,
                                 .local_rank = c->local_rank,
                                 .nlocal = c->nlocal,
                                 .host_labels = c->host_labels,
                                 .magic = c->magic,
                                 .abort_flag = &c->aborted,
                                 .wake_fd = c->wake_fd,
                                 .use = use,
                                 .eager = eager};
}

int weft_comm_transport_index(const struct weft_comm *c, const char *name) {
  for (int t = 0; t < WEFT_MAX_TRANSPORTS; t++)
    if (c->tr[t] && c->tr_state[t] && !strcmp(c->tr[t]->name, name)) return t;
  return -1;
}

weft_result_t weft_comm_transport_again(weft_comm_t c, int t, const uint8_t *use, int wake_fd,
                                        void **state) {
  /* a proxy's heartbeat and failure frames need every stream from the start */
  weft_transport_init_t in = transport_init(c, use, 1);
  if (wake_fd >= 0) in.wake_fd = wake_fd;
  return c->tr[t]->setup(&in, state);
}

/* Each transport that some pair of ranks takes sets up collectively: every rank knows which
 * from the same table, so the setups agree. */
static weft_result_t setup_transports(weft_comm_t c, const int *host_of) {
  uint8_t *use = calloc((size_t)c->nranks, 1), used[WEFT_MAX_TRANSPORTS];
  if (!use) return weft_set_error(WEFT_ERR_NO_MEMORY, "comm init: out of memory");
  weft_result_t rc = weft_transport_select(
      c->rank, c->nranks, host_of, weft_param_get_str(WEFT_PARAM_TRANSPORT), c->peer_tr, used);
  weft_transport_init_t in = transport_init(c, use, 0);
  for (int t = 0; t < weft_ntransports && rc == WEFT_SUCCESS; t++) {
    if (!used[t]) continue;
    for (int p = 0; p < c->nranks; p++)
      use[p] = c->peer_tr[p] == t;
    c->tr[t] = weft_transports[t];
    rc = c->tr[t]->setup(&in, &c->tr_state[t]);
  }
  free(use);
  return rc;
}

const char *weft_comm_host(const struct weft_comm *c, int r) {
  return c->host_labels && r >= 0 && r < c->nranks
             ? c->host_labels + (size_t)r * WEFT_HOST_LABEL_BYTES
             : "?";
}

static weft_result_t comm_setup(weft_comm_t c, const weft_id_body_t *id) {
  weft_result_t rc = WEFT_SUCCESS;
  char(*hosts)[WEFT_HOSTID_BYTES] = NULL;
  int *host_of = NULL;
  CHECK_GOTO(weft_bootstrap_init(id, c->rank, c->nranks, c->timeout_ms, &c->aborted, &c->boot), rc,
             out);
  c->magic = c->boot->magic;
  /* every WEFT_* variable read from here on has passed its rule, on every rank */
  CHECK_GOTO(weft_comm_agree(c, weft_params_check(), "refused its WEFT_* settings"), rc, out);
  hosts = calloc((size_t)c->nranks, WEFT_HOSTID_BYTES);
  host_of = calloc((size_t)c->nranks, sizeof *host_of);
  c->local_rank = malloc(sizeof(int) * (size_t)c->nranks);
  c->host_labels = calloc((size_t)c->nranks, WEFT_HOST_LABEL_BYTES);
  c->peer_tr = calloc((size_t)c->nranks, 1);
  if (!hosts || !host_of || !c->local_rank || !c->host_labels || !c->peer_tr)
    ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "comm init: out of memory");
  weft_topo_host_identity(hosts[c->rank]);
  CHECK_GOTO(weft_bootstrap_allgather(c->boot, hosts, WEFT_HOSTID_BYTES), rc, out);
  c->nlocal = weft_topo_local_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, c->nranks, c->rank,
                                    c->local_rank, host_of);
  for (int r = 0; r < c->nranks; r++)
    weft_topo_host_label(hosts[r], c->host_labels + (size_t)r * WEFT_HOST_LABEL_BYTES);
  CHECK_GOTO(setup_transports(c, host_of), rc, out);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  c->spin = (int)weft_param_get_int(WEFT_PARAM_SPIN);
  /* More ranks on this machine than cores (fake hosts included): a waiting rank yields its
   * core while it spins, since the peer it waits for may be the one that needs it (4 ranks
   * on 2 cores: 2-4x faster than pausing, and than sleeping early; 4 fake hosts of one rank
   * there took 2 ms an allreduce of 8 B while each counted only its own host). */
  c->yield = cpus > 0 && weft_topo_machine_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, c->nranks,
                                                 c->rank) > cpus;
  if (c->spin < 1) c->spin = 1;
  char names[64] = "";
  for (int t = 0; t < weft_ntransports; t++)
    for (int p = 0; p < c->nranks; p++)
      if (p != c->rank && c->peer_tr[p] == t) {
        size_t n = strlen(names);
        snprintf(names + n, sizeof names - n, "%s%s", n ? "+" : "", weft_transports[t]->name);
        break;
      }
  WEFT_INFO(WEFT_SUB_INIT, "rank %d/%d ready: %d on this host, peers over %s, spin %d%s", c->rank,
            c->nranks, c->nlocal, names[0] ? names : "nothing", c->spin,
            c->yield ? " (yielding)" : "");
out:
  free(hosts);
  free(host_of);
  return rc;
}

static weft_result_t comm_create(weft_comm_t *comm, int nranks, const weft_id_body_t *id, int rank,
                                 const weft_config_t *config) {
  if (!comm) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_init: comm is NULL");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_init: rank %d of %d ranks is invalid",
                          rank, nranks);
  if (nranks > WEFT_BOOT_MAX_RANKS)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_init: %d ranks; weft takes at most %d",
                          nranks, WEFT_BOOT_MAX_RANKS);
  if (config && config->size != sizeof(weft_config_t))
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_comm_init: config->size is %zu, expected %zu (start from "
                          "WEFT_CONFIG_INIT)",
                          config->size, sizeof(weft_config_t));
  /* weft's own threads never read the environment: its settings are read on the caller's
   * thread, here and when operations are issued (the logging ones once, right now). */
  weft_log_enabled(WEFT_LOG_WARN, WEFT_SUB_INIT);
  weft_comm_t c = calloc(1, sizeof *c);
  if (!c) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  c->rank = rank;
  c->nranks = nranks;
  atomic_init(&c->fail_origin, -1);
  c->timeout_ms = config && config->timeout_ms > 0 ? config->timeout_ms : weft_default_timeout_ms();
  c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->hb_cv, NULL);
  weft_result_t rc = comm_setup(c, id);
  for (int e = 0; e < weft_nengines && rc == WEFT_SUCCESS && !c->engine; e++)
    if (weft_engines[e]->serves(config)) {
      rc = weft_engines[e]->setup(c, config);
      if (rc == WEFT_SUCCESS) c->engine = weft_engines[e];
    }
  if (rc == WEFT_SUCCESS && (c->nlocal > 1 || c->engine->watch_always)) {
    int e = pthread_create(&c->hb_thread, NULL, heartbeat_main, c);
    if (e == 0)
      c->hb_started = 1;
    else
      rc = weft_set_error(WEFT_ERR_SYSTEM, "heartbeat thread: %s", strerror(e));
  }
  if (rc != WEFT_SUCCESS) {
    comm_free(c);
    return rc;
  }
  *comm = c;
  return WEFT_SUCCESS;
}

weft_result_t weft_comm_init(weft_comm_t *comm, int nranks, weft_unique_id_t id, int rank,
                             const weft_config_t *config) {
  weft_id_body_t body;
  memcpy(&body, id.internal, sizeof body);
  return comm_create(comm, nranks, &body, rank, config);
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!s[0] || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

weft_result_t weft_comm_init_env(weft_comm_t *comm, const weft_config_t *config) {
  const char *root = weft_param_get_str(WEFT_PARAM_ROOT),
             *rank_s = weft_param_get_str(WEFT_PARAM_RANK),
             *n_s = weft_param_get_str(WEFT_PARAM_NRANKS);
  char host[256];
  long port = 0, rank = 0, n = 0;
  int torch = !root[0];
  if (torch) { /* torchrun: weft listens one above MASTER_PORT, which PyTorch's store holds */
    const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
    rank_s = getenv("RANK");
    n_s = getenv("WORLD_SIZE");
    if (!ma || !mp || !rank_s || !n_s)
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "weft_comm_init_env: set WEFT_ROOT=host:port, WEFT_RANK and "
                            "WEFT_NRANKS (or torchrun's MASTER_ADDR, MASTER_PORT, RANK, "
                            "WORLD_SIZE)");
    snprintf(host, sizeof host, "%s", ma);
    if (parse_int(mp, 1, 65534, &port) != 0)
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "MASTER_PORT=%s: expected 1-65534 (weft listens one port above it)",
                            mp);
    port++;
  } else {
    const char *colon = strrchr(root, ':');
    if (!colon || colon == root || parse_int(colon + 1, 1, 65535, &port) != 0)
      return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_ROOT=%s: expected host:port", root);
    snprintf(host, sizeof host, "%.*s", (int)(colon - root), root);
  }
  const char *n_name = torch ? "WORLD_SIZE" : "WEFT_NRANKS", *r_name = torch ? "RANK" : "WEFT_RANK";
  if (parse_int(n_s, 1, WEFT_BOOT_MAX_RANKS, &n) != 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_init_env: %s=%s: expected 1-%d ranks%s",
                          n_name, n_s, WEFT_BOOT_MAX_RANKS, n_s[0] ? "" : " (unset or empty)");
  if (parse_int(rank_s, 0, n - 1, &rank) != 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_comm_init_env: %s=%s: expected a rank of %s=%ld (0-%ld)%s", r_name,
                          rank_s, n_name, n, n - 1, rank_s[0] ? "" : " (unset or empty)");
  weft_id_body_t id = {.version = WEFT_WIRE_VERSION};
  CHECK(weft_sock_resolve(host, (uint16_t)port, &id.root));
  /* The id's magic must be the same on every rank without an exchange: derive it. */
  char key[300];
  snprintf(key, sizeof key, "%s:%ld/%ld", host, port, n);
  uint64_t h = 1469598103934665603ull;
  for (const char *p = key; *p; p++)
    h = (h ^ (uint8_t)*p) * 1099511628211ull;
  id.magic = h;
  if (rank == 0) {
    /* on every address: the others come to the one they were given, which
     * WEFT_SOCKET_IFNAME (this rank's own address for its peers) need not name; bound to
     * that interface's alone, rank 0 refused them all until the timeout */
    int fd = -1;
    weft_result_t lrc = weft_sock_listen_all(weft_sockaddr_family(&id.root), (uint16_t)port, &fd);
    if (lrc != WEFT_SUCCESS)
      return weft_set_error(lrc,
                            "weft_comm_init_env: rank 0 hosts the rendezvous root at port %ld%s "
                            "and cannot listen there: %s",
                            port, torch ? " (MASTER_PORT + 1)" : "", weft_thread_error());
    CHECK(weft_bootstrap_root_start(fd, id.magic, config ? config->timeout_ms : 0));
  }
  return comm_create(comm, (int)n, &id, (int)rank, config);
}

weft_result_t weft_comm_split(weft_comm_t comm, int color, int key, weft_comm_t *newcomm,
                              const weft_config_t *config) {
  if (!comm || !newcomm)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_split: comm or newcomm is NULL");
  if (color < 0 && color != WEFT_SPLIT_NOCOLOR)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_split: color %d is negative", color);
  int n = comm->nranks;
  weft_result_t rc = WEFT_SUCCESS;
  int(*ck)[2] = calloc((size_t)n, sizeof *ck);
  weft_unique_id_t *ids = calloc((size_t)n, sizeof *ids);
  if (!ck || !ids) ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "weft_comm_split: out of memory");
  ck[comm->rank][0] = color;
  ck[comm->rank][1] = key;
  CHECK_GOTO(weft_bootstrap_allgather(comm->boot, ck, sizeof *ck), rc, out);
  /* New rank: position by (key, old rank) among the same color; the first one leads. */
  int size = 0, newrank = 0, leader = -1;
  for (int p = 0; p < n; p++) {
    if (ck[p][0] != color || color == WEFT_SPLIT_NOCOLOR) continue;
    size++;
    if (ck[p][1] < key || (ck[p][1] == key && p < comm->rank)) newrank++;
    if (leader < 0 || ck[p][1] < ck[leader][1]) leader = p;
  }
  weft_result_t idrc = WEFT_SUCCESS;
  if (leader == comm->rank) idrc = weft_get_unique_id(&ids[comm->rank]);
  CHECK_GOTO(weft_bootstrap_allgather(comm->boot, ids, sizeof *ids), rc, out);
  if (idrc != WEFT_SUCCESS) ERR_GOTO(rc, out, idrc, "weft_comm_split: %s", weft_thread_error());
  *newcomm = NULL;
  if (color != WEFT_SPLIT_NOCOLOR) {
    weft_config_t cfg = WEFT_CONFIG_INIT;
    cfg.timeout_ms = comm->timeout_ms;
    rc = weft_comm_init(newcomm, size, ids[leader], newrank, config ? config : &cfg);
  }
out:
  free(ck);
  free(ids);
  return rc;
}

weft_result_t weft_comm_abort(weft_comm_t comm) {
  if (!comm) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_abort: comm is NULL");
  atomic_store(&comm->aborted, 1);
  if (comm->engine) comm->engine->cancel(comm);
  pthread_mutex_lock(&comm->mu);
  uint64_t seq = comm->seq;
  pthread_mutex_unlock(&comm->mu);
  /* peers waiting for this rank learn at once instead of at their timeout */
  weft_fail_notify(comm, WEFT_ERR_ABORTED, seq ? seq : 1, "weft_comm_abort was called");
  uint64_t one = 1;
  if (comm->wake_fd >= 0 && write(comm->wake_fd, &one, sizeof one) < 0) {
    /* a full eventfd is already readable: the waiter wakes anyway */
  }
  for (int t = 0; t < WEFT_MAX_TRANSPORTS; t++)
    if (comm->tr[t] && comm->tr[t]->wake && comm->tr_state[t]) comm->tr[t]->wake(comm->tr_state[t]);
  return WEFT_SUCCESS;
}

weft_result_t weft_comm_destroy(weft_comm_t comm) {
  if (!comm) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_destroy: comm is NULL");
  comm_free(comm);
  return WEFT_SUCCESS;
}

weft_result_t weft_comm_get_async_error(weft_comm_t comm, weft_result_t *error) {
  if (!comm || !error)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_get_async_error: NULL argument");
  comm->engine->watch(comm);
  pthread_mutex_lock(&comm->mu);
  *error = comm->async_error;
  pthread_mutex_unlock(&comm->mu);
  return WEFT_SUCCESS;
}

weft_result_t weft_comm_count(weft_comm_t comm, int *count) {
  if (!comm || !count)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_count: NULL argument");
  *count = comm->nranks;
  return WEFT_SUCCESS;
}

weft_result_t weft_comm_device_memory(weft_comm_t comm, size_t *bytes) {
  if (!comm || !bytes)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_device_memory: NULL argument");
  *bytes = comm->engine->memory(comm);
  return WEFT_SUCCESS;
}

weft_result_t weft_comm_rank(weft_comm_t comm, int *rank) {
  if (!comm || !rank) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_rank: NULL argument");
  *rank = comm->rank;
  return WEFT_SUCCESS;
}

const char *weft_get_last_error(weft_comm_t comm) {
  if (comm) {
    pthread_mutex_lock(&comm->mu);
    int has = comm->async_error != WEFT_SUCCESS;
    pthread_mutex_unlock(&comm->mu);
    if (has) return comm->error;
  }
  return weft_thread_error();
}
