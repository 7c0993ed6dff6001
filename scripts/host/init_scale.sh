#!/usr/bin/env bash
# Issue 49, init at scale: what weft_comm_init costs with N local CPU ranks (one host, shm).
# For each N it forks N ranks (a small driver, written below to a temp dir and linked against
# the build's libweft.so) and prints: init wall time (max over ranks, mean, rank 0, and until all
# are ready), the phases of init (bootstrap + host-id allgather; own shm segment + barrier; map
# every peer's segment + barrier; the rest), per-rank peak RSS (VmHWM, of which shared: RssShmem;
# Pss; page tables VmPTE), open fds and threads per rank after init (ls /proc/PID/fd), /dev/shm
# use (peak du while the names exist, df; after init the names are unlinked so du reads 0 but df
# keeps the mapped bytes), the system's Shmem and PageTables growth, and each failure's message.
# Every *_max field is the largest over the ranks on its own (phases do not add up); fds count
# the driver's inherited ones too (fds_inherited). A run stopped by the watchdog says STOPPED.
# Then (AFTER) the work a trainer does next: a first allreduce on the world (its pairs connect
# now), splits into TP groups (8 consecutive ranks) and DP groups (ranks 8 apart), and an
# allreduce in each; their times, peak RSS and fds per rank, and /dev/shm's peak over the run
# (sys_* deltas cover the whole run too). From 32 ranks (SPLITS=4, the default) a 3D layout's
# other two groups as well: PP (4 stages of N/4 ranks, a group the ranks N/4 apart) and EP
# (within a stage, the ranks of one TP index, up to 8 a group), with DP then the ranks of one
# stage and one TP index; SPLITS=2 keeps the first two alone.
#
# usage: scripts/host/init_scale.sh [N ...]          (default: 8 32 64 128 256)
# env:   BUILD=/tmp/isbuild       a build of this tree (meson setup BUILD -Dcuda=disabled ...)
#        PRIVATE_SHM=1            run each N in a private mount namespace with its own tmpfs on
#                                 /dev/shm (root; nothing leaks into the real /dev/shm, others'
#                                 runs keep their space); 0: the real /dev/shm
#        SHM_SIZE=<bytes|24g>     size of that private tmpfs (default: the real /dev/shm's size)
#        MIN_AVAIL_MIB=3072       the driver SIGKILLs the ranks when MemAvailable falls below it
#                                 (before the kernel's OOM killer picks anything else)
#        TIMEOUT_S=240            per N; the whole run is also under `timeout`
#        HOSTS=K                  fake K hosts (WEFT_HOSTID), each a block of consecutive ranks:
#                                 pairs on different ones use tcp
#        SPLITS=4                 sub-communicators after init: 4 (TP, DP, PP, EP; from 32
#                                 ranks, a multiple of 32) or 2 (TP and DP)
#        WEFT_SHM_RING_BYTES, WEFT_* pass through to the ranks.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-/tmp/isbuild}
PRIVATE_SHM=${PRIVATE_SHM:-1}
MIN_AVAIL_MIB=${MIN_AVAIL_MIB:-3072}
TIMEOUT_S=${TIMEOUT_S:-240}
SHM_SIZE=${SHM_SIZE:-$(( $(stat -f -c '%b*%S' /dev/shm) ))}   # tmpfs's size= syntax: 12g, 50%
[ -e "$BUILD/libweft.so" ] || {
  echo "no $BUILD/libweft.so: meson setup $BUILD -Dcuda=disabled -Dmpi=disabled --buildtype=release && ninja -C $BUILD" >&2
  exit 2
}
work=$(mktemp -d /tmp/weft-init-scale.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/drv.c" <<'EOF'
/* init_scale driver: forks N local ranks, times weft_comm_init in each, and samples what the
 * ranks cost once it returned. usage: drv N [MIN_AVAIL_MIB] [TIMEOUT_S]
 * One line "RESULT key=value ..." on stdout, then each distinct error message.
 * shm_open/shm_unlink are interposed (the executable's definitions win over libc's for
 * libweft.so) only to time the phases of the shm transport's setup. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

typedef struct {
  int64_t t_start, t_end, t_open1, t_open2, t_open_last, t_unlink;
  int nopen, rc, done;
  long hwm_kb, rss_kb, anon_kb, shmem_kb, pte_kb, pss_kb, vm_kb;
  /* after init: a first allreduce on the world (its pairs connect), splits into TP, DP (and PP,
   * EP) groups, an allreduce in each */
  int64_t t_ar, t_split, t_sub;
  int nsplits;
  long hwm2_kb, fds2;
  int work_rc;
  char err[200];
} rank_res_t;

typedef struct {
  atomic_int id_state, go, inited, failed, release;
  int splits; /* SPLITS: 2 or 4 sub-communicators after init */
  weft_unique_id_t id;
  rank_res_t r[];
} shared_t;

static rank_res_t *me; /* this rank's row, for the interposed calls */

int shm_open(const char *name, int oflag, mode_t mode) {
  static int (*real)(const char *, int, mode_t);
  if (!real) real = (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
  if (me) {
    int64_t t = now_us();
    if (me->nopen == 0) me->t_open1 = t;
    if (me->nopen == 1) me->t_open2 = t;
    me->t_open_last = t;
    me->nopen++;
  }
  return real(name, oflag, mode);
}
int shm_unlink(const char *name) {
  static int (*real)(const char *);
  if (!real) real = (int (*)(const char *))dlsym(RTLD_NEXT, "shm_unlink");
  if (me && !me->t_unlink) me->t_unlink = now_us();
  return real(name);
}

static long status_kb(const char *file, const char *key) {
  FILE *f = fopen(file, "r");
  char line[256];
  long v = -1;
  size_t k = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, k) == 0 && line[k] == ':') {
      v = atol(line + k + 1);
      break;
    }
  if (f) fclose(f);
  return v;
}

static int count_dir(const char *path) {
  int n = 0;
  DIR *d = opendir(path);
  for (struct dirent *e; d && (e = readdir(d));)
    n += e->d_name[0] != '.';
  if (d) closedir(d);
  return d ? n : -1;
}

static long long du_shm_kb(void) { /* what `du -sk /dev/shm` counts: blocks of its files */
  long long kb = 0;
  DIR *d = opendir("/dev/shm");
  char p[512];
  for (struct dirent *e; d && (e = readdir(d));) {
    struct stat st;
    snprintf(p, sizeof p, "/dev/shm/%s", e->d_name);
    if (e->d_name[0] != '.' && stat(p, &st) == 0) kb += (long long)st.st_blocks / 2;
  }
  if (d) closedir(d);
  return kb;
}
static long long df_used_kb(void) {
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) return -1;
  return (long long)(v.f_blocks - v.f_bfree) * (long long)v.f_frsize / 1024;
}

static int rank_main(shared_t *S, int rank, int n) {
  me = &S->r[rank];
  if (rank == 0) {
    int ok = weft_get_unique_id(&S->id) == WEFT_SUCCESS;
    if (!ok) snprintf(me->err, sizeof me->err, "get_unique_id: %s", weft_get_last_error(NULL));
    atomic_store(&S->id_state, ok ? 1 : -1);
  }
  while (!atomic_load(&S->go)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (atomic_load(&S->id_state) != 1) return 1;
  const char *hosts = getenv("HOSTS"); /* fake hosts: blocks of consecutive ranks */
  if (hosts && atoi(hosts) > 0) {
    char h[48];
    snprintf(h, sizeof h, "init-scale-host-%d", (int)((int64_t)rank * atoi(hosts) / n));
    setenv("WEFT_HOSTID", h, 1);
  }
  weft_comm_t c;
  me->t_start = now_us();
  weft_result_t rc = weft_comm_init(&c, n, S->id, rank, NULL);
  me->t_end = now_us();
  me->rc = rc;
  if (rc != WEFT_SUCCESS) {
    snprintf(me->err, sizeof me->err, "%s", weft_get_last_error(NULL));
    me->done = 1;
    atomic_fetch_add(&S->failed, 1);
    return 1;
  }
  me->hwm_kb = status_kb("/proc/self/status", "VmHWM");
  me->rss_kb = status_kb("/proc/self/status", "VmRSS");
  me->anon_kb = status_kb("/proc/self/status", "RssAnon");
  me->shmem_kb = status_kb("/proc/self/status", "RssShmem");
  me->pte_kb = status_kb("/proc/self/status", "VmPTE");
  me->vm_kb = status_kb("/proc/self/status", "VmSize");
  me->pss_kb = status_kb("/proc/self/smaps_rollup", "Pss");
  me->done = 1;
  atomic_fetch_add(&S->inited, 1);
  while (!atomic_load(&S->release)) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  float x[256] = {0};
  weft_comm_t sub[4] = {NULL, NULL, NULL, NULL};
  /* TP: 8 consecutive ranks; with 4 splits, stages of N/4 ranks: PP the ranks N/4 apart, DP
   * those of one stage and TP index, EP up to 8 of those; else DP the ranks 8 apart */
  int four = S->splits == 4 && n >= 32 && n % 32 == 0, stage = n / 4;
  int color[4] = {rank / 8, rank % 8, 0, 0};
  if (four) {
    color[1] = (rank / stage) * 8 + rank % 8;
    color[2] = rank % stage;
    color[3] = color[1] * n + (rank % stage) / 64;
  }
  int64_t t0 = now_us();
  rc = weft_allreduce(x, x, 256, WEFT_F32, WEFT_SUM, c, NULL);
  int64_t t1 = now_us();
  for (int k = 0; k < 2 + 2 * four && rc == WEFT_SUCCESS; k++)
    rc = weft_comm_split(c, color[k], rank, &sub[k], NULL);
  int64_t t2 = now_us();
  for (int k = 0; k < 4 && rc == WEFT_SUCCESS; k++)
    if (sub[k]) rc = weft_allreduce(x, x, 256, WEFT_F32, WEFT_SUM, sub[k], NULL);
  me->t_ar = t1 - t0, me->t_split = t2 - t1, me->t_sub = now_us() - t2;
  me->nsplits = 2 + 2 * four;
  me->hwm2_kb = status_kb("/proc/self/status", "VmHWM");
  me->fds2 = count_dir("/proc/self/fd") - 1;
  me->work_rc = rc;
  if (rc != WEFT_SUCCESS) snprintf(me->err, sizeof me->err, "after init: %s", weft_get_last_error(NULL));
  for (int k = 0; k < 4; k++)
    if (sub[k]) weft_comm_destroy(sub[k]);
  weft_comm_destroy(c);
  return rc != WEFT_SUCCESS;
}

static long meminfo_kb(const char *key) { return status_kb("/proc/meminfo", key); }

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s N [MIN_AVAIL_MIB] [TIMEOUT_S]\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[1]);
  long min_avail_kb = (argc > 2 ? atol(argv[2]) : 3072) * 1024;
  int timeout_s = argc > 3 ? atoi(argv[3]) : 300;
  size_t bytes = sizeof(shared_t) + sizeof(rank_res_t) * (size_t)n;
  shared_t *S = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (S == MAP_FAILED) return 2;
  S->splits = getenv("SPLITS") && atoi(getenv("SPLITS")) == 2 ? 2 : 4;
  pid_t *pid = calloc((size_t)n, sizeof *pid);
  long avail0 = meminfo_kb("MemAvailable"), shm0 = meminfo_kb("Shmem"),
       pt0 = meminfo_kb("PageTables");
  long fd_base = count_dir("/proc/self/fd") - 1; /* inherited: not weft's (less opendir's) */
  fflush(stdout);
  pid_t parent = getpid();
  for (int r = 0; r < n; r++) {
    pid_t p = fork();
    if (p == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      _exit(rank_main(S, r, n));
    }
    if (p < 0) {
      perror("fork");
      for (int k = 0; k < r; k++) kill(pid[k], SIGKILL);
      return 2;
    }
    pid[r] = p;
  }
  while (atomic_load(&S->id_state) == 0) usleep(1000);
  int64_t t_go = now_us(), deadline = t_go + (int64_t)timeout_s * 1000000;
  atomic_store(&S->go, 1);
  long min_avail = avail0, max_shm = shm0, max_pt = pt0;
  long long max_du = 0, max_df = 0, df_init = -1, du_init = -1;
  int left = n, killed = 0, sampled = 0, exited_bad = 0;
  char why[128] = "";
  int64_t t_all = 0;
  long fd_min = -1, fd_max = -1, fd0 = -1, thr_max = -1;
  char df_line[256] = "", du_line[256] = "";
  while (left > 0) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
      left--;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) exited_bad++;
      if (WIFSIGNALED(st) && !killed)
        for (int r = 0; r < n; r++)
          if (pid[r] == p && !S->r[r].done)
            snprintf(S->r[r].err, sizeof S->r[r].err, "killed by signal %d", WTERMSIG(st));
    }
    if (left == 0) break;
    long a = meminfo_kb("MemAvailable"), s = meminfo_kb("Shmem"), t = meminfo_kb("PageTables");
    if (a < min_avail) min_avail = a;
    if (s > max_shm) max_shm = s;
    if (t > max_pt) max_pt = t;
    long long du = du_shm_kb(), df = df_used_kb();
    if (du > max_du) max_du = du;
    if (df > max_df) max_df = df;
    if (!killed && (a < min_avail_kb || now_us() > deadline)) {
      if (a < min_avail_kb)
        snprintf(why, sizeof why, "watchdog: MemAvailable %ld MiB < %ld MiB, %d/%d ranks inited",
                 a / 1024, min_avail_kb / 1024, atomic_load(&S->inited), n);
      else
        snprintf(why, sizeof why, "watchdog: timeout %d s, %d/%d ranks inited", timeout_s,
                 atomic_load(&S->inited), n);
      for (int r = 0; r < n; r++) kill(pid[r], SIGKILL);
      killed = 1;
    }
    if (!sampled && atomic_load(&S->inited) == n) {
      t_all = now_us();
      sampled = 1;
      for (int r = 0; r < n; r++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd", (int)pid[r]);
        long f = count_dir(path);
        snprintf(path, sizeof path, "/proc/%d/task", (int)pid[r]);
        long th = count_dir(path);
        if (r == 0) fd0 = f;
        if (fd_min < 0 || f < fd_min) fd_min = f;
        if (f > fd_max) fd_max = f;
        if (th > thr_max) thr_max = th;
      }
      if (getenv("DRV_SHOWFD")) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "ls -l /proc/%d/fd | tail -n +2 | sed 's/^.* \\([0-9]* ->\\)/  fd \\1/'",
                 (int)pid[n - 1]);
        printf("FDS of rank %d:\n", n - 1);
        fflush(stdout);
        if (system(cmd) != 0) printf("  (ls failed)\n");
      }
      FILE *pf = popen("df -k /dev/shm | tail -1", "r");
      if (pf && fgets(df_line, sizeof df_line, pf)) df_line[strcspn(df_line, "\n")] = 0;
      if (pf) pclose(pf);
      pf = popen("du -sk /dev/shm | tail -1", "r");
      if (pf && fgets(du_line, sizeof du_line, pf)) du_line[strcspn(du_line, "\n")] = 0;
      if (pf) pclose(pf);
      df_init = max_df, du_init = max_du; /* until init: the work after it adds rings */
      atomic_store(&S->release, 1);
    }
    usleep(10000);
  }
  /* per-rank summary */
  int ok = 0;
  int64_t max_init = 0, max_from_go = 0, sum_init = 0;
  long hwm_max = 0, anon_max = 0, shmem_max = 0, pte_max = 0, pss_max = 0, vm_max = 0;
  int64_t p_boot = 0, p_create = 0, p_map = 0, p_tail = 0; /* max over ranks, us */
  for (int r = 0; r < n; r++) {
    rank_res_t *x = &S->r[r];
    if (!x->done || x->rc != 0) continue;
    ok++;
    int64_t d = x->t_end - x->t_start;
    if (d > max_init) max_init = d;
    if (x->t_end - t_go > max_from_go) max_from_go = x->t_end - t_go;
    sum_init += d;
#define MAXV(m, v) if ((v) > (m)) (m) = (v)
    MAXV(hwm_max, x->hwm_kb); MAXV(anon_max, x->anon_kb); MAXV(shmem_max, x->shmem_kb);
    MAXV(pte_max, x->pte_kb); MAXV(pss_max, x->pss_kb); MAXV(vm_max, x->vm_kb);
    if (x->nopen > 0) {
      MAXV(p_boot, x->t_open1 - x->t_start);
      MAXV(p_create, x->t_open2 - x->t_open1); /* own segment + barrier 1 */
      MAXV(p_map, x->t_unlink - x->t_open2);   /* map every peer's + barrier 2 */
      MAXV(p_tail, x->t_end - x->t_unlink);    /* engine setup, heartbeat thread */
    }
  }
  rank_res_t *z = &S->r[0];
  printf("RESULT n=%d ok=%d failed=%d killed=%d init_max_ms=%.1f init_mean_ms=%.1f "
         "init_rank0_ms=%.1f all_ready_ms=%.1f phase_boot_ms=%.1f phase_create_b1_ms=%.1f "
         "phase_map_b2_ms=%.1f phase_tail_ms=%.1f hwm_max_mib=%.1f rss_anon_max_mib=%.1f "
         "rss_shmem_max_mib=%.1f pss_max_mib=%.1f vmpte_max_mib=%.1f vmsize_max_mib=%.1f "
         "fds_inherited=%ld fds_rank0=%ld fds_min=%ld fds_max=%ld threads_max=%ld shm_du_peak_mib=%.1f "
         "shm_df_peak_mib=%.1f sys_shmem_delta_mib=%.1f sys_pagetables_delta_mib=%.1f "
         "memavail_min_mib=%.1f\n",
         n, ok, n - ok, killed, max_init / 1e3, ok ? sum_init / 1e3 / ok : 0.0,
         z->done && z->rc == 0 ? (z->t_end - z->t_start) / 1e3 : -1.0,
         t_all ? (t_all - t_go) / 1e3 : -1.0, p_boot / 1e3, p_create / 1e3, p_map / 1e3,
         p_tail / 1e3, hwm_max / 1024.0, anon_max / 1024.0, shmem_max / 1024.0,
         pss_max / 1024.0, pte_max / 1024.0, vm_max / 1024.0, fd_base, fd0, fd_min, fd_max, thr_max,
         (du_init >= 0 ? du_init : max_du) / 1024.0, (df_init >= 0 ? df_init : max_df) / 1024.0,
         (max_shm - shm0) / 1024.0, (max_pt - pt0) / 1024.0,
         min_avail / 1024.0);
  if (df_line[0]) printf("DF_AFTER_INIT %s\nDU_AFTER_INIT %s\n", df_line, du_line);
  int64_t ar = 0, sp = 0, sub = 0;
  int nsplits = 2;
  long hwm2 = 0, fds2 = 0;
  int worked = 0;
  for (int r = 0; r < n; r++) {
    rank_res_t *x = &S->r[r];
    if (!x->done || x->rc != 0 || x->work_rc != 0 || !x->hwm2_kb) continue;
    worked++;
    MAXV(ar, x->t_ar); MAXV(sp, x->t_split); MAXV(sub, x->t_sub);
    nsplits = x->nsplits;
    MAXV(hwm2, x->hwm2_kb); MAXV(fds2, x->fds2);
  }
  /* two_splits_max_ms where 2 splits ran, as earlier results files name it */
  printf("AFTER n=%d ok=%d first_allreduce_max_ms=%.1f %s_splits_max_ms=%.1f "
         "sub_allreduces_max_ms=%.1f hwm_max_mib=%.1f fds_max=%ld shm_df_peak_mib=%.1f "
         "(at init %.1f)\n",
         n, worked, ar / 1e3, nsplits == 4 ? "four" : "two", sp / 1e3, sub / 1e3, hwm2 / 1024.0,
         fds2, max_df / 1024.0, df_init / 1024.0);
  if (why[0]) printf("STOPPED %s\n", why);
  /* distinct errors, with how many ranks reported each */
  int shown = 0;
  for (int r = 0; r < n && shown < 6; r++) {
    if (!S->r[r].err[0]) continue;
    int dup = 0, cnt = 0;
    for (int k = 0; k < r && !dup; k++) dup = strcmp(S->r[k].err, S->r[r].err) == 0;
    if (dup) continue;
    for (int k = r; k < n; k++) cnt += strcmp(S->r[k].err, S->r[r].err) == 0;
    printf("ERROR x%d (first rank %d): %s\n", cnt, r, S->r[r].err);
    shown++;
  }
  return ok == n ? 0 : 1;
}
EOF
gcc -O2 -Wall -std=gnu11 -Iinclude "$work/drv.c" -o "$work/drv" -rdynamic -L"$BUILD" -lweft \
  -Wl,-rpath,"$(cd "$BUILD" && pwd)" -ldl || exit 2

ring=${WEFT_SHM_RING_BYTES:-262144}
ring=$(( (ring < 4096 ? 4096 : ring) + 4095 & ~4095 ))
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)," \
     "/dev/shm $SHM_SIZE B$([ "$PRIVATE_SHM" = 1 ] && echo ' (private tmpfs)'), ring $ring B," \
     "commit $(git rev-parse --short HEAD 2>/dev/null), library $BUILD/libweft.so"
[ $# -eq 0 ] && set -- 8 32 64 128 256
for n in "$@"; do
  # transports/shm/shm.c: every rank owns a 4 KiB header segment (doorbell, notice, one ready
  # byte per local sender) that every rank maps at init; a ring is made by a pair's first send
  hdr=$(( (64 + 256 + n + 4095) / 4096 * 4096 ))
  echo "## N=$n: predicted at init: shm $(( n * hdr >> 10 )) KiB in all, mapped per rank" \
       "$(( n * hdr >> 10 )) KiB; then $(( (128 + ring) >> 10 )) KiB per pair that talks, one way"
  if [ "$PRIVATE_SHM" = 1 ]; then
    timeout -s KILL $((TIMEOUT_S + 60)) unshare -m --propagation private sh -c \
      'mount -t tmpfs -o size="$1" tmpfs /dev/shm && exec "$2" "$3" "$4" "$5"' sh \
      "$SHM_SIZE" "$work/drv" "$n" "$MIN_AVAIL_MIB" "$TIMEOUT_S"
  else
    timeout -s KILL $((TIMEOUT_S + 60)) "$work/drv" "$n" "$MIN_AVAIL_MIB" "$TIMEOUT_S"
  fi
  echo "rc=$?"
done
