/* soak: random collectives under mixed load for a fixed time. Forked ranks, several
 * communicators each driven by its own thread, blocking and stream-ordered calls, every
 * result checked against the oracle; RSS, file descriptors and shared-memory segments
 * sampled after a warm-up and at the end must not grow. usage: see usage() below. */
#include <dirent.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "soak.h"

/* Allowed RSS growth between the two samples. Not zero, because some memory legitimately
 * ends up different: weft keeps up to 64 schedules per communicator (an LRU keyed by count,
 * so random sizes change what it holds), tcp's staging rings (16 MiB a peer) are touched
 * page by page as their heads advance, glibc keeps an arena per thread whose fragments
 * malloc_trim cannot return, and the sizes drawn after the warm-up differ from those before
 * (measured here: +0.3 to +1.5 MiB per rank over 4-120 s; on 5 tcp ranks +6 MiB in a 30 s
 * run, all of it rings still filling, +0.5 in 90 s). A leak of one small block per operation
 * would pass 8 MiB within a 10-minute run (hundreds of thousands of operations), one buffer
 * per operation within seconds. */
enum { RSS_ALLOWANCE_MIB = 8, MAX_COMMS = 4, MAX_NAMES = 256 };

typedef struct {
  long long rss, heap; /* bytes */
  int fds, maps, shm;  /* open descriptors, weft segments mapped, weft names in /dev/shm */
} sample_t;

typedef struct {
  soak_counts_t c;
  sample_t s[2]; /* after the warm-up, at the end */
  int sampled, failed;
} rank_result_t;

enum { ORDER_SERIAL, ORDER_LAUNCH, ORDER_NONE };
static const char *const ORDER_NAME[] = {"serial", "launch", "none"};

typedef struct {
  int seconds, comms, device, split, prime, order;
  uint64_t seed;
  size_t max_bytes;
  rank_result_t *res; /* one per rank, shared with the parent */
} opts_t;

/* ---- resources ---- */

static long long rss_bytes(void) {
  long long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%lld %lld", &size, &resident) != 2) resident = -1;
  if (f) fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

typedef struct {
  int n;
  char v[MAX_NAMES][80];
} names_t;

static int has(const names_t *s, const char *x) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->v[i], x) == 0) return 1;
  return 0;
}

static void add(names_t *s, const char *x) {
  if (s->n < MAX_NAMES && !has(s, x)) snprintf(s->v[s->n++], sizeof s->v[0], "%.79s", x);
}

/* Segments this process maps (/dev/shm/weft-..., src/util/shmseg.c's names; "(deleted)"
 * once unlinked, which weft does as soon as every local rank mapped them). */
static int shm_maps(void) {
  names_t *s = calloc(1, sizeof *s);
  char line[512];
  FILE *f = fopen("/proc/self/maps", "r");
  while (s && f && fgets(line, sizeof line, f)) {
    char *p = strstr(line, "/dev/shm/weft-");
    if (!p) continue;
    p[strcspn(p, " \n")] = 0;
    add(s, p);
  }
  if (f) fclose(f);
  int n = s ? s->n : -1;
  free(s);
  return n;
}

static void list_shm(names_t *s) {
  s->n = 0;
  DIR *d = opendir("/dev/shm");
  for (struct dirent *e; d && (e = readdir(d));)
    if (strncmp(e->d_name, "weft-", 5) == 0) add(s, e->d_name);
  if (d) closedir(d);
}

/* weft-* names in /dev/shm that are not in `before` (NULL: none) and still there after a
 * pause: another weft process's segments live for milliseconds (until all its local ranks
 * mapped them), a leaked one stays. */
static int shm_lasting(const names_t *before) {
  names_t *a = calloc(2, sizeof *a), *b = a + 1;
  if (!a) return -1;
  list_shm(a);
  struct timespec pause = {0, 300 * 1000000};
  nanosleep(&pause, NULL);
  list_shm(b);
  int n = 0;
  for (int i = 0; i < a->n; i++)
    n += has(b, a->v[i]) && !(before && has(before, a->v[i]));
  free(a);
  return n;
}

/* Sample k of this rank, taken while no worker runs: free pages go back first, so that RSS
 * shows memory in use rather than what the allocator happens to keep. */
static void sample(sample_t *s) {
  malloc_trim(0);
  struct mallinfo2 m = mallinfo2();
  s->rss = rss_bytes();
  s->heap = (long long)(m.uordblks + m.hblkhd);
  s->fds = launch_open_fds();
  s->maps = shm_maps();
  s->shm = shm_lasting(NULL);
}

/* ---- ranks ---- */

static void *worker_main(void *arg) {
  worker_t *w = arg;
  soak_dev_bind();
  soak_run(w);
  return NULL;
}

/* Runs every worker until deadline_ms; 0 when none failed. The turn sequence restarts from
 * a seed of the phase, so that every rank draws the same. */
static int run_phase(worker_t *ws, int nw, int64_t deadline_ms, int sweep, uint64_t seed) {
  pthread_t th[MAX_COMMS];
  int failed = 0;
  soak_order_begin(ws[0].order, nw, (1u << nw) - 1, seed);
  for (int k = 0; k < nw; k++) {
    ws[k].deadline_ms = deadline_ms, ws[k].sweep = sweep;
    if (pthread_create(&th[k], NULL, worker_main, &ws[k]) != 0) return -1;
  }
  for (int k = 0; k < nw; k++) {
    pthread_join(th[k], NULL);
    failed |= ws[k].stop_failed;
  }
  return failed ? -1 : 0;
}

static uint64_t mix64(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0x9e3779b97f4a7c15ULL);
  return soak_rand(&s);
}

/* The communicators: the world, its even and odd ranks, the world in reverse order, and
 * its halves in reverse order; each gets one worker thread. */
static int make_comms(weft_comm_t world, int rank, int n, int ncomms, const weft_config_t *cfg,
                      weft_comm_t *comms, int *colors) {
  comms[0] = world, colors[0] = 0;
  for (int k = 1; k < ncomms; k++) {
    int color = k == 1 ? rank % 2 : k == 2 ? 0 : rank < (n + 1) / 2, key = k == 1 ? rank : -rank;
    colors[k] = color;
    if (weft_comm_split(world, color, key, &comms[k], cfg) != WEFT_SUCCESS) {
      fprintf(stderr, "soak rank %d: split %d: %s\n", rank, k, weft_get_last_error(NULL));
      return -1;
    }
  }
  return 0;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  opts_t *o = arg;
  rank_result_t *res = &o->res[rank];
  int64_t t0 = launch_now_ms();
  /* glibc raises its mmap threshold to the largest block freed (up to 32 MiB), and then
   * keeps megabytes of free top chunk in every thread's arena, out of malloc_trim's reach:
   * tens of MiB of RSS that come and go with the timing. Fixed thresholds (glibc's defaults,
   * no longer adjusted) hand large blocks back at free, so RSS follows what is in use. */
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
  weft_config_t cfg = WEFT_CONFIG_INIT;
  /* a hang fails the run; a dozen threads a rank (workers, progress, heartbeats) on 2 cores are
   * slow, not hung */
  cfg.timeout_ms = 60000;
  if (o->device) cfg.device = 0, soak_dev_bind(); /* every rank on GPU 0 */
  weft_comm_t world = NULL, comms[MAX_COMMS] = {0};
  int colors[MAX_COMMS] = {0}, nw = 0, bad = 1;
  worker_t ws[MAX_COMMS];
  soak_order_t order;
  memset(ws, 0, sizeof ws);
  if (soak_order_init(&order)) return 1;
  order.on = o->order != ORDER_NONE, order.serial = o->order == ORDER_SERIAL;
  if (weft_comm_init(&world, n, id, rank, &cfg) != WEFT_SUCCESS) {
    fprintf(stderr, "soak rank %d: init: %s\n", rank, weft_get_last_error(NULL));
    soak_order_fini(&order);
    return 1;
  }
  if (make_comms(world, rank, n, o->comms, &cfg, comms, colors)) goto out;
  for (; nw < o->comms; nw++) {
    worker_t *w = &ws[nw];
    w->id = nw, w->comm = comms[nw], w->world_rank = rank, w->device = o->device;
    w->max_bytes = o->max_bytes, w->split = o->split, w->order = &order;
    weft_comm_rank(w->comm, &w->rank);
    weft_comm_count(w->comm, &w->n);
    /* shared by the comm's ranks (same id and color), different for every comm */
    w->rng = mix64(o->seed, (uint64_t)nw << 8 | (uint64_t)colors[nw]);
    w->local_rng = mix64(o->seed ^ 0x5eed, (uint64_t)nw << 20 | (uint64_t)rank);
    if (soak_dev_init(w)) {
      fprintf(stderr, "soak rank %d: no stream or device memory for comm %d\n", rank, nw);
      goto out;
    }
  }
  /* --prime: each comm's sweep alone, one after the other, before any runs concurrently */
  for (int k = 0; o->prime && k < nw; k++) {
    soak_order_begin(&order, nw, 1u << k, o->seed);
    ws[k].deadline_ms = 0, ws[k].sweep = 1;
    if (soak_run(&ws[k])) goto out;
  }
  /* the warm-up: a tenth of the run, 5-30 s but at most half, starting with the sweep (a
   * longer one lets tcp's staging rings fill before the first sample) */
  int64_t warm = o->seconds * 100LL;
  warm = warm < 5000 ? 5000 : warm > 30000 ? 30000 : warm;
  if (warm > o->seconds * 500LL) warm = o->seconds * 500LL;
  if (run_phase(ws, nw, t0 + warm, 1, mix64(o->seed, 1)) ||
      weft_barrier(world, NULL) != WEFT_SUCCESS)
    goto out;
  sample(&res->s[0]);
  if (weft_barrier(world, NULL) != WEFT_SUCCESS) goto out;
  if (run_phase(ws, nw, t0 + o->seconds * 1000LL, 0, mix64(o->seed, 2)) ||
      weft_barrier(world, NULL) != WEFT_SUCCESS)
    goto out;
  sample(&res->s[1]);
  res->sampled = 1;
  bad = 0;
out:
  for (int k = 0; k < MAX_COMMS; k++) {
    soak_dev_fini(&ws[k]);
    if (comms[k] && k > 0) weft_comm_destroy(comms[k]);
    soak_counts_t *c = &ws[k].counts;
    res->c.ops += c->ops, res->c.bytes += c->bytes, res->c.wrong += c->wrong;
    res->c.failed_calls += c->failed_calls, res->c.streamed += c->streamed;
    for (int i = 0; i < NKINDS; i++)
      res->c.kind[i] += c->kind[i];
  }
  weft_comm_destroy(world);
  soak_order_fini(&order);
  if (!res->sampled) memset(res->s, 0, sizeof res->s);
  sample_t *s0 = &res->s[0], *s1 = &res->s[1];
  long long drss = s1->rss - s0->rss;
  int dfd = s1->fds - s0->fds, dmap = s1->maps - s0->maps, dshm = s1->shm - s0->shm;
  bad |= res->c.wrong || res->c.failed_calls || drss > (RSS_ALLOWANCE_MIB << 20) || dfd > 0 ||
         dmap > 0 || dshm > 0;
  res->failed = bad;
  unsigned long long items = 0;
  for (int i = 0; i < NKINDS; i++)
    items += res->c.kind[i];
  char growth[160] = "not sampled (it failed first)";
  if (res->sampled)
    snprintf(growth, sizeof growth,
             "rss %+.1f MiB (heap %+.1f), fds %+d, shm maps %+d, /dev/shm %+d", drss / 1048576.0,
             (s1->heap - s0->heap) / 1048576.0, dfd, dmap, dshm);
  printf("soak rank %d/%d: %llu ops, %.1f MiB, %llu wrong, %llu failed calls, %llu of %llu "
         "items streamed; growth: %s: %s\n",
         rank, n, (unsigned long long)res->c.ops, res->c.bytes / 1048576.0,
         (unsigned long long)res->c.wrong, (unsigned long long)res->c.failed_calls,
         (unsigned long long)res->c.streamed, items, growth, bad ? "FAILED" : "ok");
  return bad;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s SECONDS [RANKS] [shm|tcp|auto] [--device] [--comms=K] [--seed=S] "
          "[--max-bytes=B] [--prime] [--no-split] [--order=serial|launch|none]\n"
          "  RANKS forked ranks (default 4); K communicators, one thread each (1-4, default 4);\n"
          "  operations up to B bytes per buffer (default 4 MiB); --device: device buffers,\n"
          "  every rank on GPU 0 (CUDA builds; otherwise it exits 77, skipped); --prime: each\n"
          "  comm first runs every kind alone, one comm after the other (device kernels' first\n"
          "  launches then never meet another comm's kernel);\n"
          "  --no-split: never split the world comm under load (by default now and then);\n"
          "  --order: the workers of a rank call weft in turns drawn the same on every rank, each\n"
          "  device launch also waiting on the GPU for the one before (serial: the default with\n"
          "  --device, what NCCL asks of concurrent communicators), or not (launch); none (the\n"
          "  default on host buffers): each worker calls when it likes, which device kernels of\n"
          "  different comms may not survive (docs/gpu.md)\n",
          argv0);
}

int main(int argc, char **argv) {
  opts_t o = {.comms = MAX_COMMS, .max_bytes = 4u << 20, .split = 1, .order = -1};
  int n = 4;
  o.seed = (uint64_t)time(NULL);
  if (argc < 2 || (o.seconds = atoi(argv[1])) <= 0) return usage(argv[0]), 2;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0)
      o.device = 1;
    else if (strcmp(argv[i], "--prime") == 0)
      o.prime = 1;
    else if (strcmp(argv[i], "--no-split") == 0)
      o.split = 0;
    else if (strncmp(argv[i], "--order=", 8) == 0) {
      for (o.order = 0; o.order < 3 && strcmp(argv[i] + 8, ORDER_NAME[o.order]); o.order++) {}
      if (o.order == 3) return usage(argv[0]), 2;
    } else if (strncmp(argv[i], "--comms=", 8) == 0)
      o.comms = atoi(argv[i] + 8);
    else if (strncmp(argv[i], "--seed=", 7) == 0)
      o.seed = strtoull(argv[i] + 7, NULL, 0);
    else if (strncmp(argv[i], "--max-bytes=", 12) == 0)
      o.max_bytes = strtoull(argv[i] + 12, NULL, 0);
    else if (argv[i][0] >= '0' && argv[i][0] <= '9')
      n = atoi(argv[i]);
    else if (argv[i][0] != '-')
      setenv("WEFT_TRANSPORT", argv[i], 1);
    else
      return usage(argv[0]), 2;
  }
  if (n < 1 || o.comms < 1 || o.comms > MAX_COMMS || o.max_bytes < 1024) return usage(argv[0]), 2;
  /* device kernels of different comms can wait on each other where the ranks issue them in
   * different orders (docs/gpu.md); host comms progress on their own threads */
  if (o.order < 0) o.order = o.device ? ORDER_SERIAL : ORDER_NONE;
  if (o.device && !soak_dev_available()) {
    printf("soak: --device needs a CUDA build (meson setup -Dcuda=enabled): skipped\n");
    return 77;
  }
  o.res = mmap(NULL, (size_t)n * sizeof *o.res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
               -1, 0);
  if (o.res == MAP_FAILED) return perror("mmap"), 2;
  const char *tr = getenv("WEFT_TRANSPORT");
  printf("soak: %d ranks, %d comms, %s buffers, launch order %s, transport %s, %d s, seed %llu "
         "(--seed to repeat the sequence)\n",
         n, o.comms, o.device ? "device" : "host", ORDER_NAME[o.order], tr ? tr : "auto", o.seconds,
         (unsigned long long)o.seed);
  names_t *before = calloc(1, sizeof *before);
  if (!before) return 2;
  list_shm(before);
  int64_t t0 = launch_now_ms();
  /* past the run: the warm-up's sweep, teardown, and one weft timeout (60 s) to report a
   * hang; meson's timeout (tests/soak/meson.build) leaves room beyond this */
  int rc = launch_local(n, rank_main, &o, o.seconds + 120);
  double wall = (launch_now_ms() - t0) / 1000.0;
  int left = shm_lasting(before); /* segments this run left behind */
  soak_counts_t sum = {0};
  long long drss = 0;
  int dfd = 0, dmap = 0, dshm = 0;
  for (int r = 0; r < n; r++) {
    rank_result_t *x = &o.res[r];
    sum.ops += x->c.ops, sum.bytes += x->c.bytes, sum.wrong += x->c.wrong;
    sum.failed_calls += x->c.failed_calls;
    for (int k = 0; k < NKINDS; k++)
      sum.kind[k] += x->c.kind[k];
    if (!x->sampled) rc = 1; /* it failed before its end sample */
#define MAXOF(v, e) v = (e) > v ? (e) : v
    MAXOF(drss, x->s[1].rss - x->s[0].rss);
    MAXOF(dfd, x->s[1].fds - x->s[0].fds);
    MAXOF(dmap, x->s[1].maps - x->s[0].maps);
    MAXOF(dshm, x->s[1].shm - x->s[0].shm);
  }
  printf("soak: items by kind:");
  for (int k = 0; k < NKINDS; k++)
    printf(" %s %llu", SOAK_KIND_NAME[k], (unsigned long long)sum.kind[k]);
  printf("\n");
  rc |= sum.wrong != 0 || sum.failed_calls != 0 || left != 0;
  printf("soak: %d ranks, %d s (wall %.1f s): %llu ops, %.2f GiB, %llu wrong, %llu failed calls; "
         "max growth per rank: rss %+.1f MiB (allowed %d), fds %+d, shm maps %+d, /dev/shm %+d; "
         "segments left in /dev/shm: %d: %s\n",
         n, o.seconds, wall, (unsigned long long)sum.ops, sum.bytes / 1073741824.0,
         (unsigned long long)sum.wrong, (unsigned long long)sum.failed_calls, drss / 1048576.0,
         RSS_ALLOWANCE_MIB, dfd, dmap, dshm, left, rc ? "FAILED" : "ok");
  free(before);
  return rc ? 1 : 0;
}
