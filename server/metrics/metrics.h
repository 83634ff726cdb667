/*
 * metrics.h - a small, bounded Prometheus registry (single-threaded).
 *
 * Contract:
 * - A registry holds at most `max_series` series. Each series is one (name, labels) pair of a
 *   counter (int64, monotonic by convention), a gauge (double) or a callback gauge (double
 *   computed at render time). Creating a series past the bound fails (NULL / -ENOSPC) and is
 *   counted; the count is exported as `kvd_metrics_series_refused_total`.
 * - Series are looked up or created by (name, labels). `labels` is the literal text between
 *   the braces, e.g. `method="/etcdserverpb.KV/Put",code="OK"` (or NULL/"" for none). The caller
 *   must only pass label values from a bounded set: never raw remote input.
 * - A name is one family: re-using a name with a different type fails.
 * - Returned kv_metric pointers are owned by the registry and stay valid until
 *   kv_metrics_free(). Update helpers accept NULL (so a refused series is a no-op).
 * - Not thread-safe: use from the loop thread only. One exception: kv_metric_observe() on an
 *   existing histogram may run on any thread (bucket counts and the sum are atomic), so a
 *   worker thread can time its own disk work (docs/metrics.md).
 * - A histogram series has fixed upper bounds given at registration (at most
 *   KV_METRICS_MAX_BUCKETS, strictly increasing, finite; +Inf is implicit) and renders as
 *   `name_bucket{...,le="b"}` (cumulative), `name_sum` and `name_count`. It counts as one
 *   series against max_series.
 */
#ifndef KV_METRICS_H
#define KV_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define KV_METRICS_DEFAULT_MAX_SERIES 4096
#define KV_METRICS_MAX_BUCKETS 32

typedef struct kv_metrics kv_metrics;
typedef struct kv_metric kv_metric;

/* Creates a registry bounded to max_series (0 = default). *out is owned by the caller and
 * freed with kv_metrics_free(). Returns 0, -EINVAL or -ENOMEM. */
int kv_metrics_new(kv_metrics **out, size_t max_series);
/* Frees the registry and every series. NULL is a no-op. */
void kv_metrics_free(kv_metrics *m);

/* Look up or create a counter / gauge. name must match [a-zA-Z_:][a-zA-Z0-9_:]*; help and
 * labels are copied (labels must not contain a newline). Returns NULL on a full registry
 * (counted), a type conflict, invalid input or out-of-memory. */
kv_metric *kv_metrics_counter(kv_metrics *m, const char *name, const char *help,
                              const char *labels);
kv_metric *kv_metrics_gauge(kv_metrics *m, const char *name, const char *help, const char *labels);

/* Registers a gauge whose value is fn(arg) at render time (no labels). fn/arg are borrowed
 * until kv_metrics_gauge_fn_remove(m, arg). Re-registering an existing name replaces fn/arg.
 * Returns 0, -EINVAL, -EEXIST (type conflict), -ENOSPC (full) or -ENOMEM. */
int kv_metrics_gauge_fn(kv_metrics *m, const char *name, const char *help, double (*fn)(void *arg),
                        void *arg);
/* (addition) Like kv_metrics_gauge_fn, for the series (name, labels): lets several owners
 * (e.g. one per listener) export the same family. */
int kv_metrics_gauge_fn_labeled(kv_metrics *m, const char *name, const char *help,
                                const char *labels, double (*fn)(void *arg), void *arg);
/* Like kv_metrics_gauge_fn, for a monotonic value kept elsewhere (rendered as a counter). */
int kv_metrics_counter_fn(kv_metrics *m, const char *name, const char *help,
                          double (*fn)(void *arg), void *arg);
/* Detaches every callback gauge or counter registered with arg (they are no longer rendered). Must
 * be called before arg is freed. */
void kv_metrics_gauge_fn_remove(kv_metrics *m, void *arg);

/* Look up or create a histogram with the upper bounds bounds[0..n_bounds) (copied). An
 * existing series keeps its bounds; a new series of an existing family must use the family's
 * bounds. Returns NULL on a full registry (counted), a type or bounds conflict, invalid bounds
 * (n_bounds 0 or > KV_METRICS_MAX_BUCKETS, not strictly increasing, not finite) or OOM. */
kv_metric *kv_metrics_histogram(kv_metrics *m, const char *name, const char *help,
                                const char *labels, const double *bounds, size_t n_bounds);
/* Fills out[0..n) with start, start*factor, ... (Prometheus ExponentialBuckets). */
void kv_metrics_exp_buckets(double *out, double start, double factor, size_t n);
/* Records one observation (no-op for NULL or a non-histogram). Thread-safe (see above). */
void kv_metric_observe(kv_metric *h, double v);
/* Histogram totals (0 for NULL or a non-histogram). */
uint64_t kv_metric_hist_count(const kv_metric *h);
double kv_metric_hist_sum(const kv_metric *h);

/* Counter updates (no-op for NULL or a non-counter). */
void kv_metric_inc(kv_metric *c);
void kv_metric_add(kv_metric *c, int64_t n);
/* Gauge updates (no-op for NULL or a non-gauge). */
void kv_metric_set(kv_metric *g, double v);
void kv_metric_gauge_add(kv_metric *g, double delta);
/* Current value (counter as double); 0 for NULL. */
double kv_metric_value(const kv_metric *x);

/* Number of series creations refused because the registry was full. */
uint64_t kv_metrics_refused(const kv_metrics *m);
/* Number of live series. */
size_t kv_metrics_size(const kv_metrics *m);

/* Renders the Prometheus text exposition format (version 0.0.4): families sorted by name,
 * HELP and TYPE once per family, series in creation order. *out is NUL-terminated, owned by
 * the caller (free()). Returns 0 or -ENOMEM. */
int kv_metrics_render(kv_metrics *m, char **out, size_t *len);

#endif
