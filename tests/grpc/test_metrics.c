/* Unit tests: the Prometheus registry. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static double half(void *arg)
{
    return *(double *)arg / 2;
}

Test(metrics, render_families_once)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 0), 0);
    kv_metric *ok = kv_metrics_counter(m, "kvd_req_total", "Requests.", "code=\"OK\"");
    kv_metric *bad = kv_metrics_counter(m, "kvd_req_total", "Requests.", "code=\"INTERNAL\"");
    kv_metric *g = kv_metrics_gauge(m, "kvd_open", "Open things.\nwith newline", NULL);
    cr_assert(ok && bad && g);
    cr_assert_eq(kv_metrics_counter(m, "kvd_req_total", "x", "code=\"OK\""), ok, "lookup");
    kv_metric_inc(ok);
    kv_metric_add(ok, 2);
    kv_metric_inc(bad);
    kv_metric_set(g, 5);
    kv_metric_gauge_add(g, -1.5);
    double v = 9;
    cr_assert_eq(kv_metrics_gauge_fn(m, "kvd_half", "Half.", half, &v), 0);
    char *out;
    size_t len;
    cr_assert_eq(kv_metrics_render(m, &out, &len), 0);
    cr_assert_eq(strlen(out), len);
    cr_assert_eq(count(out, "# TYPE kvd_req_total counter\n"), 1);
    cr_assert_eq(count(out, "# HELP kvd_req_total Requests.\n"), 1);
    cr_assert(strstr(out, "kvd_req_total{code=\"OK\"} 3\n"));
    cr_assert(strstr(out, "kvd_req_total{code=\"INTERNAL\"} 1\n"));
    cr_assert(strstr(out, "# HELP kvd_open Open things.\\nwith newline\n"));
    cr_assert(strstr(out, "# TYPE kvd_open gauge\nkvd_open 3.5\n"));
    cr_assert(strstr(out, "kvd_half 4.5\n"));
    /* families sorted by name: kvd_half < kvd_open < kvd_req_total */
    cr_assert(strstr(out, "kvd_half ") < strstr(out, "kvd_open "));
    cr_assert(strstr(out, "kvd_open ") < strstr(out, "kvd_req_total{"));
    free(out);
    kv_metrics_gauge_fn_remove(m, &v);
    cr_assert_eq(kv_metrics_render(m, &out, &len), 0);
    cr_assert_null(strstr(out, "kvd_half"));
    free(out);
    kv_metrics_free(m);
}

Test(metrics, bounded_series)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 3), 0);
    cr_assert_not_null(kv_metrics_counter(m, "a_total", "", "x=\"1\""));
    cr_assert_not_null(kv_metrics_counter(m, "a_total", "", "x=\"2\""));
    cr_assert_not_null(kv_metrics_gauge(m, "b", "", NULL));
    cr_assert_null(kv_metrics_counter(m, "a_total", "", "x=\"3\""));
    cr_assert_eq(kv_metrics_gauge_fn(m, "c", "", half, NULL), -ENOSPC);
    cr_assert_eq(kv_metrics_refused(m), 2);
    cr_assert_eq(kv_metrics_size(m), 3);
    /* existing series are still found */
    cr_assert_not_null(kv_metrics_counter(m, "a_total", "", "x=\"2\""));
    kv_metric_inc(NULL); /* refused series are no-ops */
    char *out;
    size_t len;
    cr_assert_eq(kv_metrics_render(m, &out, &len), 0);
    cr_assert(strstr(out, "kvd_metrics_series_refused_total 2\n"));
    free(out);
    kv_metrics_free(m);
}

Test(metrics, type_conflicts_and_bad_names)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 0), 0);
    cr_assert_not_null(kv_metrics_counter(m, "x_total", "", NULL));
    cr_assert_null(kv_metrics_gauge(m, "x_total", "", NULL));
    cr_assert_null(kv_metrics_gauge(m, "x_total", "", "l=\"1\""));
    cr_assert_null(kv_metrics_counter(m, "1bad", "", NULL));
    cr_assert_null(kv_metrics_counter(m, "bad-name", "", NULL));
    cr_assert_null(kv_metrics_counter(m, "ok", "", "a=\"\n\""));
    cr_assert_eq(kv_metrics_refused(m), 0);
    kv_metrics_free(m);
}

Test(metrics, many_series_lookup)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 4096), 0);
    char l[32];
    for (int i = 0; i < 4096; i++) {
        snprintf(l, sizeof(l), "i=\"%d\"", i);
        kv_metric *c = kv_metrics_counter(m, "many_total", "", l);
        cr_assert_not_null(c);
        kv_metric_add(c, i);
    }
    for (int i = 0; i < 4096; i += 97) {
        snprintf(l, sizeof(l), "i=\"%d\"", i);
        cr_assert_eq(kv_metric_value(kv_metrics_counter(m, "many_total", "", l)), i);
    }
    cr_assert_null(kv_metrics_counter(m, "many_total", "", "i=\"x\""));
    cr_assert_eq(kv_metrics_refused(m), 1);
    kv_metrics_free(m);
}

Test(metrics, labeled_callback_gauges_per_owner)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 0), 0);
    double a = 10, b = 20;
    cr_assert_eq(kv_metrics_gauge_fn_labeled(m, "kvd_buf", "Buffered.", "l=\"a\"", half, &a), 0);
    cr_assert_eq(kv_metrics_gauge_fn_labeled(m, "kvd_buf", "Buffered.", "l=\"b\"", half, &b), 0);
    char *out;
    size_t len;
    cr_assert_eq(kv_metrics_render(m, &out, &len), 0);
    cr_assert(strstr(out, "# TYPE kvd_buf gauge\nkvd_buf{l=\"a\"} 5\nkvd_buf{l=\"b\"} 10\n"), "%s",
              out);
    free(out);
    kv_metrics_gauge_fn_remove(m, &a); /* owner a goes away; b stays */
    cr_assert_eq(kv_metrics_render(m, &out, &len), 0);
    cr_assert_null(strstr(out, "l=\"a\""));
    cr_assert(strstr(out, "kvd_buf{l=\"b\"} 10\n"));
    free(out);
    kv_metrics_free(m);
}

static double seven(void *arg)
{
    (void)arg;
    return 7;
}

Test(metrics, callback_counter_renders_as_counter)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 0), 0);
    int owner;
    cr_assert_eq(kv_metrics_counter_fn(m, "x_total", "A counter kept elsewhere.", seven, &owner),
                 0);
    char *out;
    size_t len;
    cr_assert_eq(kv_metrics_render(m, &out, &len), 0);
    cr_assert(strstr(out, "# TYPE x_total counter\nx_total 7\n") != NULL, "%s", out);
    free(out);
    kv_metrics_gauge_fn_remove(m, &owner);
    cr_assert_eq(kv_metrics_render(m, &out, &len), 0);
    cr_assert(strstr(out, "x_total 7") == NULL, "removed callbacks are not rendered: %s", out);
    free(out);
    kv_metrics_free(m);
}

Test(metrics, histogram_renders_buckets_sum_count)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 0), 0);
    double b[14];
    kv_metrics_exp_buckets(b, 0.001, 2, 14); /* etcd's WAL fsync buckets */
    cr_assert_float_eq(b[13], 8.192, 1e-12);
    kv_metric *h =
        kv_metrics_histogram(m, "etcd_disk_wal_fsync_duration_seconds", "Fsync.", NULL, b, 14);
    cr_assert_not_null(h);
    cr_assert_eq(kv_metrics_histogram(m, "etcd_disk_wal_fsync_duration_seconds", "x", NULL, b, 14),
                 h, "lookup");
    kv_metric_observe(h, 0.0005); /* first bucket */
    kv_metric_observe(h, 0.001);  /* le is inclusive */
    kv_metric_observe(h, 0.003);  /* le=0.004 */
    kv_metric_observe(h, 100);    /* +Inf only */
    cr_assert_eq(kv_metric_hist_count(h), 4);
    cr_assert_float_eq(kv_metric_hist_sum(h), 100.0045, 1e-9);
    char *out;
    size_t len;
    cr_assert_eq(kv_metrics_render(m, &out, &len), 0);
    cr_assert(strstr(out, "# TYPE etcd_disk_wal_fsync_duration_seconds histogram\n"));
    cr_assert(strstr(out, "etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 2\n"));
    cr_assert(strstr(out, "etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.002\"} 2\n"));
    cr_assert(strstr(out, "etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.004\"} 3\n"));
    cr_assert(strstr(out, "etcd_disk_wal_fsync_duration_seconds_bucket{le=\"8.192\"} 3\n"));
    cr_assert(strstr(out, "etcd_disk_wal_fsync_duration_seconds_bucket{le=\"+Inf\"} 4\n"));
    cr_assert(strstr(out, "etcd_disk_wal_fsync_duration_seconds_sum 100.0045"));
    cr_assert(strstr(out, "etcd_disk_wal_fsync_duration_seconds_count 4\n"));
    cr_assert_eq(count(out, "_bucket{"), 15);
    free(out);
    kv_metrics_free(m);
}

Test(metrics, histogram_labels_and_peer_buckets)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 0), 0);
    double b[16];
    kv_metrics_exp_buckets(b, 0.0001, 2, 16); /* etcd's peer round-trip buckets */
    kv_metric *h = kv_metrics_histogram(m, "etcd_network_peer_round_trip_time_seconds", "RTT.",
                                        "To=\"8e9e05c52164694d\"", b, 16);
    cr_assert_not_null(h);
    kv_metric_observe(h, 0.0003);
    char *out;
    cr_assert_eq(kv_metrics_render(m, &out, NULL), 0);
    cr_assert(strstr(out,
                     "etcd_network_peer_round_trip_time_seconds_bucket{To=\"8e9e05c52164694d\","
                     "le=\"0.0002\"} 0\n"));
    cr_assert(strstr(out,
                     "etcd_network_peer_round_trip_time_seconds_bucket{To=\"8e9e05c52164694d\","
                     "le=\"0.0004\"} 1\n"));
    cr_assert(strstr(out, "le=\"3.2768\"} 1\n"));
    cr_assert(strstr(
        out, "etcd_network_peer_round_trip_time_seconds_count{To=\"8e9e05c52164694d\"} 1\n"));
    free(out);
    kv_metrics_free(m);
}

Test(metrics, histogram_bounds_and_conflicts)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 3), 0);
    double ok[3] = {1, 2, 3}, other[3] = {1, 2, 4}, bad[3] = {1, 1, 3};
    double many[KV_METRICS_MAX_BUCKETS + 1];
    kv_metrics_exp_buckets(many, 1, 2, KV_METRICS_MAX_BUCKETS + 1);
    cr_assert_null(kv_metrics_histogram(m, "h", "", NULL, bad, 3), "not increasing");
    cr_assert_null(kv_metrics_histogram(m, "h", "", NULL, ok, 0), "no bounds");
    cr_assert_null(kv_metrics_histogram(m, "h", "", NULL, many, KV_METRICS_MAX_BUCKETS + 1));
    cr_assert_not_null(kv_metrics_histogram(m, "h", "", "a=\"1\"", ok, 3));
    cr_assert_null(kv_metrics_histogram(m, "h", "", "a=\"2\"", other, 3), "family bounds differ");
    cr_assert_eq(kv_metrics_size(m), 1, "a refused series leaves nothing behind");
    cr_assert_not_null(kv_metrics_histogram(m, "h", "", "a=\"2\"", ok, 3));
    cr_assert_null(kv_metrics_counter(m, "h", "", NULL), "type conflict");
    cr_assert_not_null(kv_metrics_counter(m, "c2", "", NULL));
    cr_assert_null(kv_metrics_histogram(m, "h", "", "a=\"3\"", ok, 3), "registry full");
    cr_assert_eq(kv_metrics_refused(m), 1);
    kv_metric_observe(NULL, 1); /* no-op */
    kv_metric_observe(kv_metrics_counter(m, "c2", "", NULL), 1);
    cr_assert_eq(kv_metric_value(kv_metrics_counter(m, "c2", "", NULL)), 0);
    kv_metrics_free(m);
}

struct observer_arg {
    kv_metric *h;
    int n;
};

static void *observer(void *p)
{
    struct observer_arg *a = p;
    for (int i = 0; i < a->n; i++)
        kv_metric_observe(a->h, (i & 1) ? 0.5 : 2.0);
    return NULL;
}

/* Worker threads time their own disk work (metrics.h): concurrent observations are all kept. */
Test(metrics, histogram_observe_from_threads)
{
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 0), 0);
    double b[2] = {1, 4};
    kv_metric *h = kv_metrics_histogram(m, "h_seconds", "", NULL, b, 2);
    cr_assert_not_null(h);
    pthread_t t[4];
    struct observer_arg a = {h, 100000};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, observer, &a), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(kv_metric_hist_count(h), 400000);
    cr_assert_float_eq(kv_metric_hist_sum(h), 200000 * 0.5 + 200000 * 2.0, 1e-6);
    char *out;
    cr_assert_eq(kv_metrics_render(m, &out, NULL), 0);
    cr_assert(strstr(out, "h_seconds_bucket{le=\"1\"} 200000\n"), "%s", out);
    cr_assert(strstr(out, "h_seconds_bucket{le=\"4\"} 400000\n"), "%s", out);
    free(out);
    kv_metrics_free(m);
}
