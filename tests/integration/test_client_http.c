/*
 * it_client_http: what the client port answers besides gRPC, as etcd 3.4:
 * HTTP/1.1 /health, /version, /metrics (with the process_* series), the grpc-gateway JSON API
 * (base64 bytes, int64 as strings, proto field names, grpc-gateway error bodies), keep-alive,
 * bounds (431/413, garbage -> 400 and close), grpc.health.v1.Health/Check over gRPC, and the
 * "etcdserver: request is too large" window between --max-request-bytes and +512 KiB.
 * The same requests run against /usr/bin/etcd (when present) to show the same output shape.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "kvt_cluster.h"
#include "kvt_util.h"
#include "rpc.pb-c.h"

static kv_it_server *start_server(kv_it_kind kind)
{
    kv_it_server *s = calloc(1, sizeof(*s));
    cr_assert(s);
    int rc = kv_it_server_init(s, kind, NULL);
    if (rc == -ENOENT && kind == KV_IT_ETCD) {
        free(s);
        return NULL;
    }
    cr_assert_eq(rc, 0, "init %s: %d", kv_it_kind_name(kind), rc);
    rc = kv_it_server_start(s, 20000);
    cr_assert_eq(rc, 0, "start %s: %d", kv_it_kind_name(kind), rc);
    return s;
}

static void stop_server(kv_it_server *s)
{
    if (s) {
        kv_it_server_destroy(s);
        free(s);
    }
}

/* Sends raw bytes on a new connection to port and reads until the server closes or
 * timeout_ms passes. Returns the bytes read (malloc'd, NUL-terminated); *closed says whether
 * the server closed the connection. */
static char *raw_exchange(uint16_t port, const char *req, size_t len, uint32_t timeout_ms,
                          int *closed)
{
    int fd = kvt_connect_loopback(port, 5000);
    cr_assert(fd >= 0, "connect %u: %d", port, fd);
    uint64_t deadline = (uint64_t)(kvt_now_us() / 1000) + timeout_ms;
    cr_assert_eq(kvt_send_all(fd, req, len, deadline), 0, "send");
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    cr_assert(buf);
    *closed = 0;
    for (;;) {
        int64_t left = (int64_t)deadline - kvt_now_us() / 1000;
        if (left <= 0)
            break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0)
            break;
        if (n + 4096 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert(buf);
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EAGAIN)
            continue;
        if (r <= 0) {
            *closed = 1;
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return buf;
}

typedef struct http_resp {
    int status;
    char *raw;  /* whole response text (owned) */
    char *body; /* into raw */
    int closed;
} http_resp;

/* One request with Connection: close; the response is read to the close. */
static http_resp http_do(uint16_t port, const char *method, const char *path, const char *body)
{
    char head[512];
    size_t blen = body ? strlen(body) : 0;
    int hn = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      method, path, blen);
    char *req = malloc((size_t)hn + blen + 1);
    cr_assert(req);
    memcpy(req, head, (size_t)hn);
    if (blen)
        memcpy(req + hn, body, blen);
    http_resp r = {0};
    r.raw = raw_exchange(port, req, (size_t)hn + blen, 10000, &r.closed);
    free(req);
    sscanf(r.raw, "HTTP/1.%*d %d", &r.status);
    char *e = strstr(r.raw, "\r\n\r\n");
    r.body = e ? e + 4 : r.raw + strlen(r.raw);
    if (e && strstr(r.raw, "Transfer-Encoding: chunked") &&
        strstr(r.raw, "Transfer-Encoding: chunked") < e) { /* de-chunk in place */
        char *in = r.body, *o = r.body;
        for (;;) {
            char *end;
            unsigned long sz = strtoul(in, &end, 16);
            char *data = strstr(end, "\r\n");
            if (!data || sz == 0)
                break;
            data += 2;
            memmove(o, data, sz);
            o += sz;
            in = data + sz + 2;
        }
        *o = '\0';
    }
    return r;
}

static http_resp http_post(uint16_t port, const char *path, const char *body)
{
    return http_do(port, "POST", path, body);
}

/* Replaces every JSON string of digits ("123") with "N": ids, revisions and terms differ
 * between servers, the shape must not. */
static char *normalize(const char *s)
{
    char *o = malloc(strlen(s) + 1);
    cr_assert(o);
    size_t k = 0;
    for (size_t i = 0; s[i];) {
        if (s[i] == '"' && isdigit((unsigned char)s[i + 1])) {
            size_t j = i + 1;
            while (isdigit((unsigned char)s[j]))
                j++;
            if (s[j] == '"') {
                memcpy(o + k, "\"N\"", 3);
                k += 3;
                i = j + 1;
                continue;
            }
        }
        o[k++] = s[i++];
    }
    o[k] = '\0';
    return o;
}

Test(client_http, health_version_metrics_on_the_client_port, .timeout = 120)
{
    kv_it_server *s = start_server(KV_IT_KVD);
    http_resp r = http_do(s->client_port, "GET", "/health", NULL);
    cr_assert_eq(r.status, 200, "GET /health: %s", r.raw);
    cr_assert_str_eq(r.body, "{\"health\":\"true\"}");
    free(r.raw);

    r = http_do(s->client_port, "GET", "/version", NULL);
    cr_assert_eq(r.status, 200, "GET /version: %s", r.raw);
    cr_assert(strstr(r.body, "{\"etcdserver\":\"3.4.") == r.body, "%s", r.body);
    cr_assert(strstr(r.body, "\"etcdcluster\":\"3.4.0\"}"), "%s", r.body);
    free(r.raw);

    r = http_do(s->client_port, "GET", "/metrics", NULL);
    cr_assert_eq(r.status, 200, "GET /metrics: %.300s", r.raw);
    const char *series[] = {"kvd_grpc_connections",
                            "process_resident_memory_bytes",
                            "process_virtual_memory_bytes",
                            "process_cpu_seconds_total",
                            "process_open_fds",
                            "process_max_fds",
                            "process_start_time_seconds"};
    for (size_t i = 0; i < sizeof(series) / sizeof(series[0]); i++)
        cr_assert(strstr(r.body, series[i]), "client /metrics lacks %s", series[i]);
    double rss = 0, fds = 0;
    cr_assert_eq(kvt_metric_value(r.body, "process_resident_memory_bytes", &rss), 0);
    cr_assert_eq(kvt_metric_value(r.body, "process_open_fds", &fds), 0);
    cr_assert(rss > 1e6 && fds >= 3, "rss %.0f fds %.0f", rss, fds);
    free(r.raw);

    /* the metrics port shows the process series too */
    int st = 0;
    char *body = NULL;
    cr_assert_eq(kvt_http_get(s->metrics_port, "/metrics", 5000, &st, &body), 0);
    cr_assert_eq(st, 200);
    cr_assert(strstr(body, "process_resident_memory_bytes"), "metrics port lacks process_*");
    free(body);

    /* gRPC keeps working on the same port */
    kv_it_grpc *g = NULL;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", s->client_port, 5000), 0);
    Etcdserverpb__RangeRequest rq = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rq.key.data = (uint8_t *)"x";
    rq.key.len = 1;
    uint8_t buf[64];
    size_t n = etcdserverpb__range_request__pack(&rq, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int gst = -1;
    cr_assert_eq(
        kv_it_grpc_call(g, "/etcdserverpb.KV/Range", buf, n, &resp, &rlen, 5000, &gst, NULL, 0), 0);
    cr_assert_eq(gst, 0);
    free(resp);
    kv_it_grpc_close(g);
    stop_server(s);
}

Test(client_http, gateway_put_range_round_trip_base64, .timeout = 120)
{
    kv_it_server *s = start_server(KV_IT_KVD);
    /* key "gw/k\x00\xff" value "v\n\"<>&" : binary-safe, base64 on the wire */
    http_resp r = http_post(s->client_port, "/v3/kv/put",
                            "{\"key\":\"Z3cvawD/\",\"value\":\"dgoiPD4m\",\"prev_kv\":true}");
    cr_assert_eq(r.status, 200, "put: %s", r.raw);
    cr_assert(strstr(r.body, "{\"header\":{\"cluster_id\":\""), "%s", r.body);
    cr_assert(strstr(r.body, "\"revision\":\"2\""), "%s", r.body);
    free(r.raw);

    /* lowerCamelCase names are accepted too; int64 as a number or a string */
    r = http_post(s->client_port, "/v3/kv/range", "{\"key\":\"Z3cvawD/\",\"limit\":1}");
    cr_assert_eq(r.status, 200, "range: %s", r.raw);
    cr_assert(strstr(r.body, "\"kvs\":[{\"key\":\"Z3cvawD/\",\"create_revision\":\"2\","
                             "\"mod_revision\":\"2\",\"version\":\"1\",\"value\":\"dgoiPD4m\"}]"),
              "%s", r.body);
    cr_assert(strstr(r.body, "\"count\":\"1\""), "%s", r.body);
    free(r.raw);

    /* what the JSON API wrote, gRPC reads (etcdctl) */
    http_resp p = http_post(s->client_port, "/v3/kv/put", "{\"key\":\"Zm9v\",\"value\":\"YmFy\"}");
    cr_assert_eq(p.status, 200, "%s", p.raw);
    free(p.raw);
    char ctl[PATH_MAX];
    cr_assert_eq(kv_it_etcdctl_bin(ctl, sizeof(ctl)), 0);
    kv_it_cmd_result res;
    cr_assert_eq(kv_it_ctl(s, ctl, NULL, 10000, &res, "get", "foo", "--print-value-only", NULL), 0);
    cr_assert_eq(res.exit_code, 0, "%s", res.err ? res.err : "");
    cr_assert_str_eq(res.out, "bar\n");
    kv_it_cmd_result_free(&res);

    /* txn with a compare and a nested range, deleterange, lease grant + timetolive */
    r = http_post(s->client_port, "/v3/kv/txn",
                  "{\"compare\":[{\"key\":\"Zm9v\",\"result\":\"EQUAL\",\"target\":\"VALUE\","
                  "\"value\":\"YmFy\"}],\"success\":[{\"request_range\":{\"key\":\"Zm9v\"}}]}");
    cr_assert_eq(r.status, 200, "txn: %s", r.raw);
    cr_assert(strstr(r.body, "\"succeeded\":true,\"responses\":[{\"response_range\":"), "%s",
              r.body);
    free(r.raw);
    r = http_post(s->client_port, "/v3/lease/grant", "{\"TTL\":60,\"ID\":\"4242\"}");
    cr_assert_eq(r.status, 200, "grant: %s", r.raw);
    cr_assert(strstr(r.body, "\"ID\":\"4242\",\"TTL\":\"60\""), "%s", r.body);
    free(r.raw);
    r = http_post(s->client_port, "/v3/kv/lease/timetolive", "{\"ID\":4242}");
    cr_assert_eq(r.status, 200, "ttl: %s", r.raw);
    cr_assert(strstr(r.body, "\"grantedTTL\":\"60\""), "%s", r.body);
    free(r.raw);
    r = http_post(s->client_port, "/v3/kv/deleterange", "{\"key\":\"Zm9v\"}");
    cr_assert_eq(r.status, 200, "deleterange: %s", r.raw);
    cr_assert(strstr(r.body, "\"deleted\":\"1\""), "%s", r.body);
    free(r.raw);
    r = http_post(s->client_port, "/v3/maintenance/status", "{}");
    cr_assert_eq(r.status, 200, "status: %s", r.raw);
    cr_assert(strstr(r.body, "\"version\":\"3.4."), "%s", r.body);
    free(r.raw);
    r = http_post(s->client_port, "/v3/cluster/member/list", "");
    cr_assert_eq(r.status, 200, "member list: %s", r.raw);
    cr_assert(strstr(r.body, "\"members\":[{\"ID\":\""), "%s", r.body);
    free(r.raw);
    stop_server(s);
}

Test(client_http, gateway_errors_as_grpc_gateway, .timeout = 120)
{
    kv_it_server *s = start_server(KV_IT_KVD);
    http_resp r = http_post(s->client_port, "/v3/lease/revoke", "{\"ID\":\"12345\"}");
    cr_assert_eq(r.status, 404, "%s", r.raw);
    cr_assert_str_eq(r.body, "{\"error\":\"etcdserver: requested lease not found\",\"message\":"
                             "\"etcdserver: requested lease not found\",\"code\":5}");
    free(r.raw);
    r = http_post(s->client_port, "/v3/kv/range", "{\"key\":");
    cr_assert_eq(r.status, 400, "%s", r.raw);
    cr_assert(strstr(r.body, "\"code\":3}"), "%s", r.body);
    free(r.raw);
    r = http_post(s->client_port, "/v3/kv/put", "{\"key\":\"\"}");
    cr_assert_eq(r.status, 400, "%s", r.raw);
    cr_assert_str_eq(r.body, "{\"error\":\"etcdserver: key is not provided\",\"message\":"
                             "\"etcdserver: key is not provided\",\"code\":3}");
    free(r.raw);
    r = http_do(s->client_port, "GET", "/v3/kv/range", NULL);
    cr_assert_eq(r.status, 405, "%s", r.raw);
    free(r.raw);
    r = http_do(s->client_port, "GET", "/nope", NULL);
    cr_assert_eq(r.status, 404, "%s", r.raw);
    cr_assert_str_eq(r.body, "404 page not found\n");
    free(r.raw);
    stop_server(s);
}

Test(client_http, keepalive_pipelining_bounds_and_garbage, .timeout = 120)
{
    kv_it_server *s = start_server(KV_IT_KVD);
    /* two requests on one connection: keep-alive, then close */
    const char two[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                       "POST /v3/kv/range HTTP/1.1\r\nContent-Length: 14\r\nConnection: close"
                       "\r\n\r\n{\"key\":\"Zm9v\"}";
    int closed = 0;
    char *out = raw_exchange(s->client_port, two, sizeof(two) - 1, 10000, &closed);
    cr_assert(strstr(out, "HTTP/1.1 200 OK") && strstr(out, "{\"health\":\"true\"}"), "%s", out);
    char *second = strstr(strstr(out, "{\"health\":\"true\"}"), "HTTP/1.1 200 OK");
    cr_assert(second && strstr(second, "{\"header\":{"), "second response missing: %s", out);
    cr_assert(closed, "Connection: close was not honoured");
    free(out);

    /* garbage: 400 and close */
    const char junk[] = "HELLO WORLD\r\n\r\n";
    out = raw_exchange(s->client_port, junk, sizeof(junk) - 1, 10000, &closed);
    cr_assert(strncmp(out, "HTTP/1.1 400 ", 13) == 0, "%s", out);
    cr_assert(closed);
    free(out);

    /* a request head over 8 KiB: 431 and close */
    size_t big = 10000;
    char *hdr = malloc(big + 64);
    cr_assert(hdr);
    int k = snprintf(hdr, 64, "GET /health HTTP/1.1\r\nX-Big: ");
    memset(hdr + k, 'a', big);
    memcpy(hdr + k + big, "\r\n\r\n", 4);
    out = raw_exchange(s->client_port, hdr, (size_t)k + big + 4, 10000, &closed);
    cr_assert(strncmp(out, "HTTP/1.1 431 ", 13) == 0, "%.100s", out);
    cr_assert(closed);
    free(out);
    free(hdr);

    /* a body over --max-request-bytes + 512 KiB: 413 and close, nothing read */
    const char huge[] = "POST /v3/kv/put HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n{";
    out = raw_exchange(s->client_port, huge, sizeof(huge) - 1, 10000, &closed);
    cr_assert(strncmp(out, "HTTP/1.1 413 ", 13) == 0, "%s", out);
    cr_assert(closed);
    free(out);

    /* still serving */
    http_resp r = http_do(s->client_port, "GET", "/health", NULL);
    cr_assert_eq(r.status, 200);
    free(r.raw);
    stop_server(s);
}

/* grpc.health.v1.Health/Check: {status: SERVING} = 08 01. */
static void health_check(kv_it_server *s)
{
    kv_it_grpc *g = NULL;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", s->client_port, 5000), 0);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int st = -1;
    char msg[256] = "";
    cr_assert_eq(kv_it_grpc_call(g, "/grpc.health.v1.Health/Check", (const uint8_t *)"", 0, &resp,
                                 &rlen, 5000, &st, msg, sizeof(msg)),
                 0);
    cr_assert_eq(st, 0, "%s Health/Check: %d %s", kv_it_kind_name(s->kind), st, msg);
    cr_assert(rlen == 2 && resp[0] == 0x08 && resp[1] == 1, "%s: not SERVING (%zu bytes)",
              kv_it_kind_name(s->kind), rlen);
    free(resp);
    resp = NULL;
    /* service "nope": NOT_FOUND "unknown service" */
    const uint8_t req[] = {0x0a, 4, 'n', 'o', 'p', 'e'};
    int rc = kv_it_grpc_call(g, "/grpc.health.v1.Health/Check", req, sizeof(req), &resp, &rlen,
                             5000, &st, msg, sizeof(msg));
    cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS, "%d", rc);
    cr_assert_eq(st, 5, "%s: %d %s", kv_it_kind_name(s->kind), st, msg);
    cr_assert_str_eq(msg, "unknown service");
    free(resp);
    kv_it_grpc_close(g);
}

/* A Put of `value_len` bytes over gRPC: its status and message. */
static int put_size(kv_it_server *s, size_t value_len, char *msg, size_t cap)
{
    kv_it_grpc *g = NULL;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", s->client_port, 5000), 0);
    Etcdserverpb__PutRequest pr = ETCDSERVERPB__PUT_REQUEST__INIT;
    pr.key.data = (uint8_t *)"big";
    pr.key.len = 3;
    pr.value.data = calloc(1, value_len);
    pr.value.len = value_len;
    size_t n = etcdserverpb__put_request__get_packed_size(&pr);
    uint8_t *buf = malloc(n);
    etcdserverpb__put_request__pack(&pr, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int st = -1;
    msg[0] = '\0';
    int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Put", buf, n, &resp, &rlen, 20000, &st, msg, cap);
    cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS, "Put of %zu bytes: %d", value_len, rc);
    free(resp);
    free(buf);
    free(pr.value.data);
    kv_it_grpc_close(g);
    return st;
}

static void too_large_window(kv_it_server *s)
{
    char msg[256];
    /* 1.5 MiB + 100 KiB: over --max-request-bytes (1.5 MiB), under the transport's +512 KiB */
    int st = put_size(s, 1536 * 1024 + 100 * 1024, msg, sizeof(msg));
    cr_assert_eq(st, 3, "%s: %d %s", kv_it_kind_name(s->kind), st, msg);
    cr_assert_str_eq(msg, "etcdserver: request is too large");
    /* beyond +512 KiB: the transport refuses it */
    st = put_size(s, 2048 * 1024 + 64 * 1024, msg, sizeof(msg));
    cr_assert_eq(st, 8, "%s: %d %s", kv_it_kind_name(s->kind), st, msg);
    cr_assert(strstr(msg, "larger than max"), "%s", msg);
    /* a value that fits still works */
    st = put_size(s, 1024 * 1024, msg, sizeof(msg));
    cr_assert_eq(st, 0, "%s: %d %s", kv_it_kind_name(s->kind), st, msg);
}

Test(client_http, grpc_health_check, .timeout = 180)
{
    kv_it_server *s = start_server(KV_IT_KVD);
    health_check(s);
    stop_server(s);
    kv_it_server *e = start_server(KV_IT_ETCD);
    if (!e) {
        cr_log_warn("no etcd binary: the etcd side is skipped");
        return;
    }
    health_check(e);
    stop_server(e);
}

Test(client_http, request_too_large_between_limit_and_transport_limit, .timeout = 180)
{
    kv_it_server *s = start_server(KV_IT_KVD);
    too_large_window(s);
    stop_server(s);
    kv_it_server *e = start_server(KV_IT_ETCD);
    if (!e) {
        cr_log_warn("no etcd binary: the etcd side is skipped");
        return;
    }
    too_large_window(e);
    stop_server(e);
}

Test(client_http, watch_streams_one_json_object_per_line, .timeout = 120)
{
    kv_it_server *s = start_server(KV_IT_KVD);
    const char req[] = "POST /v3/watch HTTP/1.1\r\nContent-Length: 33\r\n\r\n"
                       "{\"create_request\":{\"key\":\"Zm9v\"}}";
    int fd = kvt_connect_loopback(s->client_port, 5000);
    cr_assert(fd >= 0);
    uint64_t deadline = (uint64_t)(kvt_now_us() / 1000) + 10000;
    cr_assert_eq(kvt_send_all(fd, req, sizeof(req) - 1, deadline), 0);
    /* wait for the created line, then write a key */
    char buf[8192];
    size_t n = 0;
    int put_done = 0;
    while (n < sizeof(buf) - 1 && (int64_t)deadline > kvt_now_us() / 1000) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) > 0) {
            ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
            if (r <= 0)
                break;
            n += (size_t)r;
            buf[n] = '\0';
        }
        if (!put_done && strstr(buf, "\"created\":true")) {
            http_resp pr =
                http_post(s->client_port, "/v3/kv/put", "{\"key\":\"Zm9v\",\"value\":\"YmFy\"}");
            cr_assert_eq(pr.status, 200);
            free(pr.raw);
            put_done = 1;
        }
        if (strstr(buf, "\"events\":"))
            break;
    }
    close(fd);
    buf[n] = '\0';
    cr_assert(strstr(buf, "Transfer-Encoding: chunked"), "%s", buf);
    cr_assert(strstr(buf, "{\"result\":{\"header\":{"), "%s", buf);
    cr_assert(strstr(buf, "\"events\":[{\"kv\":{\"key\":\"Zm9v\",\"create_revision\":\"2\","
                          "\"mod_revision\":\"2\",\"version\":\"1\",\"value\":\"YmFy\"}}]}}\n"),
              "%s", buf);
    stop_server(s);
}

/* The same requests against kvd and etcd: the same bodies once ids, revisions and terms are
 * normalized. */
Test(client_http, same_output_shape_as_etcd, .timeout = 180)
{
    static const struct {
        const char *method, *path, *body;
    } reqs[] = {
        {"GET", "/health", NULL},
        {"POST", "/v3/kv/put", "{\"key\":\"Zm9v\",\"value\":\"YmFy\"}"},
        {"POST", "/v3/kv/put", "{\"key\":\"Zm9v\",\"value\":\"YmF6\",\"prev_kv\":true}"},
        {"POST", "/v3/kv/range", "{\"key\":\"Zm9v\"}"},
        {"POST", "/v3/kv/range", "{\"key\":\"AA==\",\"range_end\":\"AA==\",\"keys_only\":true}"},
        {"POST", "/v3/kv/txn",
         "{\"compare\":[{\"key\":\"Zm9v\",\"result\":\"EQUAL\",\"target\":\"VALUE\","
         "\"value\":\"YmF6\"}],\"success\":[{\"request_range\":{\"key\":\"Zm9v\"}}]}"},
        {"POST", "/v3/kv/deleterange", "{\"key\":\"Zm9v\",\"prev_kv\":true}"},
        {"POST", "/v3/lease/revoke", "{\"ID\":\"12345\"}"},
        {"POST", "/v3/kv/range", "{\"key\":"},
        {"POST", "/v3/kv/put", "{\"key\":\"\"}"},
        {"GET", "/v3/kv/range", NULL},
        {"GET", "/nope", NULL},
        {"POST", "/v3/kv/range", "{\"key\":\"Zm9v\"} trailing {"},
        {"POST", "/v3/kv/range", "{\"key\":\"@@\"}"},
        {"POST", "/v3/kv/range", "{\"key\":\"Zm9v\",\"limit\":\"abc\"}"},
        {"POST", "/v3/kv/range", "[1]"},
        {"HEAD", "/health", NULL},
        {"POST", "/version", NULL},
        {"OPTIONS", "/v3/kv/range", NULL},
    };
    kv_it_server *e = start_server(KV_IT_ETCD);
    if (!e) {
        cr_log_warn("no etcd binary: comparison skipped");
        return;
    }
    kv_it_server *k = start_server(KV_IT_KVD);
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        http_resp a = http_do(k->client_port, reqs[i].method, reqs[i].path, reqs[i].body);
        http_resp b = http_do(e->client_port, reqs[i].method, reqs[i].path, reqs[i].body);
        char *na = normalize(a.body), *nb = normalize(b.body);
        cr_expect_eq(a.status, b.status, "%s %s: kvd %d etcd %d", reqs[i].method, reqs[i].path,
                     a.status, b.status);
        cr_expect_str_eq(na, nb, "%s %s %s:\n kvd  %s\n etcd %s", reqs[i].method, reqs[i].path,
                         reqs[i].body ? reqs[i].body : "", na, nb);
        free(na);
        free(nb);
        free(a.raw);
        free(b.raw);
    }
    stop_server(k);
    stop_server(e);
}

/* Without a leader: /health on the client port is 503 {"health":"false",...} and
 * Health/Check answers NOT_SERVING (08 02). A 3-member cluster loses its leader and one
 * follower; the survivor (a follower) campaigns without a quorum. */
Test(client_http, no_leader_is_unhealthy_on_http_and_grpc, .timeout = 180)
{
    kvt_cluster *c = calloc(1, sizeof(*c));
    cr_assert(c);
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.target = KV_TEST_SERVER_KVD;
    cr_assert_eq(kvt_cluster_init(c, &o), 0);
    cr_assert_eq(kvt_cluster_start(c, 30000), 0);
    int leader = kvt_cluster_wait_leader(c, 20000, NULL);
    cr_assert(leader >= 0, "no leader: %d", leader);
    int survivor = (leader + 1) % 3, other = (leader + 2) % 3;
    http_resp r = http_do(c->m[survivor].client_port, "GET", "/health", NULL);
    cr_assert_eq(r.status, 200, "%s", r.raw);
    free(r.raw);
    cr_assert_eq(kvt_member_kill9(c, leader), 0);
    cr_assert_eq(kvt_member_kill9(c, other), 0);
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        r = http_do(c->m[survivor].client_port, "GET", "/health", NULL);
        ok = r.status == 503 && strstr(r.body, "{\"health\":\"false\"");
        free(r.raw);
        if (!ok)
            kvt_sleep_ms(100);
    }
    cr_assert(ok, "the survivor still reports healthy without a leader");
    kv_it_grpc *g = NULL;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", c->m[survivor].client_port, 5000), 0);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int st = -1;
    cr_assert_eq(kv_it_grpc_call(g, "/grpc.health.v1.Health/Check", (const uint8_t *)"", 0, &resp,
                                 &rlen, 5000, &st, NULL, 0),
                 0);
    cr_assert(st == 0 && rlen == 2 && resp[0] == 0x08 && resp[1] == 2, "not NOT_SERVING");
    free(resp);
    kv_it_grpc_close(g);
    kvt_cluster_destroy(c);
    free(c);
}

/* An HTTP/1.1 connection idle after a keep-alive response is closed after the handshake
 * timeout (--grpc-handshake-timeout), like a silent gRPC connection. */
Test(client_http, idle_keepalive_connection_is_closed, .timeout = 120)
{
    kv_it_server *s = calloc(1, sizeof(*s));
    cr_assert(s);
    const char *const extra[] = {"--grpc-handshake-timeout=500ms", NULL};
    cr_assert_eq(kv_it_server_init(s, KV_IT_KVD, extra), 0);
    cr_assert_eq(kv_it_server_start(s, 20000), 0);
    const char req[] = "GET /version HTTP/1.1\r\nHost: x\r\n\r\n";
    int closed = 0;
    int64_t t0 = kvt_now_us();
    char *out = raw_exchange(s->client_port, req, sizeof(req) - 1, 10000, &closed);
    int64_t ms = (kvt_now_us() - t0) / 1000;
    cr_assert(strstr(out, "\"etcdcluster\":\"3.4.0\"}"), "%s", out);
    cr_assert(closed, "the idle connection stayed open for 10 s");
    cr_assert(ms >= 400, "closed after %lld ms: before the idle timeout", (long long)ms);
    free(out);
    stop_server(s);
}

/* Mutated HTTP/1 requests and JSON bodies (deterministic): every one gets an answer or a
 * close, and the member keeps serving (under ASan/UBSan this is the parser's regression
 * fuzz). */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(client_http, mutated_requests_do_not_hurt_the_member, .timeout = 300)
{
    static const char *const paths[] = {"/v3/kv/put",      "/v3/kv/txn", "/v3/kv/range",
                                        "/v3/lease/grant", "/v3/watch",  "/health"};
    static const char *const bodies[] = {
        "{\"key\":\"Zm9v\",\"value\":\"YmFy\",\"lease\":\"0\"}",
        "{\"compare\":[{\"key\":\"Zm9v\",\"result\":\"EQUAL\",\"target\":\"VALUE\",\"value\":"
        "\"YmF6\"}],\"success\":[{\"request_range\":{\"key\":\"Zm9v\"}},{\"request_put\":{\"key\":"
        "\"YQ==\",\"value\":\"Yg==\"}}],\"failure\":[{\"request_delete_range\":{\"key\":\"YQ==\"}}]"
        "}",
        "{\"key\":\"AA==\",\"range_end\":\"AA==\",\"limit\":\"5\",\"sort_order\":\"DESCEND\"}",
        "{\"TTL\":\"60\",\"ID\":\"77\"}",
        "{\"create_request\":{\"key\":\"Zm9v\",\"prev_kv\":true,\"filters\":[\"NOPUT\"]}}",
        "",
    };
    static const char *const inserts[] = {"{\"a\":", "[[[[", "\"\\ud800\"", "null", "1e999",
                                          "\"-1\"",  "\\",   "\r\n",        ":",    "}"};
    kv_it_server *s = start_server(KV_IT_KVD);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int rounds = 200;
    for (int it = 0; it < rounds; it++) {
        size_t k = (size_t)(rng_next(&seed) % 6);
        char body[1024], req[2048];
        snprintf(body, sizeof(body), "%s", bodies[k]);
        size_t blen = strlen(body);
        int muts = (int)(rng_next(&seed) % 6);
        for (int m = 0; m < muts && blen > 0 && blen < sizeof(body) - 16; m++) {
            size_t i = (size_t)(rng_next(&seed) % blen);
            switch (rng_next(&seed) % 3) {
            case 0:
                body[i] = (char)(rng_next(&seed) & 0xff);
                break;
            case 1:
                memmove(body + i, body + i + 1, blen - i);
                blen--;
                break;
            default: {
                const char *ins = inserts[rng_next(&seed) % 10];
                size_t il = strlen(ins);
                memmove(body + i + il, body + i, blen - i + 1);
                memcpy(body + i, ins, il);
                blen += il;
            }
            }
        }
        int hn = snprintf(req, sizeof(req),
                          "%s %s HTTP/1.1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                          k == 5 ? "GET" : "POST", paths[k], blen);
        if (rng_next(&seed) % 5 == 0) /* a broken head now and then */
            req[rng_next(&seed) % (size_t)hn] = (char)(rng_next(&seed) & 0xff);
        memcpy(req + hn, body, blen);
        int closed = 0;
        /* watch streams stay open: a short read is enough */
        char *out =
            raw_exchange(s->client_port, req, (size_t)hn + blen, k == 4 ? 100 : 500, &closed);
        free(out);
    }
    http_resp r = http_do(s->client_port, "GET", "/health", NULL);
    cr_assert_eq(r.status, 200, "after %d mutated requests: %s", rounds, r.raw);
    free(r.raw);
    r = http_post(s->client_port, "/v3/kv/range", "{\"key\":\"Zm9v\"}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    free(r.raw);
    cr_assert(kv_it_server_alive(s));
    stop_server(s);
}

/* HTTP/1 request buffers count in the process-wide buffer cap (--max-buffered-bytes): a body
 * that would pass it gets 503 and a close, and the refusal is counted. */
Test(client_http, request_buffers_count_in_the_process_cap, .timeout = 120)
{
    kv_it_server *s = calloc(1, sizeof(*s));
    cr_assert(s);
    const char *const extra[] = {"--max-buffered-bytes=1048576", NULL};
    cr_assert_eq(kv_it_server_init(s, KV_IT_KVD, extra), 0);
    cr_assert_eq(kv_it_server_start(s, 20000), 0);
    size_t blen = 1536 * 1024;
    char head[128];
    int hn = snprintf(head, sizeof(head), "POST /v3/kv/put HTTP/1.1\r\nContent-Length: %zu\r\n\r\n",
                      blen);
    char *req = malloc((size_t)hn + blen);
    cr_assert(req);
    memcpy(req, head, (size_t)hn);
    memset(req + hn, ' ', blen);
    int closed = 0;
    char *out = raw_exchange(s->client_port, req, (size_t)hn + blen, 10000, &closed);
    cr_assert(strncmp(out, "HTTP/1.1 503 ", 13) == 0, "%.200s", out);
    cr_assert(closed);
    free(out);
    free(req);
    int st = 0;
    char *body = NULL;
    cr_assert_eq(kvt_http_get(s->metrics_port, "/metrics", 5000, &st, &body), 0);
    double v = 0;
    cr_assert_eq(
        kvt_metric_value(body, "kvd_grpc_requests_refused_total{reason=\"buffered_cap_recv\"}", &v),
        0, "no buffered_cap_recv series");
    cr_assert(v >= 1, "refusal not counted");
    free(body);
    /* small requests still work */
    http_resp r = http_post(s->client_port, "/v3/kv/put", "{\"key\":\"Zm9v\",\"value\":\"YmFy\"}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    free(r.raw);
    stop_server(s);
}

/* "Expect: 100-continue" (curl, bodies over 1 KiB) is answered before the body is sent. */
Test(client_http, expect_100_continue, .timeout = 60)
{
    kv_it_server *s = start_server(KV_IT_KVD);
    const char head[] = "POST /v3/kv/put HTTP/1.1\r\nContent-Length: 29\r\n"
                        "Expect: 100-continue\r\nConnection: close\r\n\r\n";
    const char body[] = "{\"key\":\"Zm9v\",\"value\":\"YmFy\"}";
    int fd = kvt_connect_loopback(s->client_port, 5000);
    cr_assert(fd >= 0);
    uint64_t deadline = (uint64_t)(kvt_now_us() / 1000) + 5000;
    cr_assert_eq(kvt_send_all(fd, head, sizeof(head) - 1, deadline), 0);
    char buf[4096];
    size_t n = 0;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 3000) > 0) {
        ssize_t r = read(fd, buf, sizeof(buf) - 1);
        n = r > 0 ? (size_t)r : 0;
    }
    buf[n] = '\0';
    cr_assert_str_eq(buf, "HTTP/1.1 100 Continue\r\n\r\n");
    cr_assert_eq(kvt_send_all(fd, body, sizeof(body) - 1, deadline), 0);
    n = 0;
    while (n < sizeof(buf) - 1 && poll(&p, 1, 3000) > 0) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    close(fd);
    cr_assert(strncmp(buf, "HTTP/1.1 200 OK", 15) == 0, "%s", buf);
    stop_server(s);
}

/* Reads from fd into buf (NUL-terminated, appended at *n) until `want` appears or timeout_ms
 * passes. Returns 1 if it appeared. */
static int read_until(int fd, char *buf, size_t cap, size_t *n, const char *want,
                      uint32_t timeout_ms)
{
    uint64_t end = kvt_now_ms() + timeout_ms;
    while (!strstr(buf, want) && *n < cap - 1 && kvt_now_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t r = read(fd, buf + *n, cap - 1 - *n);
        if (r <= 0)
            break;
        *n += (size_t)r;
        buf[*n] = '\0';
    }
    return strstr(buf, want) != NULL;
}

static double client_metric(kv_it_server *s, const char *series)
{
    int st = 0;
    char *body = NULL;
    cr_assert_eq(kvt_http_get(s->client_port, "/metrics", 5000, &st, &body), 0);
    double v = -1;
    cr_assert_eq(kvt_metric_value(body, series, &v), 0, "no %s", series);
    free(body);
    return v;
}

/* etcd's gateway is one gRPC connection to its own server: --max-concurrent-streams gateway
 * calls at once (etcd e2e TestV3Curl_MaxStreams_*). With the limit held by watches, a range
 * waits (it is not refused) and runs as soon as one watch ends. */
Test(client_http, gateway_calls_share_the_stream_limit, .timeout = 120)
{
    static const char *const args[] = {"--max-concurrent-streams=2", NULL};
    kv_it_server *s = calloc(1, sizeof(*s));
    cr_assert(s);
    cr_assert_eq(kv_it_server_init(s, KV_IT_KVD, args), 0);
    cr_assert_eq(kv_it_server_start(s, 20000), 0);
    const char watch[] = "POST /v3/watch HTTP/1.1\r\nContent-Length: 33\r\n\r\n"
                         "{\"create_request\":{\"key\":\"Zm9v\"}}";
    const char range[] = "POST /v3/kv/range HTTP/1.1\r\nContent-Length: 14\r\n\r\n"
                         "{\"key\":\"Zm9v\"}";
    int w[2];
    char buf[8192];
    for (int i = 0; i < 2; i++) {
        w[i] = kvt_connect_loopback(s->client_port, 5000);
        cr_assert(w[i] >= 0);
        cr_assert_eq(kvt_send_all(w[i], watch, sizeof(watch) - 1, kvt_now_ms() + 5000), 0);
        size_t n = 0;
        buf[0] = '\0';
        cr_assert(read_until(w[i], buf, sizeof(buf), &n, "\"created\":true", 10000),
                  "watch %d not created: %s", i, buf);
    }
    int r = kvt_connect_loopback(s->client_port, 5000);
    cr_assert(r >= 0);
    cr_assert_eq(kvt_send_all(r, range, sizeof(range) - 1, kvt_now_ms() + 5000), 0);
    size_t n = 0;
    buf[0] = '\0';
    cr_assert_not(read_until(r, buf, sizeof(buf), &n, "HTTP/1.1", 1500),
                  "the range was answered while both slots were held: %s", buf);
    cr_assert_eq(client_metric(s, "kvd_client_http_gateway_waiting"), 1);
    close(w[0]); /* one watch ends: the waiting range runs */
    cr_assert(read_until(r, buf, sizeof(buf), &n, "\"revision\":\"1\"", 10000),
              "the range did not run after a slot freed: %s", buf);
    cr_assert(strstr(buf, "HTTP/1.1 200 "), "%s", buf);
    cr_assert_eq(client_metric(s, "kvd_client_http_gateway_waiting"), 0);
    cr_assert_geq(client_metric(s, "kvd_client_http_gateway_waited_total"), 1);
    /* a waiting client that gives up frees nothing it did not hold */
    int r2 = kvt_connect_loopback(s->client_port, 5000);
    cr_assert(r2 >= 0);
    int w2 = kvt_connect_loopback(s->client_port, 5000);
    cr_assert(w2 >= 0);
    cr_assert_eq(kvt_send_all(w2, watch, sizeof(watch) - 1, kvt_now_ms() + 5000), 0);
    n = 0;
    buf[0] = '\0';
    cr_assert(read_until(w2, buf, sizeof(buf), &n, "\"created\":true", 10000), "%s", buf);
    cr_assert_eq(kvt_send_all(r2, range, sizeof(range) - 1, kvt_now_ms() + 5000), 0);
    kvt_sleep_ms(300);
    close(r2);
    kvt_sleep_ms(300);
    cr_assert_eq(client_metric(s, "kvd_client_http_gateway_waiting"), 0);
    /* the limit still holds: two watches, and the next range waits */
    int r3 = kvt_connect_loopback(s->client_port, 5000);
    cr_assert(r3 >= 0);
    cr_assert_eq(kvt_send_all(r3, range, sizeof(range) - 1, kvt_now_ms() + 5000), 0);
    n = 0;
    buf[0] = '\0';
    cr_assert_not(read_until(r3, buf, sizeof(buf), &n, "HTTP/1.1", 1000), "%s", buf);
    close(w2);
    cr_assert(read_until(r3, buf, sizeof(buf), &n, "\"revision\":\"1\"", 10000), "%s", buf);
    close(r3);
    close(r);
    close(w[1]);
    stop_server(s);
}

/* One HTTP/2 request that is not gRPC (body NULL: none); waits for the stream to end. The
 * response body is st->data (NUL-terminated by this helper). */
static kv_it_grpc_stream *h2_request(kv_it_grpc *g, const char *method, const char *path,
                                     const char *body, const char *const *headers)
{
    kv_it_grpc_req rq = {.method = method, .content_type = "application/json", .metadata = headers};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(g, path, &rq);
    cr_assert(st, "start %s", path);
    cr_assert_eq(kv_it_grpc_send_raw(st, body ? body : "", body ? strlen(body) : 0, 1), 0);
    cr_assert(kv_it_grpc_wait(g, st, 10000), "%s %s: no answer", method, path);
    cr_assert_eq(st->close_code, 0, "%s %s reset: %u", method, path, st->close_code);
    return st;
}

static char *h2_body(const kv_it_grpc_stream *st)
{
    char *b = malloc(st->dlen + 1);
    cr_assert(b);
    memcpy(b, st->data, st->dlen);
    b[st->dlen] = '\0';
    return b;
}

/* curl over TLS negotiates h2 by ALPN, and etcd answers an HTTP/2 request whose content-type
 * is not gRPC with its HTTP API (etcd e2e TestV3CurlPutGet*TLS, TestV3Curl_MaxStreams_*_TLS):
 * the same answers as over HTTP/1.1, gRPC unaffected on the same connection. */
Test(client_http, gateway_and_health_over_http2, .timeout = 120)
{
    static const char *const args[] = {"--max-concurrent-streams=2", NULL};
    kv_it_server *s = calloc(1, sizeof(*s));
    cr_assert(s);
    cr_assert_eq(kv_it_server_init(s, KV_IT_KVD, args), 0);
    cr_assert_eq(kv_it_server_start(s, 20000), 0);
    kv_it_grpc *g = NULL;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", s->client_port, 5000), 0);

    kv_it_grpc_stream *st =
        h2_request(g, "POST", "/v3/kv/put", "{\"key\":\"Zm9v\",\"value\":\"YmFy\"}", NULL);
    char *b = h2_body(st);
    cr_assert_eq(st->http_status, 200, "put: %s", b);
    cr_assert(strstr(b, "{\"header\":{\"cluster_id\":\"") && strstr(b, "\"revision\":\"2\""), "%s",
              b);
    free(b);
    st = h2_request(g, "POST", "/v3/kv/range", "{\"key\":\"Zm9v\"}", NULL);
    b = h2_body(st);
    cr_assert_eq(st->http_status, 200);
    cr_assert(strstr(b, "\"value\":\"YmFy\"}],\"count\":\"1\""), "%s", b);
    free(b);
    /* errors as grpc-gateway's, and the plain routes */
    st = h2_request(g, "POST", "/v3/kv/range", "{\"key\":", NULL);
    b = h2_body(st);
    cr_assert_eq(st->http_status, 400, "%s", b);
    cr_assert(strstr(b, "\"code\":3}"), "%s", b);
    free(b);
    st = h2_request(g, "POST", "/v3/lease/revoke", "{\"ID\":\"12345\"}", NULL);
    b = h2_body(st);
    cr_assert_eq(st->http_status, 404, "%s", b);
    cr_assert(strstr(b, "requested lease not found"), "%s", b);
    free(b);
    st = h2_request(g, "GET", "/health", NULL, NULL);
    b = h2_body(st);
    cr_assert_eq(st->http_status, 200);
    cr_assert_str_eq(b, "{\"health\":\"true\"}");
    free(b);
    st = h2_request(g, "GET", "/version", NULL, NULL);
    b = h2_body(st);
    cr_assert(strstr(b, "\"etcdcluster\":\"3.4.0\""), "%s", b);
    free(b);
    st = h2_request(g, "GET", "/nowhere", NULL, NULL);
    cr_assert_eq(st->http_status, 404);
    /* a body over --max-request-bytes + 512 KiB: 413, and the connection goes on */
    size_t big = 3u << 20;
    char *huge = malloc(big + 1);
    cr_assert(huge);
    memset(huge, 'a', big);
    huge[big] = '\0';
    st = h2_request(g, "POST", "/v3/kv/put", huge, NULL);
    cr_assert_eq(st->http_status, 413);
    free(huge);

    /* a watch stays open and streams one JSON object per line; it holds a gateway slot */
    kv_it_grpc_req rq = {.content_type = "application/json"};
    kv_it_grpc_stream *w = kv_it_grpc_stream_start(g, "/v3/watch", &rq);
    cr_assert(w);
    const char wreq[] = "{\"create_request\":{\"key\":\"Zm9v\"}}";
    cr_assert_eq(kv_it_grpc_send_raw(w, wreq, sizeof(wreq) - 1, 1), 0);
    cr_assert(kv_it_grpc_wait_bytes(g, w, 20, 10000));
    cr_assert_eq(w->http_status, 200);
    st = h2_request(g, "POST", "/v3/kv/put", "{\"key\":\"Zm9v\",\"value\":\"YmF6\"}", NULL);
    cr_assert_eq(st->http_status, 200);
    uint64_t deadline = kvt_now_ms() + 10000;
    while (!memmem(w->data, w->dlen, "\"value\":\"YmF6\"", 14) && kvt_now_ms() < deadline)
        kv_it_grpc_pump(g, 100);
    b = h2_body(w);
    cr_assert(strstr(b, "{\"result\":{\"header\"") && strstr(b, "\"created\":true"), "%s", b);
    cr_assert(strstr(b, "}}\n{\"result\":") && strstr(b, "\"value\":\"YmF6\""), "%s", b);
    cr_assert_not(w->closed);
    free(b);
    /* gRPC on the same connection */
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int gst = -1;
    static const uint8_t range_foo[] = {0x0a, 3, 'f', 'o', 'o'};
    cr_assert_eq(kv_it_grpc_call(g, "/etcdserverpb.KV/Range", range_foo, sizeof(range_foo), &resp,
                                 &rlen, 5000, &gst, NULL, 0),
                 0);
    cr_assert_eq(gst, 0);
    free(resp);
    /* the client resets the watch: its slot is free again (limit 2: two more watches fit,
     * and a range is answered at once) */
    kv_it_grpc_stream_cancel(w);
    kv_it_grpc_flush(g, 2000);
    kv_it_grpc_stream *w2[2];
    for (int i = 0; i < 2; i++) {
        w2[i] = kv_it_grpc_stream_start(g, "/v3/watch", &rq);
        cr_assert(w2[i]);
        cr_assert_eq(kv_it_grpc_send_raw(w2[i], wreq, sizeof(wreq) - 1, 1), 0);
        cr_assert(kv_it_grpc_wait_bytes(g, w2[i], 20, 10000), "watch %d", i);
    }
    /* both slots held: a range waits over HTTP/2 too (from another connection: this one is
     * at its own SETTINGS_MAX_CONCURRENT_STREAMS), and runs when one watch ends */
    kv_it_grpc *g2 = NULL;
    cr_assert_eq(kv_it_grpc_open(&g2, "127.0.0.1", s->client_port, 5000), 0);
    kv_it_grpc_stream *r = kv_it_grpc_stream_start(g2, "/v3/kv/range", &rq);
    cr_assert(r);
    cr_assert_eq(kv_it_grpc_send_raw(r, "{\"key\":\"Zm9v\"}", 14, 1), 0);
    cr_assert_not(kv_it_grpc_wait(g2, r, 1500), "answered while both slots were held");
    cr_assert_eq(client_metric(s, "kvd_client_http_gateway_waiting"), 1);
    kv_it_grpc_stream_cancel(w2[0]);
    kv_it_grpc_flush(g, 2000);
    cr_assert(kv_it_grpc_wait(g2, r, 10000), "the range did not run after a slot freed");
    cr_assert_eq(r->http_status, 200);
    kv_it_grpc_close(g2);
    /* a request reset half-way through its body, and one cut by the connection's end */
    kv_it_grpc_stream *half = kv_it_grpc_stream_start(g, "/v3/kv/put", &rq);
    cr_assert(half);
    cr_assert_eq(kv_it_grpc_send_raw(half, "{\"key\":", 7, 0), 0);
    kv_it_grpc_flush(g, 2000);
    kv_it_grpc_stream_cancel(half);
    half = kv_it_grpc_stream_start(g, "/v3/kv/put", &rq);
    cr_assert(half);
    cr_assert_eq(kv_it_grpc_send_raw(half, "{\"key\":", 7, 0), 0);
    kv_it_grpc_flush(g, 2000);
    kv_it_grpc_close(g);
    /* streams cut by the connection's end leave the count right */
    kvt_sleep_ms(300);
    cr_assert_eq(client_metric(s, "kvd_client_http_gateway_waiting"), 0);
    st = NULL;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", s->client_port, 5000), 0);
    st = h2_request(g, "POST", "/v3/kv/range", "{\"key\":\"Zm9v\"}", NULL);
    cr_assert_eq(st->http_status, 200, "the member still answers");
    kv_it_grpc_close(g);
    /* and stops cleanly (under ASan: no report of a stream's state used after its end) */
    kv_it_server_stop(s, 20000);
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(s, &log), 0);
    cr_assert(strstr(log, "kvd: stopped") && !strstr(log, "Sanitizer") &&
                  !strstr(log, "runtime error"),
              "%s", log);
    free(log);
    stop_server(s);
}

/* --enable-grpc-gateway=false (etcd's flag, default true): the client port serves no
 * grpc-gateway, so POST /v3/kv/range and /v3beta/kv/range answer 404 "404 page not found" as
 * any unknown path, while /health still answers. The same against etcd 3.4 when installed. */
static void gateway_off(kv_it_kind kind)
{
    kv_it_server *s = calloc(1, sizeof(*s));
    cr_assert(s);
    const char *const extra[] = {"--enable-grpc-gateway=false", NULL};
    int rc = kv_it_server_init(s, kind, extra);
    if (rc == -ENOENT && kind == KV_IT_ETCD) {
        free(s);
        return;
    }
    cr_assert_eq(rc, 0);
    cr_assert_eq(kv_it_server_start(s, 20000), 0, "%s with the gateway off", kv_it_kind_name(kind));
    const char *who = kv_it_kind_name(kind);
    static const char *const paths[] = {"/v3/kv/range", "/v3beta/kv/range"};
    for (size_t i = 0; i < 2; i++) {
        http_resp r = http_post(s->client_port, paths[i], "{\"key\":\"YQ==\"}");
        cr_assert_eq(r.status, 404, "%s: %s: %s", who, paths[i], r.raw);
        cr_assert(strstr(r.body, "404 page not found"), "%s: %s: %s", who, paths[i], r.raw);
        free(r.raw);
    }
    http_resp h = http_do(s->client_port, "GET", "/health", NULL);
    cr_assert_eq(h.status, 200, "%s: /health: %s", who, h.raw);
    free(h.raw);
    stop_server(s);
}

Test(client_http, the_gateway_can_be_turned_off, .timeout = 120)
{
    gateway_off(KV_IT_KVD);
    gateway_off(KV_IT_ETCD);
    /* and on by default */
    kv_it_server *s = start_server(KV_IT_KVD);
    http_resp r = http_post(s->client_port, "/v3/kv/range", "{\"key\":\"YQ==\"}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    free(r.raw);
    stop_server(s);
}
