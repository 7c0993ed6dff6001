/* POSIX shared-memory segments: one creator reserves the bytes, the other local processes
 * open and map the same name; names are unlinked by their creators once all have mapped. */
#include "shmseg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"

void weft_shm_name(char *buf, size_t len, uint64_t magic, int rank, const char *suffix) {
  snprintf(buf, len, "/weft-%016llx-%d%s", (unsigned long long)magic, rank, suffix);
}

weft_result_t weft_shm_map(const char *name, size_t bytes, int create, const char *hint,
                           char **out) {
  int fd = shm_open(name, O_RDWR | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0 && create && errno == EEXIST) { /* left by a crashed run with the same magic */
    shm_unlink(name);
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  }
  if (fd < 0) return weft_set_error(WEFT_ERR_SYSTEM, "shm_open %s: %s", name, strerror(errno));
  if (create) {
    int e = ftruncate(fd, (off_t)bytes) == 0 ? posix_fallocate(fd, 0, (off_t)bytes) : errno;
    if (e != 0) {
      close(fd);
      shm_unlink(name);
      return weft_set_error(e == ENOSPC ? WEFT_ERR_NO_MEMORY : WEFT_ERR_SYSTEM,
                            "shared memory %s (%zu bytes): %s; /dev/shm may be too small (%s)",
                            name, bytes, strerror(e), hint);
    }
  }
  /* Populated now: first-touch faults would otherwise land on the first operations. */
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return weft_set_error(WEFT_ERR_SYSTEM, "mmap %s: %s", name, strerror(e));
  *out = p;
  return WEFT_SUCCESS;
}
