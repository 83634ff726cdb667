/*
 * testutil.h - helpers for the libkvclient tests: start/stop/restart a real server process
 * (etcd or kvd, chosen by KV_TEST_SERVER), tiny misbehaving TCP servers, connection and fd
 * counting. Test-only code; every function returns 0 or -1 and prints why on failure.
 */
#ifndef KVC_TESTUTIL_H
#define KVC_TESTUTIL_H

#include <kvclient.h>
#include <sys/types.h>

#include "kvt_proc.h"

struct kvt_server {
    pid_t pid;     /* 0 when not running (a copy of proc.pid) */
    kvt_proc proc; /* tests/lib launcher: spawn, signals, reap */
    int client_port, peer_port, metrics_port;
    char dir[256];
    char endpoint[64];
    char kind[8]; /* "etcd" or "kvd" */
};

/* Sum of the values of the Prometheus series `name` (optionally only lines containing
 * `filter`) scraped from http://127.0.0.1:<metrics_port>/metrics; -1 if none is exposed. */
double kvt_metric(const struct kvt_server *s, const char *name, const char *filter);
/* Server-side count of LeaseKeepAlive requests: kvd_lease_keepalive_requests_total (kvd) or
 * grpc_server_msg_received_total{grpc_method="LeaseKeepAlive"} (etcd); -1 if unavailable. */
double kvt_server_keepalives(const struct kvt_server *s);

/* Pick a free loopback TCP port. */
int kvt_free_port(void);
/* Start a fresh server (new temp data dir and ports); waits until it serves a Range. */
int kvt_server_start(struct kvt_server *s);
/* Start again on the same ports and data dir; waits until the port accepts. */
int kvt_server_restart(struct kvt_server *s);
/* Send sig and reap (SIGKILL/SIGTERM) or just signal (SIGSTOP/SIGCONT). */
void kvt_server_signal(struct kvt_server *s, int sig);
/* Kill, reap and remove the data dir. Safe to call twice. */
void kvt_server_stop(struct kvt_server *s);
/* Wait until the server on port answers an HTTP/2 preface with a frame; 0 or -1. */
int kvt_wait_h2(int port, int timeout_ms);
/* Wait until port accepts a TCP connection; 0 or -1 on timeout. */
int kvt_wait_port(int port, int timeout_ms);

/* ESTABLISHED TCP connections of THIS process whose remote port is `port` (IPv4+IPv6;
 * sockets matched by inode against /proc/self/fd). Not thread-safe. */
int kvt_count_established(int port);
/* Open file descriptors and threads of this process. Call kvt_warmup() first: libuv opens
 * a process-wide signal pipe once, at the first loop (not a leak). */
void kvt_warmup(void);
int kvt_count_fds(void);
int kvt_count_threads(void);
/* The thread count once it has settled at `expected`, polling up to timeout_ms. A joined
 * thread can stay listed in /proc/self/task for a moment after pthread_join returns (the
 * kernel wakes the joiner before it reaps the task), so compare counts only through this. */
int kvt_threads_settle(int expected, int timeout_ms);

/* A client for endpoint with defaults (dial timeout 3 s). Aborts the test on failure. */
kvc_client *kvt_client(const char *endpoint);
/* A packed v3lock LockRequest {name, lease}; *len its size; the caller frees (aborts when
 * out of memory). */
uint8_t *kvt_lock_req(const char *name, int64_t lease, size_t *len);

/* Misbehaving servers, each on its own thread: */
enum kvt_fake_mode { KVT_FAKE_CLOSE, KVT_FAKE_HTTP1, KVT_FAKE_SILENT };
struct kvt_fake;
struct kvt_fake *kvt_fake_start(int mode, int *port);
int kvt_fake_accepted(struct kvt_fake *f);
void kvt_fake_stop(struct kvt_fake *f);

/* Under ASan: run LeakSanitizer now, return the number of leak reports (0 = no leak);
 * without ASan: 0. (Criterion ignores LSan's report at a test process's exit.) */
int kvt_leaks(void);

/* Defined by tests/lib (kvt_util.h). */
uint64_t kvt_now_ms(void);
void kvt_sleep_ms(unsigned ms);

#endif
