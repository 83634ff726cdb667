/*
 * test_support.h - helpers for the transport tests: a harness that runs a kv_grpc_server and
 * a kv_http_server on a libuv loop in a background thread (with echo test methods), and a
 * raw HTTP/1.1 client. The HTTP/2 client that drives them is tests/lib grpc_raw.
 */
#ifndef KV_TEST_SUPPORT_H
#define KV_TEST_SUPPORT_H

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
    atomic_int cancels;         /* on_cancel calls seen by the test app */
    atomic_int cancels_in_send; /* ... of them, run while the app was inside a send */
    int in_send;                /* the loop thread: the test app is in kv_grpc_call_send */
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

int tcp_connect(int port); /* blocking socket with 5 s timeouts, or -1 */

/* HTTP/1.1 GET; returns malloc'd full response (head + body) or NULL. */
char *http_get(int port, const char *path);

/* The value after the first occurrence of series (e.g. "\nkvd_x "; include the separator) in
 * a metrics text, or -1 if it is not there. */
double metric_value(const char *text, const char *series);

#endif
