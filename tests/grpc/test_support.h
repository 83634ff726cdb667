/*
 * test_support.h - helpers for the transport tests: a harness that runs a kv_grpc_server and
 * a kv_http_server on a libuv loop in a background thread (with echo test methods), and a
 * blocking nghttp2 *client* plus a raw HTTP/1.1 client for driving them from the test thread.
 */
#ifndef KV_TEST_SUPPORT_H
#define KV_TEST_SUPPORT_H

#include <nghttp2/nghttp2.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "grpc/grpc_server.h"
#include "http/http_server.h"
#include "metrics/metrics.h"

enum { HEALTH_OK, HEALTH_FAIL, HEALTH_SLOW };

typedef struct harness {
    uv_loop_t loop;
    uv_thread_t thread;
    uv_async_t stop;
    kv_metrics *metrics;
    kv_grpc_server *grpc;
    kv_http_server *http;
    int grpc_port, http_port;
    atomic_int cancels; /* on_cancel calls seen by the test app */
    atomic_int half_closes;
    atomic_int health_mode;
    kv_http_health_done_fn slow_done; /* a held (slow) health answer */
    void *slow_ctx;
    char *metrics_text; /* rendered after stop */
    int loop_close_rv;  /* uv_loop_close() result: 0 = every handle was closed */
} harness;

/* Starts servers on 127.0.0.1:0. cfg/http_cfg may be NULL. */
void harness_start(harness *h, const kv_grpc_config *cfg, const kv_http_config *http_cfg);
/* Stops the servers, joins the thread, renders metrics into h->metrics_text, frees. */
void harness_stop(harness *h);

typedef struct h2stream {
    int32_t id;
    int http_status;
    int grpc_status; /* -1 until seen */
    char grpc_message[512];
    uint8_t *data;
    size_t dlen;
    int closed;
    uint32_t close_code;
    uint8_t *out;
    size_t out_len, out_off;
    int out_eof;
} h2stream;

typedef struct h2client {
    int fd;
    nghttp2_session *s;
    h2stream streams[128];
    int n;
    int conn_closed;
    int goaway;
    const char *authority; /* NULL = "localhost" */
    const char *method;    /* NULL = "POST" */
} h2client;

int tcp_connect(int port); /* blocking socket with 5 s timeouts, or -1 */
int h2c_connect(h2client *c, int port);
/* Like h2c_connect, advertising SETTINGS_INITIAL_WINDOW_SIZE = window (0: a reader that
 * never opens its stream windows, so the server can send no DATA). */
int h2c_connect_window(h2client *c, int port, uint32_t window);
void h2c_close(h2client *c);
/* content_type NULL = "application/grpc"; timeout NULL = none. */
h2stream *h2c_start(h2client *c, const char *path, const char *content_type, const char *timeout);
/* Like h2c_start with one extra metadata header (md_name may be NULL). */
h2stream *h2c_start_md(h2client *c, const char *path, const char *content_type, const char *timeout,
                       const char *md_name, const char *md_value);
/* Queue raw DATA bytes (eof = END_STREAM after them). */
void h2c_send(h2client *c, h2stream *st, const void *data, size_t n, int eof);
/* Queue one gRPC message (5-byte prefix + body). */
void h2c_send_msg(h2client *c, h2stream *st, const void *msg, size_t n, int eof);
/* Pumps I/O until st is closed (st NULL: until the connection closes) or timeout_ms passes.
 * Returns 1 if the condition was met. */
int h2c_wait(h2client *c, h2stream *st, int timeout_ms);
/* Pumps until st has received at least n response bytes (or is closed). */
int h2c_wait_bytes(h2client *c, h2stream *st, size_t n, int timeout_ms);
/* Number of complete gRPC messages in st->data; copies message idx (if out) */
size_t grpc_msgs(const h2stream *st, size_t idx, const uint8_t **msg, size_t *len);

/* HTTP/1.1 GET; returns malloc'd full response (head + body) or NULL. */
char *http_get(int port, const char *path);

#endif
