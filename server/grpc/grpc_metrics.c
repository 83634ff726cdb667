/*
 * grpc_metrics.c - go-grpc-prometheus's server metrics, as etcd 3.4 exports them
 * (docs/metrics.md "gRPC"): grpc_server_started_total, grpc_server_handled_total and
 * grpc_server_handling_seconds with the labels grpc_type, grpc_service, grpc_method (and
 * grpc_code), and etcd's etcd_network_client_grpc_{sent,received}_bytes_total (message
 * payload bytes, as etcd's codec counts them).
 *
 * Bounded: label values come only from the server's own method table; every path that is
 * not in it (unknown service or method, a request rejected before routing) is counted under
 * grpc_service="unknown",grpc_method="unknown". As go-grpc-prometheus's InitializeMetrics,
 * started and handled (every code) exist at 0 for every method from the start; a method's
 * handling histogram appears with its first finished call. Loop thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc_internal.h"

#define N_CODES 17

struct kv_grpc_mm {
    /* grpc_method=..,grpc_service=..,grpc_type=..: sorted by name, as Go's client renders
     * them (etcd's e2e tests match the text) */
    char labels[KV_GRPC_MAX_PATH + 96];
    kv_metric *started;
    kv_metric *handled[N_CODES];
    kv_metric *handling;
};

/* grpc-go's codes.Code.String(), the grpc_code values etcd exports. */
static const char *const code_names[N_CODES] = {
    "OK",       "Canceled",        "Unknown",          "InvalidArgument",   "DeadlineExceeded",
    "NotFound", "AlreadyExists",   "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted",  "OutOfRange",      "Unimplemented",    "Internal",          "Unavailable",
    "DataLoss", "Unauthenticated",
};

/* prometheus.DefBuckets: go-grpc-prometheus's handling-time buckets. */
static const double handling_buckets[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};

static const char *grpc_type(const kv_grpc_method *m)
{
    if (!m->streaming)
        return "unary";
    size_t n = strlen(m->path);
    /* the server-streaming RPCs of etcd's API; the other streaming ones are bidirectional */
    if ((n >= 9 && strcmp(m->path + n - 9, "/Snapshot") == 0) ||
        (n >= 8 && strcmp(m->path + n - 8, "/Observe") == 0))
        return "server_stream";
    return "bidi_stream";
}

static void make_labels(struct kv_grpc_mm *mm, const kv_grpc_method *m)
{
    if (!m) {
        snprintf(mm->labels, sizeof(mm->labels),
                 "grpc_method=\"unknown\",grpc_service=\"unknown\",grpc_type=\"unary\"");
        return;
    }
    const char *p = m->path[0] == '/' ? m->path + 1 : m->path;
    const char *slash = strrchr(p, '/');
    int svc = slash ? (int)(slash - p) : 0;
    snprintf(mm->labels, sizeof(mm->labels),
             "grpc_method=\"%s\",grpc_service=\"%.*s\",grpc_type=\"%s\"", slash ? slash + 1 : p,
             svc, p, grpc_type(m));
}

int kv_grpc_metrics_init(kv_grpc_server *s)
{
    kv_metrics *m = s->metrics;
    if (!m)
        return 0;
    s->mm = calloc(s->n_methods + 1, sizeof(*s->mm));
    if (!s->mm)
        return -ENOMEM;
    s->m_grpc_sent = kv_metrics_counter(m, "etcd_network_client_grpc_sent_bytes_total",
                                        "The total number of bytes sent to grpc clients.", NULL);
    s->m_grpc_recv =
        kv_metrics_counter(m, "etcd_network_client_grpc_received_bytes_total",
                           "The total number of bytes received from grpc clients.", NULL);
    for (size_t i = 0; i <= s->n_methods; i++) {
        struct kv_grpc_mm *mm = &s->mm[i];
        make_labels(mm, i < s->n_methods ? &s->methods[i] : NULL);
        mm->started = kv_metrics_counter(m, "grpc_server_started_total",
                                         "Total number of RPCs started on the server.", mm->labels);
        for (int c = 0; c < N_CODES; c++) {
            char l[sizeof(mm->labels) + 40];
            snprintf(l, sizeof(l), "grpc_code=\"%s\",%s", code_names[c], mm->labels);
            mm->handled[c] = kv_metrics_counter(
                m, "grpc_server_handled_total",
                "Total number of RPCs completed on the server, regardless of success or failure.",
                l);
        }
    }
    return 0;
}

void kv_grpc_metrics_free(kv_grpc_server *s)
{
    free(s->mm);
    s->mm = NULL;
}

static struct kv_grpc_mm *mm_of(kv_grpc_server *s, const kv_grpc_method *m)
{
    if (!s->mm)
        return NULL;
    size_t i = m && m >= s->methods && m < s->methods + s->n_methods ? (size_t)(m - s->methods)
                                                                     : s->n_methods;
    return &s->mm[i];
}

void kv_grpc_metrics_started(kv_grpc_call *call)
{
    if (call->t_start_ns)
        return;
    call->t_start_ns = uv_hrtime();
    struct kv_grpc_mm *mm = mm_of(call->conn->srv, call->method);
    if (mm)
        kv_metric_inc(mm->started);
}

void kv_grpc_metrics_handled(kv_grpc_call *call, int status)
{
    kv_grpc_server *s = call->conn->srv;
    struct kv_grpc_mm *mm = mm_of(s, call->method);
    if (!mm)
        return;
    if (!call->t_start_ns) /* refused before routing: started and handled together */
        kv_grpc_metrics_started(call);
    kv_metric_inc(mm->handled[status >= 0 && status < N_CODES ? status : 2 /* Unknown */]);
    if (!mm->handling)
        mm->handling = kv_metrics_histogram(
            s->metrics, "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level "
            "handled by the server.",
            mm->labels, handling_buckets, sizeof(handling_buckets) / sizeof(handling_buckets[0]));
    kv_metric_observe(mm->handling, (double)(uv_hrtime() - call->t_start_ns) / 1e9);
}

void kv_grpc_metrics_bytes(kv_grpc_server *s, size_t sent, size_t received)
{
    if (sent)
        kv_metric_add(s->m_grpc_sent, (int64_t)sent);
    if (received)
        kv_metric_add(s->m_grpc_recv, (int64_t)received);
}
