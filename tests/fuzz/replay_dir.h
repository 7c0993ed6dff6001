/* The replays' walk over a corpus argument: a folder's inputs in name order (hidden files
 * skipped), or a single file; one(file) runs each until one fails. */
#ifndef WEFT_FUZZ_REPLAY_DIR_H
#define WEFT_FUZZ_REPLAY_DIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

static inline int replay_no_dots(const struct dirent *e) { return e->d_name[0] != '.'; }

static inline int replay_path(const char *path, int (*one)(const char *file)) {
  struct dirent **list;
  int k = scandir(path, &list, replay_no_dots, alphasort);
  if (k < 0) return one(path); /* not a folder */
  int rc = 0;
  for (int i = 0; i < k; i++) {
    char file[4096];
    snprintf(file, sizeof file, "%s/%s", path, list[i]->d_name);
    if (rc == 0) rc = one(file);
    free(list[i]);
  }
  free(list);
  return rc;
}

#endif
