/*
 * workload: runs one closed-loop workload (put or range) against one server with N
 * clients, each with its own connection (kv_it_rpc: libkvclient) and one unary call in
 * flight, and reports throughput, latency percentiles, and the server's CPU time and RSS
 * over the measured window. By default every client runs on one libkvclient I/O thread:
 * each completion issues that client's next call from its callback, so the benchmark
 * costs the servers' CPU as little as it can. client_threads = 1 gives each client its own
 * thread making synchronous calls (two thread switches per call: the older, costlier
 * driver, kept to compare).
 *
 * Contract: kv_bench_run() blocks for warmup_ms + duration_ms (+ connection set-up) and
 * returns 0 or a negative errno-style code with errbuf set. Any failed call aborts the
 * run (a benchmark that hides errors is a lie). The callback (if any) runs on the calling
 * thread; the params (and endpoints/pids arrays) must outlive the call.
 */
#ifndef KV_BENCH_WORKLOAD_H
#define KV_BENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { KV_BENCH_PUT = 0, KV_BENCH_RANGE = 1 } kv_bench_kind;

typedef struct kv_bench_params {
    kv_bench_kind kind;
    const char *endpoint; /* "127.0.0.1:<port>" */
    pid_t server_pid;     /* for /proc CPU and RSS */
    uint32_t clients;
    uint32_t duration_ms;
    uint32_t warmup_ms;
    uint32_t keyspace;   /* keys "bench/%08u", [0, keyspace) */
    uint32_t value_size; /* put value size */
    uint32_t timeout_ms; /* per call */
    int serializable;    /* range: serializable instead of linearizable reads */
    /* Optional, for clusters: when n_endpoints > 0, client i connects to
     * endpoints[i % n_endpoints] (round-robin over the members) instead of endpoint. */
    const char *const *endpoints;
    uint32_t n_endpoints;
    /* Optional: when n_pids > 0, cpu_s is the sum over these processes instead of
     * server_pid (rss still comes from server_pid when it is not 0). */
    const pid_t *pids;
    uint32_t n_pids;
    /* Optional: called on the calling thread right before the measured window opens
     * (begin = 1) and right after it closes (begin = 0), e.g. to sample server metrics. */
    void (*window_cb)(void *arg, int begin);
    void *window_arg;
    int client_threads; /* 1: one thread per client, synchronous calls (see above) */
} kv_bench_params;

typedef struct kv_bench_result {
    uint64_t ops;
    double seconds;
    double ops_per_s;
    double p50_ms, p99_ms, max_ms;
    double cpu_s;        /* server utime+stime during the measured window */
    double client_cpu_s; /* this process's utime+stime over the same window (the clients) */
    uint64_t rss;        /* server RSS at the end, bytes */
} kv_bench_result;

int kv_bench_run(const kv_bench_params *p, kv_bench_result *r, char *errbuf, size_t errcap);

const char *kv_bench_kind_name(kv_bench_kind k);

#endif
