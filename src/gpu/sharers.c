/* The sharers' registry (sharers.h). A slot holds one 64-bit owner word, the process's start
 * time (clock ticks since boot, /proc/<pid>/stat) above its pid, so that one compare-and-swap
 * claims or frees it and a pid reused by a later process does not pass for the old one. The
 * last communicator to leave unlinks the segment. */
#include "sharers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"

enum { PID_BITS = 22 }; /* Linux's pid_max is at most 2^22 */

typedef struct {
  _Atomic uint64_t owner[WEFT_SHARERS_SLOTS]; /* 0: free */
} segment_t;

struct weft_sharers {
  segment_t *seg;
  int fd;   /* open while joined: its flock orders joins against the last leave */
  int slot; /* ours, or -1 */
  char name[96];
};

/* The start time of pid (field 22 of /proc/<pid>/stat), 0 where it is gone or unreadable. */
static uint64_t start_of(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  unsigned long long v = 0;
  for (int field = 2; p && *p; p++) /* field 2 ends at ')' */
    if (*p == ' ' && ++field == 22) {
      v = strtoull(p + 1, NULL, 10);
      break;
    }
  return (uint64_t)v;
}

static uint64_t owner_of(int pid) {
  return start_of(pid) << PID_BITS | ((uint64_t)pid & ((1u << PID_BITS) - 1));
}

static int alive(uint64_t owner) {
  int pid = (int)(owner & ((1u << PID_BITS) - 1));
  return pid > 0 && owner_of(pid) == owner;
}

void weft_sharers_name(char *buf, size_t len, const char *bus) {
  snprintf(buf, len, "/weft-gpu-%s", bus);
}

/* Opens the segment, locked (flock), sized and mapped. The lock orders joiners against the
 * last leaver's unlink: a segment whose name now means another file (or none) was unlinked
 * after we opened it, and is opened again. */
static weft_result_t open_locked(weft_sharers_t *s, const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%s", name);
  for (int tries = 0; tries < 100; tries++) {
    struct stat st, now;
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
      int e = errno;
      if (fd >= 0) close(fd);
      return weft_set_error(WEFT_ERR_SYSTEM, "sharers: shared memory %s: %s", name, strerror(e));
    }
    if (stat(path, &now) != 0 || now.st_ino != st.st_ino) {
      close(fd); /* unlinked meanwhile (closing drops the lock) */
      continue;
    }
    /* every joiner sizes it alike: growing it zero-fills */
    void *p = st.st_size < (off_t)sizeof(segment_t) && ftruncate(fd, sizeof(segment_t)) != 0
                  ? MAP_FAILED
                  : mmap(NULL, sizeof(segment_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return weft_set_error(WEFT_ERR_SYSTEM, "sharers: mapping %s: %s", name, strerror(e));
    }
    s->seg = p;
    s->fd = fd;
    return WEFT_SUCCESS;
  }
  return weft_set_error(WEFT_ERR_SYSTEM, "sharers: %s keeps being unlinked", name);
}

weft_result_t weft_sharers_join(const char *name, weft_sharers_t **out) {
  *out = NULL;
  weft_sharers_t *s = calloc(1, sizeof *s);
  if (!s) return weft_set_error(WEFT_ERR_NO_MEMORY, "sharers: out of memory");
  s->slot = -1;
  snprintf(s->name, sizeof s->name, "%s", name);
  weft_result_t rc = open_locked(s, name);
  if (rc != WEFT_SUCCESS) {
    free(s);
    return rc;
  }
  uint64_t me = owner_of((int)getpid());
  for (int i = 0; i < WEFT_SHARERS_SLOTS && s->slot < 0; i++) {
    uint64_t w = atomic_load(&s->seg->owner[i]);
    if (w && w != me && !alive(w)) /* an exited process's */
      atomic_compare_exchange_strong(&s->seg->owner[i], &w, 0);
    uint64_t free_word = 0;
    if (atomic_compare_exchange_strong(&s->seg->owner[i], &free_word, me)) s->slot = i;
  }
  flock(s->fd, LOCK_UN);
  if (s->slot < 0)
    WEFT_INFO(WEFT_SUB_INIT, "sharers: %s has no free slot; this communicator is not listed", name);
  *out = s;
  return WEFT_SUCCESS;
}

int weft_sharers_count(const weft_sharers_t *s) {
  /* this process, and at most one more a slot (it may hold none of them) */
  uint64_t seen[WEFT_SHARERS_SLOTS + 1], me = owner_of((int)getpid());
  int n = 0;
  seen[n++] = me;
  for (int i = 0; i < WEFT_SHARERS_SLOTS; i++) {
    uint64_t w = atomic_load(&s->seg->owner[i]);
    int known = w == 0 || w == me;
    for (int j = 0; j < n && !known; j++)
      known = seen[j] == w;
    if (!known && alive(w)) seen[n++] = w;
  }
  return n;
}

void weft_sharers_leave(weft_sharers_t *s) {
  if (!s) return;
  /* the last to leave unlinks, so that nothing stays in /dev/shm; a crashed process's slot
   * counts as free here */
  flock(s->fd, LOCK_EX);
  uint64_t me = owner_of((int)getpid());
  if (s->slot >= 0) atomic_compare_exchange_strong(&s->seg->owner[s->slot], &me, 0);
  int held = 0;
  for (int i = 0; i < WEFT_SHARERS_SLOTS && !held; i++) {
    uint64_t w = atomic_load(&s->seg->owner[i]);
    held = w != 0 && alive(w);
  }
  if (!held) shm_unlink(s->name);
  munmap(s->seg, sizeof(segment_t));
  close(s->fd); /* and the lock */
  free(s);
}
