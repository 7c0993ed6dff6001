/* Chrome-trace timelines for the examples: see trace.h. Each rank writes its events to
 * path.partR, one JSON object a line; rank 0 joins them into path. */
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

typedef struct {
  char name[40];
  int kind, stream, open;
  double start, end;
} event_t;

struct trace {
  double t0;
  event_t *ev;
  size_t n, cap;
  int oom;
};

trace_t *trace_new(double t0) {
  trace_t *t = calloc(1, sizeof *t);
  if (t) t->t0 = t0;
  return t;
}

void trace_free(trace_t *t) {
  if (t) free(t->ev);
  free(t);
}

static event_t *add(trace_t *t) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 256;
    event_t *ev = realloc(t->ev, cap * sizeof *ev);
    if (!ev) return t->oom = 1, NULL;
    t->ev = ev, t->cap = cap;
  }
  event_t *e = &t->ev[t->n++];
  memset(e, 0, sizeof *e);
  return e;
}

void trace_span(trace_t *t, int kind, const char *name, double start, double end) {
  event_t *e = t ? add(t) : NULL;
  if (!e) return;
  snprintf(e->name, sizeof e->name, "%s", name);
  e->kind = kind, e->start = start, e->end = end;
}

void trace_issue(trace_t *t, int stream, const char *what, int block, double at) {
  event_t *e = t ? add(t) : NULL;
  if (!e) return;
  if (block == GPT_EMBED)
    snprintf(e->name, sizeof e->name, "%s embeddings", what);
  else if (block == GPT_FINAL)
    snprintf(e->name, sizeof e->name, "%s final norm", what);
  else
    snprintf(e->name, sizeof e->name, "%s layer %d", what, block);
  e->kind = TRACE_COMM, e->stream = stream, e->open = 1, e->start = e->end = at;
}

void trace_settle(trace_t *t, int stream, double at) {
  for (size_t i = 0; t && i < t->n; i++)
    if (t->ev[i].open && t->ev[i].stream == stream) t->ev[i].open = 0, t->ev[i].end = at;
}

static const char *const KIND[] = {"compute", "comm", "wait"};

int trace_write(trace_t *t, const char *path, weft_comm_t comm, int rank, int nranks) {
  double t0 = t->t0, first = 0;
  char part[4096];
  int bad = t->oom;
  if (weft_allreduce(&t0, &first, 1, WEFT_F64, WEFT_MIN, comm, NULL) != WEFT_SUCCESS) bad = 1;
  snprintf(part, sizeof part, "%s.part%d", path, rank);
  FILE *f = bad ? NULL : fopen(part, "w");
  for (size_t i = 0; f && i < t->n; i++) {
    const event_t *e = &t->ev[i];
    fprintf(f,
            "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.1f, \"dur\": %.1f, "
            "\"pid\": 0, \"tid\": %d}\n",
            e->name, KIND[e->kind], (e->start - first) * 1e6, (e->end - e->start) * 1e6,
            rank * 2 + (e->kind == TRACE_COMM)); /* a row for compute, one for communication */
  }
  if (!f || fclose(f) != 0) bad = 1;
  int any = 0;
  if (weft_allreduce(&bad, &any, 1, WEFT_I32, WEFT_MAX, comm, NULL) != WEFT_SUCCESS || any)
    return fprintf(stderr, "trace: rank %d: %s could not be written\n", rank, part), -1;
  if (rank != 0) return weft_barrier(comm, NULL) == WEFT_SUCCESS ? 0 : -1;
  FILE *out = fopen(path, "w");
  int rc = out ? 0 : -1, sep = 0;
  if (out) fprintf(out, "{\"traceEvents\": [\n");
  for (int r = 0; r < nranks && out; r++) {
    snprintf(part, sizeof part, "%s.part%d", path, r);
    FILE *in = fopen(part, "r");
    char line[512];
    rc |= in ? 0 : -1;
    while (in && fgets(line, sizeof line, in)) {
      line[strcspn(line, "\n")] = 0;
      fprintf(out, "%s%s", sep++ ? ",\n" : "", line);
    }
    if (in) fclose(in);
    remove(part);
  }
  if (out) {
    fprintf(out, "\n], \"displayTimeUnit\": \"ms\"}\n");
    rc |= fclose(out) != 0 ? -1 : 0;
  }
  if (rc) fprintf(stderr, "trace: %s could not be written\n", path);
  return weft_barrier(comm, NULL) == WEFT_SUCCESS ? rc : -1;
}
