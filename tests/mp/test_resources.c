/* Nothing leaks: 1000 communicator create/destroy cycles and 100k small collectives leave
 * file descriptors and heap bytes where they were, nothing stays in /dev/shm, and 16
 * communicators alive at once (also in one group) work. usage: test_resources RANKS */
#include <dirent.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "rank_check.h"
#include "weft.h"

static long shm_files(void) {
  long n = 0;
  DIR *d = opendir("/dev/shm");
  for (struct dirent *e; d && (e = readdir(d));)
    n += strncmp(e->d_name, "weft-", 5) == 0;
  if (d) closedir(d);
  return n;
}

/* Bytes in use: from the heap arenas, plus blocks of 128 KiB and more, which glibc maps
 * on their own and uordblks leaves out. */
static size_t heap(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  weft_comm_t world;
  if (weft_comm_init(&world, n, id, rank, NULL) != WEFT_SUCCESS) FAIL("init");
  /* warm up once, so caches (schedules, scratch, the libc's own) are filled before counting */
  weft_comm_t c;
  int v = 1, out = 0;
  for (int i = 0; i < 3; i++) {
    if (weft_comm_split(world, 0, rank, &c, NULL) != WEFT_SUCCESS) FAIL("split");
    weft_allreduce(&v, &out, 1, WEFT_I32, WEFT_SUM, c, NULL);
    weft_comm_destroy(c);
  }
  for (int i = 0; i < 100; i++)
    weft_allreduce(&v, &out, 1, WEFT_I32, WEFT_SUM, world, NULL);
  weft_barrier(world, NULL);
  int fds0 = launch_open_fds();
  size_t heap0 = heap();
  for (int i = 0; i < 1000; i++) {
    if (weft_comm_split(world, 0, rank, &c, NULL) != WEFT_SUCCESS) FAIL("split %d", i);
    if (weft_allreduce(&v, &out, 1, WEFT_I32, WEFT_SUM, c, NULL) != WEFT_SUCCESS || out != n)
      FAIL("allreduce on comm %d", i);
    weft_comm_destroy(c);
  }
  int fds1 = launch_open_fds();
  size_t heap1 = heap();
  for (int i = 0; i < 100000; i++)
    if (weft_allreduce(&v, &out, 1, WEFT_I32, WEFT_SUM, world, NULL) != WEFT_SUCCESS)
      FAIL("small allreduce %d", i);
  int fds2 = launch_open_fds();
  size_t heap2 = heap();
  weft_comm_t many[16];
  for (int i = 0; i < 16; i++)
    if (weft_comm_split(world, 0, rank, &many[i], NULL) != WEFT_SUCCESS) FAIL("comm %d of 16", i);
  int outs[16];
  weft_group_start();
  for (int i = 0; i < 16; i++)
    weft_allreduce(&v, &outs[i], 1, WEFT_I32, WEFT_SUM, many[i], NULL);
  if (weft_group_end() != WEFT_SUCCESS) FAIL("group over 16 comms");
  for (int i = 0; i < 16; i++)
    if (outs[i] != n) FAIL("comm %d of 16 summed %d", i, outs[i]);
  for (int i = 0; i < 16; i++)
    weft_comm_destroy(many[i]);
  weft_barrier(world, NULL);
  int fds3 = launch_open_fds();
  /* Slack: a few KB for libc-internal buffers; a leak of one small block per cycle would
   * show as tens of KB after 1000 cycles, one per collective as megabytes after 100k. */
  int bad = fds1 != fds0 || fds2 != fds0 || fds3 != fds0 || heap1 > heap0 + 16384 ||
            heap2 > heap1 + 16384;
  printf("rank %d: fds %d -> %d (1000 comms) -> %d (100k ops) -> %d (16 comms); heap %zu -> %zu "
         "-> %zu bytes\n",
         rank, fds0, fds1, fds2, fds3, heap0, heap1, heap2);
  weft_comm_destroy(world);
  return bad;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  long before = shm_files();
  int rc = launch_local(n, rank_main, NULL, 600);
  long after = shm_files();
  if (after != before) {
    fprintf(stderr, "test_resources: /dev/shm holds %ld weft segments, had %ld\n", after, before);
    rc = 1;
  }
  printf("test_resources: %d ranks %s\n", n, rc ? "FAILED" : "ok");
  return rc;
}
