/* The proxy thread (proxy.h): for every peer, the frame being sent (a send connection's oldest
 * chunk, header then payload, written straight from its slot) and the frame being received
 * (header, then payload copied into the receive connection's next slot once it has one). A
 * receive connection without a free slot leaves its bytes in the transport: the stream backs
 * up to the sender, whose kernels then wait on their own FIFO's credits. */
#include "proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pump.h"

/* A frame's header on the stream. */
typedef struct {
  uint32_t chan, bytes;
} frame_t;

enum { MAX_SLOT_BYTES = 1 << 30 };

typedef struct {
  int *sends, nsends; /* this peer's send connections (indices), taken in turn */
  int rr;
  int cur; /* the send connection whose chunk is going out, or -1 */
  frame_t hdr;
  size_t at;    /* of the header and its chunk together, sent */
  int *recv_of; /* [nchan] this peer's receive connection of each channel, or -1 */
  int nrecvs;   /* how many it has: a peer with none is never read from */
  uint8_t rh[sizeof(frame_t)];
  uint32_t rh_got;
  int rcur;  /* the receive connection of the frame coming in, or -1 (reading a header) */
  int rslot; /* it holds a slot for that frame */
  uint32_t rbytes, rgot;
} peer_t;

struct weft_proxy {
  weft_proxy_init_t in;
  weft_proxy_conn_t *send, *recv;
  peer_t *peers;
  weft_pump_t pump;
};

static char *slot_of(const weft_proxy_conn_t *c, unsigned slot) {
  return c->buf + (size_t)slot * c->slot_bytes;
}

/* Sends the peer's chunks until none is ready or the stream is full; *moved: some byte went. */
static weft_result_t send_progress(weft_proxy_t *P, int peer, int *moved) {
  peer_t *q = &P->peers[peer];
  for (;;) {
    if (q->cur < 0) {
      for (int i = 0; i < q->nsends && q->cur < 0; i++) {
        int k = q->sends[(q->rr + i) % q->nsends];
        if (weft_fifo_ready(P->send[k].fifo)) q->cur = k, q->rr = (q->rr + i + 1) % q->nsends;
      }
      if (q->cur < 0) return WEFT_SUCCESS;
      const weft_proxy_conn_t *c = &P->send[q->cur];
      uint32_t n = weft_fifo_size(c->fifo);
      if (n > c->slot_bytes)
        return weft_set_error(WEFT_ERR_INTERNAL,
                              "proxy: a chunk of %u bytes posted to a %u-byte slot (channel %d "
                              "to rank %d)",
                              n, c->slot_bytes, c->chan, peer);
      q->hdr = (frame_t){.chan = (uint32_t)c->chan, .bytes = n};
      q->at = 0;
    }
    const weft_proxy_conn_t *c = &P->send[q->cur];
    CHECK(weft_proxy_give(&P->in.link, peer, &q->hdr, sizeof q->hdr,
                          slot_of(c, weft_fifo_slot(c->fifo)), q->hdr.bytes, &q->at, moved));
    if (q->at < sizeof q->hdr + q->hdr.bytes) return WEFT_SUCCESS;
    weft_fifo_pop(c->fifo); /* on the stream: the slot is the kernel's again */
    atomic_fetch_add(&P->pump.sent, 1);
    q->cur = -1;
    *moved = 1;
  }
}

/* Receives the peer's frames into their connections' slots while bytes and slots last. */
static weft_result_t recv_progress(weft_proxy_t *P, int peer, int *moved) {
  peer_t *q = &P->peers[peer];
  size_t n;
  if (!q->nrecvs) return WEFT_SUCCESS;
  for (;;) {
    if (q->rcur < 0) {
      while (q->rh_got < sizeof q->rh) {
        CHECK(weft_proxy_take(&P->in.link, peer, q->rh + q->rh_got, sizeof q->rh - q->rh_got, &n));
        if (!n) return WEFT_SUCCESS;
        q->rh_got += (uint32_t)n;
        *moved = 1;
      }
      frame_t f;
      memcpy(&f, q->rh, sizeof f);
      q->rh_got = 0;
      int k = f.chan < (uint32_t)P->in.nchan ? q->recv_of[f.chan] : -1;
      if (k < 0)
        return weft_set_error(WEFT_ERR_PROTOCOL,
                              "proxy: rank %d sent a chunk on channel %u, where this rank has no "
                              "receive connection from it",
                              peer, f.chan);
      if (f.bytes > P->recv[k].slot_bytes)
        return weft_set_error(WEFT_ERR_PROTOCOL,
                              "proxy: rank %d sent a chunk of %u bytes on channel %u, whose "
                              "slots hold %u",
                              peer, f.bytes, f.chan, P->recv[k].slot_bytes);
      q->rcur = k, q->rslot = 0, q->rbytes = f.bytes, q->rgot = 0;
    }
    weft_proxy_conn_t *c = &P->recv[q->rcur];
    if (!q->rslot) {
      if (!weft_fifo_room(c->fifo)) return WEFT_SUCCESS; /* the kernel still reads every slot */
      q->rslot = 1;
    }
    char *dst = slot_of(c, (unsigned)(c->fifo->head % WEFT_FIFO_SLOTS));
    while (q->rgot < q->rbytes) {
      CHECK(weft_proxy_take(&P->in.link, peer, dst + q->rgot, q->rbytes - q->rgot, &n));
      if (!n) return WEFT_SUCCESS;
      q->rgot += (uint32_t)n;
      *moved = 1;
    }
    weft_fifo_post(c->fifo, q->rbytes);
    atomic_fetch_add(&P->pump.received, 1);
    q->rcur = -1;
    *moved = 1;
  }
}

/* pump.h's pass: peer's frames both ways; busy while one is half done or a chunk waits. */
static weft_result_t pass(void *self, int peer, int *moved, int *busy) {
  weft_proxy_t *P = self;
  CHECK(send_progress(P, peer, moved));
  CHECK(recv_progress(P, peer, moved));
  const peer_t *q = &P->peers[peer];
  *busy = q->cur >= 0 || q->rcur >= 0 || q->rh_got;
  for (int i = 0; i < q->nsends && !*busy; i++)
    *busy = weft_fifo_ready(P->send[q->sends[i]].fifo) > 0;
  return WEFT_SUCCESS;
}

static weft_result_t check_conns(const weft_proxy_init_t *in, const weft_proxy_conn_t *cs, int n,
                                 const char *dir, uint8_t *seen) {
  for (int i = 0; i < n; i++) {
    const weft_proxy_conn_t *c = &cs[i];
    if (c->peer < 0 || c->peer >= in->link.nranks || c->peer == in->link.rank || c->chan < 0 ||
        c->chan >= in->nchan || !c->fifo || !c->buf || !c->slot_bytes ||
        c->slot_bytes > MAX_SLOT_BYTES)
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "proxy: %s connection %d (rank %d, channel %d, slots of %u bytes) is "
                            "invalid for rank %d of %d with %d channels",
                            dir, i, c->peer, c->chan, c->slot_bytes, in->link.rank, in->link.nranks,
                            in->nchan);
    uint8_t *s = &seen[(size_t)c->peer * (size_t)in->nchan + (size_t)c->chan];
    if (*s)
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "proxy: two %s connections for rank %d, channel %d", dir, c->peer,
                            c->chan);
    *s = 1;
  }
  return WEFT_SUCCESS;
}

static void proxy_free(weft_proxy_t *P) {
  if (P->peers)
    for (int r = 0; r < P->in.link.nranks; r++) {
      free(P->peers[r].sends);
      free(P->peers[r].recv_of);
    }
  free(P->peers);
  free(P->send);
  free(P->recv);
  free(P);
}

weft_result_t weft_proxy_start(const weft_proxy_init_t *in, weft_proxy_t **out) {
  if (!in || !out || !in->link.tr || in->link.nranks < 1 || in->link.rank < 0 ||
      in->link.rank >= in->link.nranks || in->nchan < 1 || in->nsend < 0 || in->nrecv < 0 ||
      (in->nsend && !in->send) || (in->nrecv && !in->recv) || in->link.timeout_ms <= 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "proxy: invalid arguments");
  weft_result_t rc = WEFT_SUCCESS;
  size_t pairs = (size_t)in->link.nranks * (size_t)in->nchan;
  uint8_t *seen = calloc(pairs, 2);
  weft_proxy_t *P = calloc(1, sizeof *P);
  if (!seen || !P) ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "proxy: out of memory");
  CHECK_GOTO(check_conns(in, in->send, in->nsend, "send", seen), rc, out);
  CHECK_GOTO(check_conns(in, in->recv, in->nrecv, "receive", seen + pairs), rc, out);
  P->in = *in;
  P->send = calloc((size_t)in->nsend + 1, sizeof *P->send);
  P->recv = calloc((size_t)in->nrecv + 1, sizeof *P->recv);
  P->peers = calloc((size_t)in->link.nranks, sizeof *P->peers);
  if (!P->send || !P->recv || !P->peers)
    ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "proxy: out of memory");
  memcpy(P->send, in->send, sizeof *P->send * (size_t)in->nsend);
  memcpy(P->recv, in->recv, sizeof *P->recv * (size_t)in->nrecv);
  for (int r = 0; r < in->link.nranks; r++) {
    peer_t *q = &P->peers[r];
    q->cur = q->rcur = -1;
    q->sends = calloc((size_t)in->nchan, sizeof *q->sends);
    q->recv_of = malloc(sizeof *q->recv_of * (size_t)in->nchan);
    if (!q->sends || !q->recv_of) ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "proxy: out of memory");
    for (int ch = 0; ch < in->nchan; ch++)
      q->recv_of[ch] = -1;
  }
  for (int i = 0; i < in->nsend; i++) {
    peer_t *q = &P->peers[in->send[i].peer];
    q->sends[q->nsends++] = i;
  }
  for (int i = 0; i < in->nrecv; i++) {
    peer_t *q = &P->peers[in->recv[i].peer];
    q->recv_of[in->recv[i].chan] = i;
    q->nrecvs++;
  }
  weft_pump_init_t pin = {.link = in->link, .pass = pass, .self = P};
  CHECK_GOTO(weft_pump_start(&P->pump, &pin), rc, out);
  *out = P;
out:
  free(seen);
  if (rc != WEFT_SUCCESS && P) proxy_free(P);
  return rc;
}

weft_result_t weft_proxy_status(weft_proxy_t *p) { return weft_pump_status(&p->pump); }

void weft_proxy_counts(weft_proxy_t *p, uint64_t *sent, uint64_t *received) {
  weft_pump_counts(&p->pump, sent, received);
}

void weft_proxy_stop(weft_proxy_t *p) {
  if (!p) return;
  weft_pump_stop(&p->pump);
  proxy_free(p);
}
