/* The proxy device transport, for ranks on other hosts: this rank's kernels write into a
 * mirror of such a rank's region, in this process's pinned memory, and read what it sends
 * from the inbox (host memory too, or the host-staged region itself). The region proxy
 * (src/proxy/region.h), started by the gpu engine, carries both ways over the network. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dev_transport.h"
#include "err.h"

#define HINT "lower WEFT_P2P_CHANNELS or WEFT_P2P_CHUNK_BYTES"

static int proxy_reaches(int same_host) { return !same_host; }

/* Zeroed, like a fresh segment; never another process's. Only what weft_regions_pin pins is
 * ever touched, so the rest costs address space, not memory. */
static weft_result_t private_seg(size_t bytes, const char *what, int r, char **seg) {
  void *p =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return weft_set_error(WEFT_ERR_NO_MEMORY, "proxy: no memory for %s rank %d (%zu bytes); " HINT,
                          what, r, bytes);
  *seg = p;
  return WEFT_SUCCESS;
}

static weft_result_t segments(weft_regions_t *m, const uint8_t *take) {
  for (int s = 0; s < m->nslots; s++)
    if (take[s])
      CHECK(private_seg(m->bytes, "a mirror of the region of", m->slot_rank[s], &m->mirror[s]));
  if (m->host) return WEFT_SUCCESS; /* remote ranks write into the host-staged region itself */
  return private_seg(m->bytes, "what comes from other hosts to", m->rank, &m->inbox_seg);
}

static weft_result_t proxy_setup(weft_regions_t *m, const weft_dev_setup_t *in, uint8_t *take) {
  if (!m->spans) return WEFT_SUCCESS; /* one host (the same on every rank) */
  /* address space may run out on one rank only: all agree before any proxy starts */
  char why[512] = "";
  weft_result_t mrc = segments(m, take);
  if (mrc != WEFT_SUCCESS) snprintf(why, sizeof why, "%s", weft_thread_error());
  int all = 0, first_bad = -1;
  CHECK(weft_dev_all_have(in, m->rank, mrc == WEFT_SUCCESS, &all, &first_bad));
  if (!all)
    return weft_set_error(mrc != WEFT_SUCCESS ? mrc : WEFT_ERR_SYSTEM,
                          "proxy: rank %d could not set up the host memory for ranks on other "
                          "hosts%s%s",
                          first_bad, why[0] ? ": " : "", why);
  return WEFT_SUCCESS;
}

/* Pins [at, at + bytes) as weft_dev_register_host does and keeps it for teardown; its device
 * address in *dev. */
static weft_result_t pin_run(weft_regions_t *m, char *at, size_t bytes, int r, char **dev) {
  if (m->npins == m->pins_cap) {
    int cap = m->pins_cap ? 2 * m->pins_cap : 64;
    char **p = realloc(m->pins, sizeof *p * (size_t)cap);
    if (!p) return weft_set_error(WEFT_ERR_NO_MEMORY, "proxy: out of memory");
    m->pins = p, m->pins_cap = cap;
  }
  char registered = 0;
  weft_result_t rc = weft_dev_register_host(at, bytes, "proxy", r, &registered, dev);
  if (registered) {
    m->pins[m->npins++] = at;
    m->pinned_bytes += bytes;
    return rc; /* a device address it could not give: its error as it is */
  }
  char why[512]; /* its text, copied: the new one is written where it lies */
  snprintf(why, sizeof why, "%s", weft_thread_error());
  return weft_set_error(rc,
                        "%s (pinning %zu bytes, %zu pinned so far); raise the locked-memory limit "
                        "(ulimit -l) or " HINT,
                        why, bytes, m->pinned_bytes);
}

/* The runs of seg (one region) this rank uses, or all of it where the GPU's address of pinned
 * host memory is not the host's own (runs pinned apart would not lie at their offsets from one
 * base there); *dev the region's device address. */
static weft_result_t pin_region(weft_regions_t *m, char *seg, const weft_span_t *sp, int n,
                                int whole, int r, char **dev) {
  if (whole) return pin_run(m, seg, m->bytes, r, dev);
  *dev = seg; /* the GPU's address is the host's (n = 0: an inbox no kernel reads) */
  long page = sysconf(_SC_PAGESIZE);
  size_t limit = (m->bytes + (size_t)page - 1) / (size_t)page * (size_t)page; /* mmap's length */
  for (int i = 0; i < n; i++) {
    if (sp[i].off + sp[i].bytes > limit || (i > 0 && sp[i].off < sp[i - 1].off + sp[i - 1].bytes))
      return weft_set_error(WEFT_ERR_INTERNAL,
                            "proxy: run %d of rank %d's region ([%llu, +%llu)) is past its %zu "
                            "bytes or out of order",
                            i, r, (unsigned long long)sp[i].off, (unsigned long long)sp[i].bytes,
                            m->bytes);
    char *at = seg + sp[i].off, *got = NULL;
    CHECK(pin_run(m, at, sp[i].bytes, r, &got));
    if (got != at)
      return weft_set_error(WEFT_ERR_INTERNAL,
                            "proxy: GPU %d maps pinned host memory at an address of its own, "
                            "though it says it uses the host's",
                            m->device);
  }
  return WEFT_SUCCESS;
}

static weft_result_t proxy_pin(weft_regions_t *m, const weft_span_t *const *spans,
                               const int *nspans) {
  if (!m->spans) return WEFT_SUCCESS;
  int same = 0;
  if (cudaDeviceGetAttribute(&same, cudaDevAttrCanUseHostPointerForRegisteredMem, m->device) !=
      cudaSuccess)
    same = 0;
  for (int s = 0; s < m->nslots; s++)
    if (m->mirror[s] && !m->region[s])
      CHECK(
          pin_region(m, m->mirror[s], spans[s], nspans[s], !same, m->slot_rank[s], &m->region[s]));
  if (m->inbox_seg && !m->inbox)
    CHECK(pin_region(m, m->inbox_seg, spans[m->self], nspans[m->self], !same, m->rank, &m->inbox));
  return WEFT_SUCCESS;
}

static void proxy_teardown(weft_regions_t *m) {
  for (int i = 0; i < m->npins; i++)
    cudaHostUnregister(m->pins[i]);
  free(m->pins);
  m->pins = NULL, m->npins = m->pins_cap = 0, m->pinned_bytes = 0;
  for (int s = 0; s < m->nslots; s++)
    if (m->mirror[s]) {
      munmap(m->mirror[s], m->bytes);
      m->mirror[s] = m->region[s] = NULL;
    }
  if (m->inbox_seg) munmap(m->inbox_seg, m->bytes);
  m->inbox_seg = m->inbox = NULL;
}

const weft_dev_transport_t weft_dev_proxy = {
    .size = sizeof(weft_dev_transport_t),
    .name = "proxy",
    .reaches = proxy_reaches,
    .setup = proxy_setup,
    .pin = proxy_pin,
    .teardown = proxy_teardown,
};
