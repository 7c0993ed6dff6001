/* moebench without CUDA: no GPUs, so --gpu is refused before any of this is reached. */
#include <stdio.h>

#include "moe_mem.h"

int moe_mem_gpus(void) { return 0; }
int moe_mem_open(int rank, void **stream) {
  (void)rank, *stream = NULL;
  fprintf(stderr, "moebench: device buffers need a CUDA build\n");
  return -1;
}
void moe_mem_close(void *stream) { (void)stream; }
void *moe_mem_alloc(size_t bytes) {
  (void)bytes;
  return NULL;
}
void moe_mem_free(void *p) { (void)p; }
int moe_mem_copy(void *dst, const void *src, size_t bytes, int up, void *stream) {
  (void)dst, (void)src, (void)bytes, (void)up, (void)stream;
  return -1;
}
int moe_mem_sync(void *stream) {
  (void)stream;
  return 0;
}
int moe_mem_capture(void *stream) {
  (void)stream;
  return -1;
}
void *moe_mem_captured(void *stream) {
  (void)stream;
  return NULL;
}
int moe_mem_replay(void *graph, void *stream) {
  (void)graph, (void)stream;
  return -1;
}
void moe_mem_graph_free(void *graph) { (void)graph; }
