/*
 * px_util: a `kvd grpc-proxy start` process for the tests of tests/proxy, in front of a
 * kvt_cluster (tests/lib/kvt_cluster.h), and the few things the tests ask of it.
 *
 * Ownership: px is caller-owned (static in the tests); px_stop kills the proxy (its log
 * stays in the cluster's run directory). Threads: one test thread. Every wait is bounded.
 * Functions return 0 or a negative errno unless stated.
 */
#ifndef PX_UTIL_H
#define PX_UTIL_H

#include "kvt_cluster.h"

#include <stddef.h>
#include <stdint.h>

/* 1 in a sanitizer build (the tests are built with the servers' flags): RSS bounds are
 * printed, not applied (ASan's shadow memory and quarantine inflate RSS). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PX_SANITIZED 1
#endif
#endif
#ifndef PX_SANITIZED
#define PX_SANITIZED 0
#endif

typedef struct px {
    kvt_proc proc;
    uint16_t port, metrics_port;
    char endpoint[32]; /* 127.0.0.1:<port> */
    char log[PATH_MAX];
    /* argv words run before kvd (NULL-terminated; NULL: none), e.g. an `unshare` that gives
     * the proxy its own /etc/resolv.conf (test_discovery.c); set before px_start */
    const char *const *wrap;
    /* an SSL_CTX * (ALPN h2) when the proxy serves TLS (--auto-tls, --cert-file): px_start's
     * readiness probe then speaks TLS with it; set before px_start */
    void *probe_ssl_ctx;
    /* start without --metrics-addr (metrics_port stays 0); set before px_start */
    int no_metrics_addr;
} px;

/* Starts an n-member cluster of kvd (or etcd, KV_TEST_SERVER) with tests/lib's defaults and
 * waits until it is writable (60 s). */
int px_cluster_start(kvt_cluster *c, int n);
/* Starts the proxy with --endpoints = the members listed in order[] (n of them; NULL: every
 * member in index order) and the extra flags (NULL-terminated, may be NULL); waits until it
 * answers Maintenance.Status through the cluster (10 s). */
int px_start(px *x, kvt_cluster *c, const int *order, int n, const char *const *extra);
/* px_start on x->port when it is set (the caller picked it with kvt_port_free, e.g. to pass
 * it in a flag), else on a free port. */
int px_start_on(px *x, kvt_cluster *c, const int *order, int n, const char *const *extra);
void px_stop(px *x);
/* A 3-member cluster and the proxy with a follower first in its --endpoints (the member it
 * connects to, which a test may stop while the cluster stays healthy), the other follower
 * next, the leader last; extra as for px_start. The first member's index in *follower, the
 * leader's in *leader. 0, or a negative errno (-EAGAIN: no leader within 10 s). */
int px_start_on_follower(px *x, kvt_cluster *c, const char *const *extra, int *follower,
                         int *leader);
/* A metric series (exact name and labels) of the proxy (its --metrics-addr, else its
 * --listen-addr); -1 if absent. Fails the test if /metrics cannot be fetched. */
double px_metric(px *x, const char *series);
/* Sum over the samples of `name` whose labels contain `contains` (NULL: all), read from
 * text. */
double px_metric_sum_text(const char *text, const char *name, const char *contains);
/* etcdctl (ETCDCTL_API=3) against the proxy with NULL-terminated args. */
int px_ctl(px *x, uint32_t timeout_ms, kvt_cmd_result *res, ...);
/* The ID and TTL of one packed etcdserverpb.LeaseKeepAliveResponse (a gRPC message's
 * payload). 0, or -EBADMSG if it does not decode. */
int px_ka_resp(const uint8_t *m, size_t n, int64_t *id, int64_t *ttl);
/* A libkvclient client of endpoint alone, with the library's defaults; fails the test if
 * kvc_open does. The caller closes it (kvc_close). */
struct kvc_client *px_client(const char *endpoint);
/* How many of the leases ids[0..n) member `endpoint` reports expired (LeaseTimeToLive TTL
 * <= 0), asked over a client of its own; fails the test on an RPC error. */
int px_leases_dead(const char *endpoint, const int64_t *ids, size_t n);
/* grpc_server_started_total of method (e.g. "LeaseKeepAlive") on member i. */
double px_member_started(kvt_cluster *c, int i, const char *method);

#endif
