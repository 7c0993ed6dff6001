/* The host engine's schedule cache: a call's schedule is built once and kept, per
 * communicator, for the calls with the same arguments (least recently used goes first). */
#include "err.h"
#include "host.h"

static int same_key(const weft_coll_args_t *a, const weft_coll_args_t *b) {
  return a->coll == b->coll && a->nranks == b->nranks && a->rank == b->rank && a->root == b->root &&
         a->count == b->count && a->chunk == b->chunk && a->in_place == b->in_place;
}

weft_result_t weft_host_sched(weft_comm_t c, const weft_task_t *t, const weft_sched_t **out,
                              weft_sched_t *owned, int *is_owned) {
  weft_algo_fn fn = weft_algo_lookup(t->args.coll, t->algo);
  if (!fn)
    return weft_set_error(WEFT_ERR_INTERNAL, "no %s algorithm for %s", weft_algo_name(t->algo),
                          weft_coll_name(t->args.coll));
  weft_host_t *h = weft_host_of(c);
  *is_owned = 0;
  if (t->args.coll != WEFT_COLL_ALLTOALLV) {
    weft_sched_entry_t *victim = &h->cache[0];
    for (int i = 0; i < WEFT_SCHED_CACHE; i++) {
      weft_sched_entry_t *e = &h->cache[i];
      if (e->last_use && e->algo == t->algo && same_key(&e->key, &t->args)) {
        e->last_use = ++h->cache_clock;
        *out = &e->sched;
        return WEFT_SUCCESS;
      }
      if (e->last_use < victim->last_use) victim = e;
    }
    weft_sched_free(&victim->sched);
    victim->last_use = 0;
    weft_result_t rc = fn(&t->args, &victim->sched);
    if (rc != WEFT_SUCCESS) {
      weft_sched_free(&victim->sched);
      return weft_set_error(rc, "building the %s schedule for %s failed", weft_algo_name(t->algo),
                            weft_coll_name(t->args.coll));
    }
    victim->key = t->args;
    victim->algo = t->algo;
    victim->last_use = ++h->cache_clock;
    *out = &victim->sched;
    return WEFT_SUCCESS;
  }
  weft_sched_init(owned);
  weft_result_t rc = fn(&t->args, owned);
  if (rc != WEFT_SUCCESS) {
    weft_sched_free(owned);
    return weft_set_error(rc, "building the alltoallv schedule failed");
  }
  *is_owned = 1;
  *out = owned;
  return WEFT_SUCCESS;
}
