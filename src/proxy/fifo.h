/* The FIFO between a producer and a consumer of chunks that sit on either side of the proxy
 * (a kernel or its host stand-in on one end, the proxy thread on the other): head counts the
 * chunks posted, tail the chunks the consumer is done with, so head - tail slots are in use and
 * tail is the credit that lets the producer reuse a slot. The sizes travel in the slots. The
 * layout is plain C for host-mapped memory, which CUDA kernels read and write too. */
#ifndef WEFT_FIFO_H
#define WEFT_FIFO_H

#include <stddef.h>
#include <stdint.h>

enum { WEFT_FIFO_SLOTS = 8 };

/* head and tail on their own cache lines: each is written by one side only. */
typedef struct weft_fifo {
  uint64_t head; /* chunks posted (the producer writes it) */
  uint8_t pad0[56];
  uint64_t tail; /* chunks consumed (the consumer writes it) */
  uint8_t pad1[56];
  uint32_t size[WEFT_FIFO_SLOTS]; /* bytes of the chunk in each slot, set before head moves */
} weft_fifo_t;

/* The host side's loads and stores: acquire what the other side published, release what
 * this side wrote before a counter moves. */
static inline uint64_t weft_fifo_load(const uint64_t *w) {
  return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}
static inline void weft_fifo_store(uint64_t *w, uint64_t v) {
  __atomic_store_n(w, v, __ATOMIC_RELEASE);
}

/* Producer: slots free now (its own head is exact; the tail may only grow). */
static inline unsigned weft_fifo_room(const weft_fifo_t *f) {
  return WEFT_FIFO_SLOTS - (unsigned)(f->head - weft_fifo_load(&f->tail));
}
/* Producer: the chunk written into slot head % WEFT_FIFO_SLOTS is n bytes: publish it. */
static inline void weft_fifo_post(weft_fifo_t *f, uint32_t n) {
  f->size[f->head % WEFT_FIFO_SLOTS] = n;
  weft_fifo_store(&f->head, f->head + 1);
}
/* Consumer: chunks posted and not yet consumed. */
static inline unsigned weft_fifo_ready(const weft_fifo_t *f) {
  return (unsigned)(weft_fifo_load(&f->head) - f->tail);
}
/* Consumer: the oldest chunk's slot and size (only while weft_fifo_ready). */
static inline unsigned weft_fifo_slot(const weft_fifo_t *f) {
  return (unsigned)(f->tail % WEFT_FIFO_SLOTS);
}
static inline uint32_t weft_fifo_size(const weft_fifo_t *f) { return f->size[weft_fifo_slot(f)]; }
/* Consumer: done with the oldest chunk; its slot goes back to the producer. */
static inline void weft_fifo_pop(weft_fifo_t *f) { weft_fifo_store(&f->tail, f->tail + 1); }

#endif
