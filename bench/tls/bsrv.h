/*
 * bsrv: single-member kvd / etcd servers for bench/tls and bench/ops (not a test).
 * Starts kvd or etcd with etcd's flags on free loopback ports (http:// or https://), waits
 * until it answers a Range, stops it and removes its data dir; client helpers over
 * libkvclient; latency sample arrays with percentiles. Processes are started with
 * tests/lib's launcher (kvt_proc: log file, PR_SET_PDEATHSIG, bounded waits) and the
 * directory is a kvt_tmpdir (under $TMPDIR, kept with KV_TEST_KEEP_DIRS=1).
 *
 * Contract: functions return 0 or a negative errno-style code (errbuf says why). Single
 * threaded use of a bsrv_server; the sample helpers are per thread. Nothing is global.
 */
#ifndef KV_BENCH_BSRV_H
#define KV_BENCH_BSRV_H

#include "kvclient.h"
#include "kvt_proc.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { BSRV_KVD = 0, BSRV_ETCD = 1 } bsrv_kind;

typedef struct bsrv_server {
    bsrv_kind kind;
    int tls;
    kvt_proc proc; /* the server (proc.pid 0 when not running); its log is dir/log */
    uint16_t port, peer_port;
    char dir[256];       /* mkdtemp dir: data/, log */
    char data_dir[300];  /* dir/data */
    char url[64];        /* http(s)://127.0.0.1:port */
    const char *certdir; /* ca.pem, server.pem, server-key.pem (borrowed) */
    /* The extra flags given to bsrv_start (borrowed: the caller keeps the array and its
     * strings alive until bsrv_stop, since bsrv_restart passes them again). */
    const char *const *extra;
} bsrv_server;

const char *bsrv_name(bsrv_kind k);
/* Binary paths: kvd from $KV_KVD_BIN or $KV_BUILD_DIR/server/kvd (else ./build/server/kvd);
 * etcd from $KV_ETCD_BIN or /usr/bin/etcd; etcdctl from $KV_ETCDCTL_BIN or /usr/bin/etcdctl. */
const char *bsrv_bin(bsrv_kind k, char *buf, size_t cap);
const char *bsrv_etcdctl(void);

/* Start a fresh server (extra: NULL-terminated extra flags or NULL; borrowed, see
 * bsrv_server.extra); waits up to 30 s. */
int bsrv_start(bsrv_server *s, bsrv_kind k, int tls, const char *certdir, const char *const *extra,
               char *errbuf, size_t errcap);
/* Stop the running server (SIGKILL when kill9, else SIGTERM and wait up to 30 s), reap it and
 * start it again with the same argv on the same data dir and ports; poll every 5 ms (a fresh
 * client each try, 1 s call timeout) until a linearizable Range of one key answers, for up to
 * timeout_s. *serve_s (if non-NULL) = seconds from the fork to that first answer. A server
 * that needs SIGKILL after the SIGTERM is not restarted (-ETIMEDOUT). On failure the server
 * may still be running: bsrv_stop as always. */
int bsrv_restart(bsrv_server *s, int kill9, double timeout_s, double *serve_s, char *errbuf,
                 size_t errcap);
/* SIGTERM (SIGKILL after 10 s), reap, rm -rf the dir. Safe on a stopped server. */
void bsrv_stop(bsrv_server *s);

/* Open a libkvclient client to s (TLS config when s->tls), optional loop group / token. */
int bsrv_client(kvc_client **out, const bsrv_server *s, kvc_loop_group *g, const char *token,
                kvc_error *err);

/* Run etcdctl against s with args (NULL-terminated), ETCDCTL_API=3, for at most 700 s
 * (-ETIMEDOUT; it runs with --command-timeout=600s); 0 when it exits 0, -EIO otherwise.
 * Output appended to s->dir/ctl.log unless out_path is given. *seconds (if non-NULL) is its
 * wall time. */
int bsrv_etcdctl_run(const bsrv_server *s, const char *const *args, const char *out_path,
                     double *seconds);

double bsrv_now(void); /* monotonic seconds */
void bsrv_sleep_ms(uint32_t ms);
/* Bytes of the largest regular file under dir (the backend file) and the total. */
int bsrv_dir_sizes(const char *dir, uint64_t *largest, uint64_t *total);
int bsrv_cpu(pid_t pid, double *seconds);

/* Latency samples (ms). */
typedef struct bsrv_samples {
    double *v;
    size_t n, cap;
} bsrv_samples;
int bsrv_samples_add(bsrv_samples *s, double ms);
void bsrv_samples_merge(bsrv_samples *dst, const bsrv_samples *src);
double bsrv_samples_pct(bsrv_samples *s, double pct); /* sorts; 0 when empty */
double bsrv_samples_max(const bsrv_samples *s);
void bsrv_samples_free(bsrv_samples *s);
double bsrv_median(double *v, size_t n); /* sorts v */

#endif
