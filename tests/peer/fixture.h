/*
 * fixture.h - in-process peer transport fixture: up to 4 kv_peer_net members on one uv loop
 * on 127.0.0.1, with recording handlers. Test thread only.
 */
#ifndef KV_TEST_PEER_FIXTURE_H
#define KV_TEST_PEER_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "metrics/metrics.h"
#include "peer/peer_net.h"

#define FX_MAX 4

typedef struct fx fx;

typedef struct fx_node {
    fx *f;
    uint64_t id, cluster;
    kv_peer_net *net;
    kv_metrics *m;
    int port;
    const char *listen_host; /* NULL: 127.0.0.1 */
    kv_peer_net_config cfg;
    /* received frames: payload = 8-byte BE seq + pattern bytes */
    uint64_t msgs, bytes, order_errors, content_errors;
    uint64_t next_seq[FX_MAX + 1]; /* by sender id (ids 1..FX_MAX) */
    int up[FX_MAX + 1];
    int downs[FX_MAX + 1];
    /* snapshots */
    int snaps;
    char snap_path[4096];
    uint8_t snap_hdr[64];
    size_t snap_hdr_len;
    /* GET /members (peer_h1.c): this body is answered when set (before fx_start) */
    const char *members_json;
} fx_node;

struct fx {
    uv_loop_t loop;
    uv_timer_t tick;
    char dir[256];
    fx_node n[FX_MAX];
};

/* Creates the loop and a temp dir. */
void fx_init(fx *f);
/* Closes every member, drains the loop (asserting no handle leaks) and removes the dir. */
void fx_fini(fx *f);
/* Default config for member i (id i+1, cluster 0xc1, ping 100 ms, backoff 20..200 ms). */
void fx_config(fx *f, int i, uint64_t cluster);
/* Starts member i with f->n[i].cfg on its port (0 the first time; the bound port is kept). */
void fx_start(fx *f, int i);
/* Closes member i and runs the loop until its handles are freed. */
void fx_stop(fx *f, int i);
/* Adds member j as a peer of member i. */
void fx_add(fx *f, int i, int j);
/* Runs the loop until cond(arg) or timeout_ms. Returns cond's last value. */
int fx_run_until(fx *f, int (*cond)(void *), void *arg, int timeout_ms);
/* Runs the loop until members a and b both see the other up (asserts within 10 s). */
void fx_wait_up(fx *f, int a, int b);
/* fx_init + members 0 and 1 (cluster 0xc1) started, peered and connected. */
void fx_start_pair(fx *f);
/* Runs the loop for ms. */
void fx_run_for(fx *f, int ms);
/* Sends frame number seq (len bytes, len >= 8) from member i to member j. */
int fx_send(fx *f, int i, int j, uint32_t type, uint64_t seq, size_t len);
/* A metric of member i about peer id. */
double fx_metric(fx *f, int i, const char *name, uint64_t peer);
/* ESTABLISHED TCP sockets (IPv4) whose local port is port. */
int fx_established_local(int port);
/* ESTABLISHED TCP sockets (IPv4) whose remote port is port. */
int fx_established_remote(int port);
/* VmRSS / VmHWM of this process in bytes. */
uint64_t fx_rss(void);
uint64_t fx_hwm(void);
/* Resets VmHWM (best effort). */
void fx_reset_hwm(void);
/* Pattern byte k of frame/file seq (deterministic). */
uint8_t fx_pattern(uint64_t seq, uint64_t k);

#endif
