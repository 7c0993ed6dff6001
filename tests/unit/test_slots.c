/* Peer slots (src/gpu/slots.c): every rank's table agrees with each peer's about where it
 * writes flags and chunks, staging indices are distinct and fit the region, identity up to
 * WEFT_DEV_MAX_RANKS ranks, ring neighbours past it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>

#include "slots.h"

/* What rank r's table says of peer slot s must hold from the peer's side. */
static void check_pair(const weft_dev_slots_t *all, int r, int s) {
  const weft_dev_slots_t *me = &all[r];
  int p = me->rank[s];
  const weft_dev_slots_t *them = &all[p];
  int t = weft_dev_slot_of(them, r);
  assert_true(t >= 0);                  /* reach is mutual */
  assert_int_equal(me->flag_out[s], t); /* our flags lie at our slot in its table */
  assert_int_equal(me->stage_out[s], them->stage_in[t]); /* and our chunks where it reads */
  assert_int_equal(them->flag_out[t], s);
  assert_true(them->stage_in[t] < them->nsrc);
}

static void tables_agree(void **st) {
  (void)st;
  for (int n = 1; n <= 40; n++) {
    weft_dev_slots_t *all = calloc((size_t)n, sizeof *all);
    assert_non_null(all);
    for (int r = 0; r < n; r++)
      weft_dev_slots_make(r, n, &all[r]);
    for (int r = 0; r < n; r++) {
      const weft_dev_slots_t *me = &all[r];
      assert_true(me->nslots >= 1 && me->nslots <= WEFT_DEV_MAX_RANKS);
      assert_int_equal(me->rank[me->self], r);
      assert_int_equal(me->identity, n <= WEFT_DEV_MAX_RANKS);
      int used[WEFT_DEV_MAX_RANKS] = {0};
      for (int s = 0; s < me->nslots; s++) {
        assert_true(me->rank[s] >= 0 && me->rank[s] < n);
        assert_int_equal(weft_dev_slot_of(me, me->rank[s]), s); /* one slot per rank */
        if (s == me->self) continue;
        assert_int_equal(used[me->stage_in[s]]++, 0); /* each sender its own staging */
        check_pair(all, r, s);
      }
      if (n <= WEFT_DEV_MAX_RANKS) {
        for (int s = 0; s < n; s++)
          assert_int_equal(me->rank[s], s);
        assert_int_equal(me->nsrc, n > 1 ? n - 1 : 1);
      } else {
        assert_int_equal(me->nslots, 3);
        assert_int_equal(me->rank[0], (r + n - 1) % n);
        assert_int_equal(me->rank[2], (r + 1) % n);
        assert_int_equal(weft_dev_slot_of(me, (r + 2) % n), -1); /* beyond the neighbours */
      }
    }
    free(all);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(tables_agree)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
