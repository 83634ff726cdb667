/*
 * connbench: the memory an agent connection costs kvd's gRPC server (server/grpc), on one
 * kvd member's client port and on a `kvd grpc-proxy start` in front of it (or, with
 * "etcd", on one etcd 3.4 member, for comparison). An agent is one h2c connection with one
 * LeaseKeepAlive stream that renewed a shared lease and read the answer
 * (tests/proxy/px_connmem.h). After 50 warm-up agents, N more are opened and renewed once
 * more; the figure is (VmRSS after - VmRSS before) / N of the server process. Not a test (see
 * tests/proxy/test_conn_mem.c for the bound); see bench/README.md "Connection memory".
 *
 * Usage: connbench [N (default 2000)] [kvd|etcd]. The fd limit bounds N (one fd per agent
 * here, one per agent in the proxy). CONNBENCH_PORT=<port> CONNBENCH_PID=<pid>: measure a
 * server already running (e.g. under heaptrack) instead of starting one.
 */
#include "cluster.h"
#include "grpc_raw.h"
#include "kvt_proc.h"
#include "kvt_util.h"
#include "px_connmem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CB_WARM 50

/* LeaseGrant(TTL 600) over a unary call; the lease ID (field 2 of the response), 0 on error. */
static int64_t cb_grant(uint16_t port)
{
    kv_it_grpc *g = NULL;
    if (kv_it_grpc_open(&g, "127.0.0.1", port, 5000) != 0)
        return 0;
    const uint8_t req[] = {0x08, 0xd8, 0x04}; /* TTL = 600 */
    uint8_t *resp = NULL;
    size_t rl = 0;
    int status = -1;
    int64_t id = 0;
    int rc = kv_it_grpc_call(g, "/etcdserverpb.Lease/LeaseGrant", req, sizeof req, &resp, &rl, 5000,
                             &status, NULL, 0);
    for (size_t p = 0; rc == 0 && status == 0 && p < rl;) {
        uint8_t key = resp[p++];
        uint64_t v = 0;
        for (int sh = 0; p < rl && sh < 64; sh += 7) {
            v |= (uint64_t)(resp[p] & 0x7f) << sh;
            if (!(resp[p++] & 0x80))
                break;
        }
        if ((key & 7) == 2)
            p += v;
        else if (key == 0x10)
            id = (int64_t)v;
    }
    free(resp);
    kv_it_grpc_close(g);
    return id;
}

static int cb_measure(const char *what, pid_t pid, uint16_t port, int n)
{
    char err[256];
    px_connmem warm, m;
    int64_t lease = cb_grant(port);
    if (!lease) {
        fprintf(stderr, "%s: LeaseGrant failed\n", what);
        return -EIO;
    }
    int rc = px_connmem_open(&warm, port, NULL, lease, CB_WARM, err, sizeof err);
    long before = 0, after = 0;
    if (!rc) {
        kvt_sleep_ms(500);
        before = kvt_proc_rss_kib(pid);
        uint64_t t0 = kvt_now_ms();
        rc = px_connmem_open(&m, port, NULL, lease, n, err, sizeof err);
        if (!rc)
            rc = px_connmem_renew(&m, lease, err, sizeof err);
        if (!rc) {
            kvt_sleep_ms(500);
            after = kvt_proc_rss_kib(pid);
            printf("%-8s %6d agents in %5.1f s: VmRSS %7ld -> %7ld KiB: %6.2f KiB per agent "
                   "connection\n",
                   what, n, (double)(kvt_now_ms() - t0) / 1000.0, before, after,
                   (double)(after - before) / n);
        }
        px_connmem_close(&m);
    }
    if (rc)
        fprintf(stderr, "%s: %s\n", what, err);
    px_connmem_close(&warm);
    return rc;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    kv_it_kind kind = argc > 2 && strcmp(argv[2], "etcd") == 0 ? KV_IT_ETCD : KV_IT_KVD;
    if (n <= 0) {
        fprintf(stderr, "usage: connbench [N] [kvd|etcd]\n");
        return 2;
    }
    const char *ext_port = getenv("CONNBENCH_PORT"), *ext_pid = getenv("CONNBENCH_PID");
    if (ext_port && ext_pid)
        return cb_measure("server", (pid_t)atoi(ext_pid), (uint16_t)atoi(ext_port), n) ? 1 : 0;
    kv_bc_cluster c;
    char why[512];
    int rc = kv_bc_cluster_start(&c, kind, 1, NULL, 60000, why, sizeof why);
    if (rc) {
        fprintf(stderr, "cluster: %s\n", why);
        kv_bc_cluster_destroy(&c);
        return 1;
    }
    rc = cb_measure(kind == KV_IT_KVD ? "member" : "etcd", c.m[0].proc.pid, c.m[0].client_port, n);
    if (!rc && kind == KV_IT_KVD) {
        uint16_t port = 0, mport = 0;
        char eps[96], a_l[64], a_m[96], log[1200];
        do {
            if ((rc = kvt_port_free(&port)) || (rc = kvt_port_free(&mport)))
                break;
        } while (port == mport);
        snprintf(eps, sizeof eps, "--endpoints=%s", c.m[0].endpoint);
        snprintf(a_l, sizeof a_l, "--listen-addr=127.0.0.1:%u", port);
        snprintf(a_m, sizeof a_m, "--metrics-addr=http://127.0.0.1:%u", mport);
        snprintf(log, sizeof log, "%s/proxy.log", c.dir);
        const char *av[] = {c.bin, "grpc-proxy", "start", eps, a_l, a_m, NULL};
        kvt_proc px;
        kvt_proc_init(&px, log);
        if (!rc && (rc = kvt_proc_spawn(&px, av)) == 0) {
            uint64_t deadline = kvt_now_ms() + 20000;
            while (!cb_grant(port) && kvt_now_ms() < deadline)
                kvt_sleep_ms(100);
            rc = cb_measure("proxy", px.pid, port, n);
            kvt_proc_term(&px, 2000);
        }
    }
    kv_bc_cluster_destroy(&c);
    return rc ? 1 : 0;
}
