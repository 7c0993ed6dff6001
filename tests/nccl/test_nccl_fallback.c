/* WEFT_NCCL_FALLBACK through NCCL's nccl.h, with or without a GPU: two ranks on two faked
 * hosts (WEFT_HOSTID), which weft's device communicators refuse, so both take the fallback
 * together: a fake NCCL (fake_nccl.c) that records its calls. Every call on the comm goes to
 * it (queries, collectives, groups, split, shrink, last error, destroy), both ranks hold the
 * id rank 0's fake made, and the fake's own calls stay inside it (deep binding). weft's own
 * libnccl.so.2, and a missing file, are refused at init on both ranks with the path named.
 * usage: test_nccl_fallback FAKE_LIB WEFT_LIBNCCL */
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { N = 2 };

typedef struct {
  atomic_int ready;
  ncclUniqueId id;
  unsigned long long real_id[N];
} shared_t;

static shared_t *sh;
static const char *fake_path;

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "rank %d: ", rank);                                                            \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, " (ncclGetLastError: %s)\n", ncclGetLastError(NULL));                          \
    return 1;                                                                                      \
  } while (0)

static ncclUniqueId get_id(int rank) {
  if (rank == 0) {
    if (ncclGetUniqueId(&sh->id) != ncclSuccess)
      atomic_store(&sh->ready, -1);
    else
      atomic_store(&sh->ready, 1);
  }
  for (int i = 0; i < 30000 && atomic_load(&sh->ready) == 0; i++)
    usleep(1000);
  return sh->id;
}

static int has(const char *log, const char *word) { return strstr(log, word) != NULL; }

static int served(int rank) {
  ncclComm_t c = NULL, s = NULL, k = NULL;
  ncclUniqueId id = get_id(rank);
  ncclResult_t r = ncclCommInitRank(&c, N, id, rank);
  if (r != ncclSuccess || !c) FAIL("init with the fallback: %s", ncclGetErrorString(r));
  /* the fake was loaded by path: the same object again, without loading it anew */
  void *h = dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) FAIL("the fake library is not loaded: %s", dlerror());
  const char *(*log)(void) = (const char *(*)(void))dlsym(h, "fake_nccl_log");
  char want[64];
  snprintf(want, sizeof want, "init %d/%d blocking=1", rank, N);
  if (!log || !has(log(), want)) FAIL("the fake did not init: '%s'", log ? log() : "?");
  if (rank == 0 && !has(log(), "getid")) FAIL("rank 0 did not make the fake's id");
  int n = -1, me = -1;
  if (ncclCommCount(c, &n) != ncclSuccess || n != N) FAIL("count %d", n);
  if (ncclCommUserRank(c, &me) != ncclSuccess || me != rank) FAIL("rank %d", me);
  float x[4] = {0};
  if (ncclAllReduce(x, x, 4, ncclFloat, ncclMax, c, NULL) != ncclSuccess) FAIL("allreduce");
  snprintf(want, sizeof want, "allreduce 4 %d %d on %d", (int)ncclFloat, (int)ncclMax, rank);
  if (!has(log(), want)) FAIL("the allreduce did not reach the fake: '%s'", log());
  if (ncclGroupStart() != ncclSuccess || ncclGroupEnd() != ncclSuccess) FAIL("group");
  if (!has(log(), "groupstart") || !has(log(), "groupend")) FAIL("the group: '%s'", log());
  if (strcmp(ncclGetLastError(c), "the fake's last error") != 0)
    FAIL("last error of a fallback comm: '%s'", ncclGetLastError(c));
  ncclResult_t async = ncclInternalError;
  if (ncclCommGetAsyncError(c, &async) != ncclSuccess || async != ncclSuccess) FAIL("async");
  if (ncclCommSplit(c, 0, rank, &s, NULL) != ncclSuccess || !s) FAIL("split");
  snprintf(want, sizeof want, "split 0 %d count=%d", rank, N);
  if (!has(log(), want)) FAIL("split (its own ncclCommCount went astray?): '%s'", log());
  if (ncclCommCount(s, &n) != ncclSuccess || n != N) FAIL("split comm's count %d", n);
  int ex[] = {1 - rank};
  if (ncclCommShrink(c, ex, 1, &k, NULL, NCCL_SHRINK_ABORT) != ncclSuccess || !k) FAIL("shrink");
  snprintf(want, sizeof want, "shrink 1 first=%d flags=%d", 1 - rank, NCCL_SHRINK_ABORT);
  if (!has(log(), want)) FAIL("shrink: '%s'", log());
  if (ncclCommCount(k, &n) != ncclSuccess || n != N - 1) FAIL("shrunk comm's count %d", n);
  const char *idw = strstr(log(), "id=");
  if (!idw || sscanf(idw, "id=%llx", &sh->real_id[rank]) != 1) FAIL("no id: '%s'", log());
  if (ncclCommDestroy(k) != ncclSuccess || ncclCommDestroy(s) != ncclSuccess ||
      ncclCommDestroy(c) != ncclSuccess)
    FAIL("destroy");
  if (!has(log(), "destroy 1") || !has(log(), "destroy 2")) FAIL("destroy: '%s'", log());
  dlclose(h);
  return 0;
}

static int refused(int rank, const char *path, ncclResult_t want, const char *word) {
  ncclComm_t c = (ncclComm_t)1;
  ncclUniqueId id = get_id(rank);
  ncclResult_t r = ncclCommInitRank(&c, N, id, rank);
  const char *e = ncclGetLastError(NULL);
  if (r != want || c != NULL || !strstr(e, path) || !strstr(e, word))
    FAIL("WEFT_NCCL_FALLBACK=%s: %s, comm %p, want %s and '%s'", path, ncclGetErrorString(r),
         (void *)c, ncclGetErrorString(want), word);
  return 0;
}

/* Forks the ranks, each on a host of its own, with WEFT_NCCL_FALLBACK=path. */
static int run(const char *path, int (*fn)(int, const char *, ncclResult_t, const char *),
               ncclResult_t want, const char *word) {
  memset(sh, 0, sizeof *sh);
  pid_t pids[N];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < N; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      char host[32];
      snprintf(host, sizeof host, "fakehost%d", r);
      setenv("WEFT_HOSTID", host, 1);
      setenv("WEFT_NCCL_FALLBACK", path, 1);
      setenv("WEFT_TIMEOUT_MS", "30000", 1);
      alarm(60);
      _exit(fn(r, path, want, word));
    }
  }
  int bad = 0;
  for (int r = 0; r < N; r++) {
    int st;
    if (waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "test_nccl_fallback: rank %d failed (%s)\n", r, path);
      bad = 1;
    }
  }
  return bad;
}

static int served_fn(int rank, const char *path, ncclResult_t want, const char *word) {
  (void)path, (void)want, (void)word;
  return served(rank);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_nccl_fallback FAKE_LIB WEFT_LIBNCCL\n");
    return 2;
  }
  fake_path = argv[1];
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  int rank = -1;
  ncclComm_t k = (ncclComm_t)1;
  int ex[] = {0};
  if (ncclCommShrink(NULL, ex, 1, &k, NULL, 0) != ncclInvalidArgument || k != NULL)
    FAIL("shrink of a NULL comm");
  if (ncclCommShrink((ncclComm_t)&rank, ex, 1, NULL, NULL, 0) != ncclInvalidArgument)
    FAIL("shrink without newcomm");
  if (run(fake_path, served_fn, ncclSuccess, "")) return 1;
  if (!sh->real_id[0] || sh->real_id[0] != sh->real_id[1])
    FAIL("the ranks hold different fallback ids: %llx and %llx", sh->real_id[0], sh->real_id[1]);
  if (run(argv[2], refused, ncclInvalidUsage, "weft's own")) return 1;
  if (run("/nonexistent/libnccl.so.2", refused, ncclSystemError, "No such file")) return 1;
  printf("test_nccl_fallback: forwarded to the fake; weft's own library and a missing one "
         "refused\n");
  return 0;
}
