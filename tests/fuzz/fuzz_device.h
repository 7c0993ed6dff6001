/* The device variant of the API fuzzer: fuzz_api.c built with -DWEFT_FUZZ_DEVICE, driven by
 * replay_device.c (replay_api_device). Its fuzz_outcome runs each input's steps on device
 * communicators on GPU 0 and counts what happened instead of aborting on a violation. */
#ifndef WEFT_FUZZ_DEVICE_H
#define WEFT_FUZZ_DEVICE_H

typedef struct {
  long inputs, steps;       /* replayed */
  long accepted;            /* calls issued and completed as the model says */
  long refused_invalid;     /* refused with WEFT_ERR_INVALID_ARG, as the contract says */
  long refused_unsupported; /* valid, refused by the device with WEFT_ERR_UNSUPPORTED */
  long skipped;             /* valid but reaching outside the arena: not issued */
  long violations;          /* anything else (reported on stderr): must be 0 */
} fuzz_device_stats_t;

/* Makes the 1-rank and the 2-rank device communicators on GPU 0, rank 1 of the latter as a
 * thread of this process or, with fork_rank1, in a forked child process (before CUDA is
 * initialised here). Call it before anything else touches CUDA. 0, or -1 with the reason on
 * stderr (no GPU: every rank's init needs one). */
int fuzz_device_start(int fork_rank1);

/* Destroys the communicators (unless a violation may have left one failed) and ends the child. */
void fuzz_device_stop(void);

void fuzz_device_stats(fuzz_device_stats_t *out);

#endif
