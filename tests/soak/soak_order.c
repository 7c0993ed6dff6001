/* The launch order of a device run: a rank's workers take turns to launch, in a sequence
 * drawn from a seed every rank shares, and (serial) each launch waits on the GPU for the one
 * before it. What NCCL asks of applications that use several communicators at once. */
#include <stdio.h>

#include "soak.h"

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int soak_order_init(soak_order_t *o) {
  memset(o, 0, sizeof *o);
  if (pthread_mutex_init(&o->mu, NULL)) return -1;
  if (pthread_cond_init(&o->cv, NULL)) {
    pthread_mutex_destroy(&o->mu);
    return -1;
  }
  o->turn = -1;
  return 0;
}

void soak_order_fini(soak_order_t *o) {
  pthread_cond_destroy(&o->cv);
  pthread_mutex_destroy(&o->mu);
}

/* The next turn among the workers still in the phase; called with mu held. A worker that
 * has quit is skipped on every rank alike: its comm's ranks agreed on its last item, and a
 * turn drawn for it waits until it either launches or quits. */
static void advance(soak_order_t *o) {
  o->turn = -1;
  if ((o->done & o->members) == o->members) return;
  for (;;) {
    int k = (int)(soak_rand(&o->rng) % (uint64_t)o->nworkers);
    if ((o->members >> k & 1) && !(o->done >> k & 1)) {
      o->turn = k;
      break;
    }
  }
  pthread_cond_broadcast(&o->cv);
}

void soak_order_begin(soak_order_t *o, int nworkers, unsigned members, uint64_t seed) {
  pthread_mutex_lock(&o->mu);
  o->nworkers = nworkers, o->members = members, o->done = 0, o->rng = seed, o->last = NULL;
  advance(o);
  pthread_mutex_unlock(&o->mu);
}

int soak_order_enter(worker_t *w) {
  soak_order_t *o = w->order;
  if (!o || !o->on) return 0;
  pthread_mutex_lock(&o->mu);
  while (o->turn != w->id)
    pthread_cond_wait(&o->cv, &o->mu);
  void *last = o->last;
  pthread_mutex_unlock(&o->mu);
#ifdef WEFT_HAVE_CUDA
  if (o->serial && last &&
      cudaStreamWaitEvent((cudaStream_t)w->stream, (cudaEvent_t)last, 0) != cudaSuccess)
    return -1;
#else
  (void)last;
#endif
  return 0;
}

int soak_order_leave(worker_t *w) {
  soak_order_t *o = w->order;
  if (!o || !o->on) return 0;
  int rc = 0;
#ifdef WEFT_HAVE_CUDA
  /* what the next launch waits for; cudaStreamWaitEvent takes the event as recorded at
   * that call, so re-recording it later is safe */
  if (o->serial && cudaEventRecord((cudaEvent_t)w->event, (cudaStream_t)w->stream) != cudaSuccess)
    rc = -1;
#endif
  pthread_mutex_lock(&o->mu);
  if (o->serial && rc == 0) o->last = w->event;
  advance(o);
  pthread_mutex_unlock(&o->mu);
  return rc;
}

void soak_order_quit(worker_t *w) {
  soak_order_t *o = w->order;
  if (!o || !o->on) return;
  pthread_mutex_lock(&o->mu);
  o->done |= 1u << w->id;
  if (o->turn == w->id || o->turn < 0) advance(o);
  pthread_cond_broadcast(&o->cv);
  pthread_mutex_unlock(&o->mu);
}
