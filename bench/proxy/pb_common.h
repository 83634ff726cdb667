/*
 * pb_common.h - what the proxy benchmarks (proxybench, watchfan) share: clocks, a process's
 * CPU time, one /metrics sum, and P proxies (kvd's or etcd's `grpc-proxy start`) in front of a
 * bench/cluster cluster. Benchmark code, one thread.
 */
#ifndef PB_COMMON_H
#define PB_COMMON_H

#include "cluster.h"
#include "kvt_proc.h"

#include <kvclient.h>

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pb_proxy {
    uint16_t port, mport;
    char ep[64];
    char log[PATH_MAX];
    kvt_proc proc;
};

uint64_t pb_now_ms(void);
uint64_t pb_now_us(void);
/* utime + stime of pid in seconds, or -1. */
double pb_cpu_s(pid_t pid);
/* The sum of metric `name` (samples whose labels contain `label`; NULL: all) at
 * 127.0.0.1:port/metrics, in *v. 0 or a negative errno. */
int pb_metric(uint16_t port, const char *name, const char *label, double *v);
/* Starts p proxies of c's kind, each with --endpoints of c's three members (and, for kvd's
 * proxies, the flag kvd_flag unless NULL), and waits until each answers a Range (20 s). 0 or
 * a negative errno; the caller terminates them. */
int pb_start_proxies(kv_bc_cluster *c, struct pb_proxy *px, int p, const char *kvd_flag);

/* A 3-member cluster of kind, its leader's index in *leader, and p proxies in front of it
 * (pb_start_proxies, with kvd_flag). 0 or a negative errno (the reason on stderr); the caller
 * destroys c and terminates the proxies in any case. */
int pb_cluster_and_proxies(kv_bc_cluster *c, kv_it_kind kind, struct pb_proxy *px, int p,
                           const char *kvd_flag, int *leader);
/* A libkvclient client of endpoint ep alone (on loop group lg, or its own thread if NULL).
 * 0 or -EIO (the reason on stderr). */
int pb_client(const char *ep, kvc_loop_group *lg, kvc_client **out);
/* The median of the double at byte offset off over the n results at rs (size bytes each,
 * each starting with an int `ok`; results without it are left out), or -1 if none is ok. */
double pb_median(const void *rs, size_t size, int n, size_t off);

#endif
