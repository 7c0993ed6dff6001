/* Spawns N local ranks as forked processes that share one unique id (collbench --ranks and
 * the multi-process tests). Not part of libweft: programs use it to start ranks. */
#ifndef WEFT_LAUNCH_H
#define WEFT_LAUNCH_H

#include <stdint.h>

#include "weft.h"

typedef int (*launch_fn)(int rank, int nranks, weft_unique_id_t id, void *arg);

/* Runs fn in nranks child processes; returns 0 when every rank returned 0 in time. Once a
 * rank exits non-zero or dies, the others get a grace period (10 s, times
 * WEFT_TEST_TIME_SCALE) to end by themselves, then are killed; after timeout_s all are
 * killed. Either way the result is nonzero. */
int launch_local(int nranks, launch_fn fn, void *arg, int timeout_s);

/* Runs fn in a forked child and returns its exit status (0-255; 0 if the child failed).
 * For probes that must not initialise a library in this process, e.g. counting GPUs with
 * CUDA before ranks are forked. */
int launch_in_child(int (*fn)(void));

/* CLOCK_MONOTONIC in milliseconds. */
int64_t launch_now_ms(void);

/* WEFT_TEST_TIME_SCALE (1 when unset or not positive): how much slower than usual the tests
 * run (the sanitizer builds set 3), so that every time bound stretches alike. */
double launch_time_scale(void);
/* Open file descriptors of this process (the resource tests and the soak watch them grow). */
int launch_open_fds(void);

/* Tests of fake hosts: with WEFT_TEST_NETNS=ns0,ns1 the calling process enters network
 * namespace ns[rank % 2] and takes it as its host identity. Returns 0, also when unset. */
int launch_join_netns(int rank);
/* Sets the end of tests/fault/netns.sh's veth pair in rank's namespace (rank % 2, named by
 * WEFT_TEST_NETNS_LINKS) down: the hosts no longer reach each other, every process alive.
 * Returns 0, else -1 having said why on stdout. */
int launch_cut_link(int rank);
/* With WEFT_TEST_HOSTS=K each rank takes fake host rank % K (WEFT_HOSTID and NCCL_HOSTID), so
 * that any launched test (and collbench --hosts) runs across hosts on one machine. Returns 0. */
int launch_fake_hosts(int rank);

#endif
