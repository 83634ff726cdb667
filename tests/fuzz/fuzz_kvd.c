/* fuzz_kvd.c - the in-process kvd of the fuzz harnesses; see fuzz_kvd.h. */
#include "fuzz_kvd.h"

#include "grpc/grpc_internal.h" /* kv_grpc_conn_start/begin: the accept path's two halves */
#include "http/client_http.h"
#include "lease/lessor.h"
#include "lease/leases.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define FUZZ_QUOTA (64u << 20)
#define FUZZ_MAX_REVISION 20000
#define FUZZ_MAX_LEASES 2000
#define FUZZ_MAX_ROUNDS 10000 /* loop turns per wait before giving up on progress */

int kv_fuzz_mkdtemp(char *buf, size_t cap, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    int n = snprintf(buf, cap, "%s/%s.XXXXXX", tmp, prefix);
    if (n < 0 || (size_t)n >= cap)
        return -ENAMETOOLONG;
    if (mkdtemp(buf) == NULL)
        return -errno;
    return 0;
}

void kv_fuzz_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        char path[1024];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

int kv_fuzz_kvd_start(kv_fuzz_kvd *k)
{
    int rc;
    memset(k, 0, sizeof(*k));
    rc = kv_fuzz_mkdtemp(k->dir, sizeof(k->dir), "kvd-fuzz");
    if (rc < 0)
        return rc;
    kv_config_default(&k->cfg);
    snprintf(k->cfg.data_dir, sizeof(k->cfg.data_dir), "%s", k->dir);
    k->cfg.quota_backend_bytes = FUZZ_QUOTA;
    k->cfg.max_pending_proposals = 1000;
    if (uv_loop_init(&k->loop) != 0)
        return -ENOMEM;
    kv_server *s = &k->srv;
    s->api.loop = &k->loop;
    s->cfg = &k->cfg;
    s->id.cluster_id = 0x1000;
    s->id.member_id = 0x2000;
    rc = kv_metrics_new(&s->api.metrics, 0);
    if (rc < 0)
        return rc;
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = k->dir;
    sc.quota_bytes = FUZZ_QUOTA;
    rc = kv_store_open(&s->api.store, &sc);
    if (rc < 0)
        return rc;
    /* Speed, not durability: nothing here survives the process. */
    mdb_env_set_flags(kv_store_env(s->api.store), MDB_NOSYNC | MDB_NOMETASYNC, 1);
    /* The member's core exactly as kvd starts it: node, lessor, reader pool, watch hub. */
    rc = kv_server_start_core(s);
    if (rc < 0)
        return rc;
    kv_grpc_config gc;
    kv_grpc_config_default(&gc);
    gc.max_request_bytes = k->cfg.max_request_bytes;
    gc.max_concurrent_streams = k->cfg.max_concurrent_streams;
    gc.max_send_buffer_bytes = k->cfg.max_send_buffer_bytes;
    gc.max_connections = k->cfg.max_connections;
    k->n_methods = kv_services_collect(k->methods, KV_SERVICES_MAX);
    if (k->n_methods == 0)
        return -E2BIG;
    rc = kv_grpc_server_init(&k->grpc, &k->loop, &gc, k->methods, k->n_methods, &s->api,
                             s->api.metrics);
    if (rc < 0)
        return rc;
    /* The client port's HTTP branch, as main() installs it: HTTP/2 streams that are not gRPC
     * (and HTTP/1 connections) reach the JSON gateway. */
    kv_client_http_config chc = {.metrics = s->api.metrics,
                                 .max_body_bytes = gc.max_request_bytes,
                                 .max_streams = gc.max_concurrent_streams};
    rc = kv_client_http_new(&k->chttp, &chc, &k->loop);
    if (rc < 0)
        return rc;
    kv_client_http_attach(k->chttp, k->grpc);
    k->running = 1;
    return 0;
}

void kv_fuzz_kvd_stop(kv_fuzz_kvd *k)
{
    kv_server *s = &k->srv;
    if (k->grpc)
        kv_grpc_server_close(k->grpc, NULL, NULL);
    k->grpc = NULL;
    kv_client_http_free(k->chttp); /* after its connections (closed above) */
    k->chttp = NULL;
    kv_server_stop_core(s);
    uv_run(&k->loop, UV_RUN_DEFAULT);
    kv_store_close(s->api.store);
    s->api.store = NULL;
    uv_loop_close(&k->loop);
    kv_metrics_free(s->api.metrics);
    s->api.metrics = NULL;
    if (k->dir[0])
        kv_fuzz_rmdir(k->dir);
    k->running = 0;
}

int kv_fuzz_kvd_maybe_reset(kv_fuzz_kvd *k)
{
    if (kv_node_revision(k->srv.api.node) < FUZZ_MAX_REVISION &&
        kv_lessor_count(k->srv.api.lessor) < FUZZ_MAX_LEASES)
        return 0;
    kv_fuzz_kvd_stop(k);
    return kv_fuzz_kvd_start(k);
}

static void drain(int fd, kv_fuzz_out_fn out, void *arg)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            return;
        if (out)
            out(arg, buf, (size_t)n);
    }
}

/* Bytes written by the client that the server has not read yet. */
static int unread(int server_fd)
{
    int n = 0;
    if (ioctl(server_fd, FIONREAD, &n) != 0)
        return 0;
    return n;
}

static void on_barrier(void *arg, int status)
{
    (void)status;
    *(int *)arg = 1;
}

/* Writes one chunk and waits until it is processed. 0, or -EPIPE once the server closed. */
static int session_chunk(kv_fuzz_kvd *k, int sv[2], size_t before, const uint8_t *in, size_t len,
                         kv_fuzz_out_fn out, void *arg)
{
    size_t off = 0;
    int rounds = 0;
    while (off < len && rounds++ < FUZZ_MAX_ROUNDS) {
        if (kv_grpc_server_connections(k->grpc) <= before)
            return -EPIPE;
        ssize_t n = send(sv[1], in + off, len - off, MSG_NOSIGNAL);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -EPIPE; /* the server closed the connection */
        uv_run(&k->loop, UV_RUN_NOWAIT);
        drain(sv[1], out, arg);
    }
    /* Let the server read everything, then wait for the apply path to drain. */
    rounds = 0;
    while (kv_grpc_server_connections(k->grpc) > before && unread(sv[0]) > 0 &&
           rounds++ < FUZZ_MAX_ROUNDS) {
        uv_run(&k->loop, UV_RUN_NOWAIT);
        drain(sv[1], out, arg);
    }
    int done = 0;
    if (kv_node_barrier(k->srv.api.node, on_barrier, &done) == 0) {
        rounds = 0;
        while (!done && rounds++ < FUZZ_MAX_ROUNDS) {
            uv_run(&k->loop, UV_RUN_ONCE);
            drain(sv[1], out, arg);
        }
    }
    uv_run(&k->loop, UV_RUN_NOWAIT); /* completions -> responses */
    drain(sv[1], out, arg);
    return kv_grpc_server_connections(k->grpc) > before ? 0 : -EPIPE;
}

int kv_fuzz_kvd_session(kv_fuzz_kvd *k, kv_fuzz_next_fn next, kv_fuzz_out_fn out, void *arg)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        return -errno;
    size_t before = kv_grpc_server_connections(k->grpc);
    kv_grpc_conn *c;
    int rc = kv_grpc_conn_start(k->grpc, &c);
    if (rc < 0) {
        close(sv[0]);
        close(sv[1]);
        return rc;
    }
    /* Once uv_tcp_open succeeded the server owns sv[0] (its uv_close closes it). */
    rc = uv_tcp_open(&c->tcp, sv[0]);
    if (rc < 0) {
        close(sv[0]);
        kv_grpc_conn_close(c);
    } else {
        rc = kv_grpc_conn_begin(c);
        if (rc < 0)
            kv_grpc_conn_close(c);
    }
    /* c may be freed by the server from here on: only the connection count is used. */
    if (rc == 0) {
        const uint8_t *p;
        size_t n;
        while (next(arg, &p, &n) == 0)
            if (session_chunk(k, sv, before, p, n, out, arg) < 0)
                break;
        shutdown(sv[1], SHUT_WR);
    }
    int rounds = 0;
    while (kv_grpc_server_connections(k->grpc) > before && rounds++ < FUZZ_MAX_ROUNDS) {
        uv_run(&k->loop, UV_RUN_NOWAIT);
        drain(sv[1], out, arg);
    }
    close(sv[1]);
    if (kv_grpc_server_connections(k->grpc) > before) {
        fprintf(stderr, "fuzz_kvd: connection not closed after the client's EOF\n");
        abort();
    }
    /* Let closed calls' and connections' deferred frees run. */
    uv_run(&k->loop, UV_RUN_NOWAIT);
    return rc < 0 ? rc : 0;
}
