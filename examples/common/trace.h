/* --trace: a Chrome-trace timeline (chrome://tracing, Perfetto) of every rank's compute
 * spans, communication spans (from an operation's issue to the wait that saw it finished:
 * an upper bound on when it ran) and waits, merged into one file by rank 0. A NULL trace
 * records nothing, so callers need no checks. examples/trace_png draws the file. */
#ifndef WEFT_EXAMPLES_TRACE_H
#define WEFT_EXAMPLES_TRACE_H

#include "weft.h"

typedef struct trace trace_t;
enum { TRACE_COMPUTE, TRACE_COMM, TRACE_WAIT };

trace_t *trace_new(double t0); /* t0: this rank's start (seconds); NULL when out of memory */
void trace_free(trace_t *t);
void trace_span(trace_t *t, int kind, const char *name, double start, double end);
/* An operation queued on stream (0 or 1) at `at`: `what` of block (a layer, or GPT_EMBED,
 * GPT_FINAL). trace_settle closes every open one of that stream at `at`. */
void trace_issue(trace_t *t, int stream, const char *what, int block, double at);
void trace_settle(trace_t *t, int stream, double at);
/* Collective over comm: every rank's spans into path, times from the earliest start. 0, or
 * -1 with a message on stderr. */
int trace_write(trace_t *t, const char *path, weft_comm_t comm, int rank, int nranks);

#endif
