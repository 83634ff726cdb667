/*
 * harness: start, stop, kill and restart a kvd or etcd server process on free loopback
 * ports with a private data directory, run commands with a timeout, and observe processes
 * (/proc RSS and CPU, Prometheus /metrics). Used by tests/integration and bench/kv.
 *
 * Contract:
 * - Every operation is bounded in time; a server that does not become ready, or a command
 *   that does not finish, is killed and reported as an error, never waited on forever.
 * - Server children get PR_SET_PDEATHSIG(SIGKILL), so a crashed test never leaks a server.
 * - No global state: everything lives in kv_it_server / kv_it_cmd_result.
 * - Functions return 0 or a negative errno-style code.
 *
 * Server selection: kv_it_kind_from_env() reads KV_TEST_SERVER=etcd|kvd (default kvd).
 * Binaries: kvd at $KV_BUILD_DIR/server/kvd (or $KV_KVD_BIN), etcd at $KV_ETCD_BIN or
 * /usr/bin/etcd; kvctl at $KV_BUILD_DIR/client/kvctl, etcdctl at $KV_ETCDCTL_BIN or
 * /usr/bin/etcdctl.
 */
#ifndef KV_IT_HARNESS_H
#define KV_IT_HARNESS_H

#include "kvt_proc.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { KV_IT_KVD = 0, KV_IT_ETCD = 1 } kv_it_kind;

#define KV_IT_MAX_EXTRA 8

typedef struct kv_it_server {
    kv_it_kind kind;
    char bin[PATH_MAX];
    char dir[1024];          /* mkdtemp root; holds data/ and server.log */
    char data_dir[PATH_MAX]; /* <dir>/data */
    char log_path[PATH_MAX]; /* <dir>/server.log (appended across restarts) */
    uint16_t client_port, peer_port, metrics_port;
    char endpoint[64]; /* "127.0.0.1:<client_port>" */
    pid_t pid;         /* 0 when not running (a copy of proc.pid, for /proc lookups) */
    kvt_proc proc;     /* tests/lib launcher: spawn, SIGTERM/kill -9, reap */
    off_t log_offset;  /* size of server.log when the current process started */
    int starts;        /* successful starts so far */
    char extra[KV_IT_MAX_EXTRA][256];
    int n_extra;
} kv_it_server;

/* Captured output of kv_it_run: exit_code, timed_out, out/out_len, err/err_len (owned;
 * kv_it_cmd_result_free). The same struct as tests/lib's kvt_cmd_result. */
typedef kvt_cmd_result kv_it_cmd_result;

/* Reads KV_TEST_SERVER; returns KV_IT_KVD unless it is "etcd". */
kv_it_kind kv_it_kind_from_env(void);
const char *kv_it_kind_name(kv_it_kind k);

/* Paths of the binaries (static strings or written into buf). Return 0 if the file is an
 * executable, -ENOENT otherwise (buf still holds the path that was tried). */
int kv_it_server_bin(kv_it_kind kind, char *buf, size_t cap);
int kv_it_kvctl_bin(char *buf, size_t cap);
int kv_it_etcdctl_bin(char *buf, size_t cap);

/* Finds a free TCP port on 127.0.0.1 (bind to port 0). */
int kv_it_free_port(uint16_t *port);

/* Prepares s: picks three free ports, creates a fresh mkdtemp directory, resolves the
 * binary. extra_args (NULL-terminated, may be NULL) are appended to the command line of
 * every start. Does not start the process. On error nothing needs to be freed. */
int kv_it_server_init(kv_it_server *s, kv_it_kind kind, const char *const *extra_args);

/* Starts the server (same ports and directory every time) and waits until it answers a
 * gRPC Range call, for at most ready_timeout_ms. On timeout the process is killed and
 * -ETIMEDOUT returned; -ECHILD if it exited. Before the first successful start, a server
 * that exits because a probed port was taken meanwhile is retried on new ports (3x). */
int kv_it_server_start(kv_it_server *s, uint32_t ready_timeout_ms);

/* kv_it_server_stop(grace_ms) then kv_it_server_start(): same ports, same directory. */
int kv_it_server_restart(kv_it_server *s, uint32_t grace_ms, uint32_t ready_timeout_ms);

/* Waits until the running server answers a gRPC Range, up to timeout_ms. -ETIMEDOUT or
 * -ECHILD (process exited). */
int kv_it_server_wait_ready(kv_it_server *s, uint32_t timeout_ms);

/* SIGTERM, wait up to grace_ms, then SIGKILL; reaps the child. No-op if not running. */
int kv_it_server_stop(kv_it_server *s, uint32_t grace_ms);

/* kill -9 and reap. */
int kv_it_server_kill9(kv_it_server *s);

/* Returns 1 if the server process is still alive (reaping it if it exited). */
int kv_it_server_alive(kv_it_server *s);

/* Stops the server if running and removes its directory. s can be re-inited after. */
void kv_it_server_destroy(kv_it_server *s);

/* Reads the server log written since the current (or last) start. *out is malloc'd,
 * NUL-terminated, caller frees. */
int kv_it_server_log(const kv_it_server *s, char **out);

/* Runs argv[0] (absolute path) with argv, extra environment entries env_add
 * ("NAME=value", NULL-terminated, may be NULL), optional stdin data, for at most
 * timeout_ms. Captures stdout/stderr (each capped at 64 MiB). Returns 0 if the command was
 * run (check res->exit_code and res->timed_out), negative on spawn failure.
 * Side effect: if SIGPIPE is at its default disposition it is set to SIG_IGN (a command
 * that exits without reading its stdin must not kill the caller). */
int kv_it_run(const char *const *argv, const char *const *env_add, const void *stdin_data,
              size_t stdin_len, uint32_t timeout_ms, kv_it_cmd_result *res);

/* Runs an etcdctl-compatible CLI (ctl_bin) against s with ETCDCTL_API=3,
 * "--endpoints=<s->endpoint>" followed by the NULL-terminated varargs. */
int kv_it_ctl(const kv_it_server *s, const char *ctl_bin, const char *stdin_data,
              uint32_t timeout_ms, kv_it_cmd_result *res, ...);

void kv_it_cmd_result_free(kv_it_cmd_result *res);

/* Resident set size in bytes from /proc/<pid>/status (VmRSS). */
int kv_it_proc_rss(pid_t pid, uint64_t *bytes);

/* utime+stime of pid in seconds from /proc/<pid>/stat. */
int kv_it_proc_cpu(pid_t pid, double *seconds);

/* HTTP GET http://127.0.0.1:<port><path>, HTTP/1.0, bounded by timeout_ms.
 * *status is the HTTP status code, *body (malloc'd, NUL-terminated) the body. */
int kv_it_http_get(uint16_t port, const char *path, uint32_t timeout_ms, int *status, char **body);

/* Finds a Prometheus sample in text: series is the metric name optionally followed by
 * its exact label set as printed, e.g. "kv_open_connections" or
 * "kv_requests_total{method=\"Put\",code=\"OK\"}". -ENOENT if absent. */
int kv_it_metric_value(const char *text, const char *series, double *value);

/* Sums every sample of metric `name` whose label set contains label_substr (e.g.
 * "reason=\"oversized\""; NULL matches any, including no labels), so checks survive new
 * labels being added. *n_series (optional) receives the number of samples summed;
 * -ENOENT if none matched. */
int kv_it_metric_sum(const char *text, const char *name, const char *label_substr, double *sum,
                     int *n_series);

/* Milliseconds since an arbitrary monotonic origin. */
uint64_t kv_it_now_ms(void);

/* Fills buf with random bytes from /dev/urandom. */
int kv_it_random_bytes(void *buf, size_t len);

/* Sends len bytes to 127.0.0.1:port on a fresh TCP connection, then waits up to
 * timeout_ms for the peer to close it (reading and discarding whatever it sends).
 * Returns 0 when the peer closed (or reset) the connection, -ETIMEDOUT if it stayed open. */
int kv_it_send_raw(uint16_t port, const void *data, size_t len, uint32_t timeout_ms);

#endif
