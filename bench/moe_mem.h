/* moebench's buffers: host memory, or with --gpu device memory of the rank's GPU (GPUs shared
 * round-robin when there are more ranks), filled and read back through host copies on the
 * rank's stream. moe_mem.c holds the CUDA side; moe_mem_none.c stands in without CUDA. */
#ifndef WEFT_BENCH_MOE_MEM_H
#define WEFT_BENCH_MOE_MEM_H

#include <stddef.h>

/* GPUs visible, counted in a child process (ranks are forked after). */
int moe_mem_gpus(void);
/* The rank's GPU (made current) and a new non-blocking stream; -1 on failure, with a message. */
int moe_mem_open(int rank, void **stream);
void moe_mem_close(void *stream);
void *moe_mem_alloc(size_t bytes); /* zeroed device memory; NULL on failure */
void moe_mem_free(void *p);
/* bytes from host to device (up) or back, finished on return; 0 or -1 with a message. */
int moe_mem_copy(void *dst, const void *src, size_t bytes, int up, void *stream);
int moe_mem_sync(void *stream); /* 0 once the stream's work is done */
/* A CUDA graph of what the stream gets between begin and end (global capture mode): end
 * returns it instantiated, or NULL with a message; launch replays it on the stream. */
int moe_mem_capture(void *stream);
void *moe_mem_captured(void *stream);
int moe_mem_replay(void *graph, void *stream);
void moe_mem_graph_free(void *graph);

#endif
