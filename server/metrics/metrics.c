/* metrics.c - bounded Prometheus registry; see metrics.h for the contract. */
#include "metrics/metrics.h"
#include "common/fnv.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_COUNTER, K_GAUGE, K_GAUGE_FN, K_COUNTER_FN, K_HISTOGRAM };

/* Histogram state: per-bucket (non-cumulative) counts, the last one for +Inf; the sum is a
 * double kept as its bits so that kv_metric_observe can update it from any thread. */
struct hist {
    size_t n_bounds;
    double bounds[KV_METRICS_MAX_BUCKETS];
    _Atomic uint64_t counts[KV_METRICS_MAX_BUCKETS + 1];
    _Atomic uint64_t sum_bits;
};

struct kv_metric {
    enum kind kind;
    char *name;
    char *labels; /* "" when none */
    char *help;
    size_t order; /* creation index, for stable rendering */
    int64_t ival;
    double dval;
    double (*fn)(void *);
    void *arg;
    struct hist *hist; /* K_HISTOGRAM only */
};

struct kv_metrics {
    size_t max_series;
    size_t n;
    kv_metric **series; /* creation order, max_series slots */
    uint32_t *index;    /* open addressing: series position + 1, 0 = empty */
    size_t index_mask;
    uint64_t refused;
};

static uint64_t hash_key(const char *name, const char *labels)
{
    uint64_t h = kv_fnv1a64(name, strlen(name));
    h = kv_fnv1a64_add(h, "{", 1);
    return kv_fnv1a64_add(h, labels, strlen(labels));
}

static int valid_name(const char *s)
{
    if (!s || !*s)
        return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                 (p != s && c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

int kv_metrics_new(kv_metrics **out, size_t max_series)
{
    if (!out)
        return -EINVAL;
    if (max_series == 0)
        max_series = KV_METRICS_DEFAULT_MAX_SERIES;
    if (max_series > (1u << 24))
        return -EINVAL;
    kv_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    size_t cap = 16;
    while (cap < max_series * 2)
        cap <<= 1;
    m->max_series = max_series;
    m->series = calloc(max_series, sizeof(*m->series));
    m->index = calloc(cap, sizeof(*m->index));
    if (!m->series || !m->index) {
        free(m->series);
        free(m->index);
        free(m);
        return -ENOMEM;
    }
    m->index_mask = cap - 1;
    *out = m;
    return 0;
}

void kv_metrics_free(kv_metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->series[i]->name);
        free(m->series[i]->labels);
        free(m->series[i]->help);
        free(m->series[i]->hist);
        free(m->series[i]);
    }
    free(m->series);
    free(m->index);
    free(m);
}

/* Returns the index slot for (name, labels): either holding it or empty. */
static uint32_t *find_slot(kv_metrics *m, const char *name, const char *labels)
{
    size_t i = hash_key(name, labels) & m->index_mask;
    for (;;) {
        uint32_t *slot = &m->index[i];
        if (*slot == 0)
            return slot;
        kv_metric *x = m->series[*slot - 1];
        if (strcmp(x->name, name) == 0 && strcmp(x->labels, labels) == 0)
            return slot;
        i = (i + 1) & m->index_mask;
    }
}

/* Rebuilds the index (after the last series was removed: open addressing has no tombstones). */
static void rehash_after_delete(kv_metrics *m)
{
    memset(m->index, 0, (m->index_mask + 1) * sizeof(*m->index));
    for (size_t i = 0; i < m->n; i++)
        *find_slot(m, m->series[i]->name, m->series[i]->labels) = (uint32_t)(i + 1);
}

static int family_kind_conflict(kv_metrics *m, const char *name, enum kind kind)
{
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->series[i]->name, name) == 0)
            return m->series[i]->kind != kind;
    }
    return 0;
}

static kv_metric *get_or_create(kv_metrics *m, enum kind kind, const char *name, const char *help,
                                const char *labels, int *err)
{
    *err = -EINVAL;
    if (!m || !valid_name(name))
        return NULL;
    if (!labels)
        labels = "";
    if (strchr(labels, '\n'))
        return NULL;
    uint32_t *slot = find_slot(m, name, labels);
    if (*slot) {
        kv_metric *x = m->series[*slot - 1];
        if (x->kind != kind) {
            *err = -EEXIST;
            return NULL;
        }
        *err = 0;
        return x;
    }
    if (family_kind_conflict(m, name, kind)) {
        *err = -EEXIST;
        return NULL;
    }
    if (m->n >= m->max_series) {
        m->refused++;
        *err = -ENOSPC;
        return NULL;
    }
    kv_metric *x = calloc(1, sizeof(*x));
    *err = -ENOMEM;
    if (!x)
        return NULL;
    x->kind = kind;
    x->name = strdup(name);
    x->labels = strdup(labels);
    x->help = strdup(help ? help : "");
    if (!x->name || !x->labels || !x->help) {
        free(x->name);
        free(x->labels);
        free(x->help);
        free(x);
        return NULL;
    }
    x->order = m->n;
    m->series[m->n++] = x;
    *slot = (uint32_t)m->n;
    *err = 0;
    return x;
}

kv_metric *kv_metrics_counter(kv_metrics *m, const char *name, const char *help, const char *labels)
{
    int err;
    return get_or_create(m, K_COUNTER, name, help, labels, &err);
}

kv_metric *kv_metrics_gauge(kv_metrics *m, const char *name, const char *help, const char *labels)
{
    int err;
    return get_or_create(m, K_GAUGE, name, help, labels, &err);
}

int kv_metrics_gauge_fn(kv_metrics *m, const char *name, const char *help, double (*fn)(void *arg),
                        void *arg)
{
    return kv_metrics_gauge_fn_labeled(m, name, help, NULL, fn, arg);
}

int kv_metrics_gauge_fn_labeled(kv_metrics *m, const char *name, const char *help,
                                const char *labels, double (*fn)(void *arg), void *arg)
{
    int err;
    if (!fn)
        return -EINVAL;
    kv_metric *x = get_or_create(m, K_GAUGE_FN, name, help, labels, &err);
    if (!x)
        return err;
    x->fn = fn;
    x->arg = arg;
    return 0;
}

int kv_metrics_counter_fn(kv_metrics *m, const char *name, const char *help,
                          double (*fn)(void *arg), void *arg)
{
    int err;
    if (!fn)
        return -EINVAL;
    kv_metric *x = get_or_create(m, K_COUNTER_FN, name, help, NULL, &err);
    if (!x)
        return err;
    x->fn = fn;
    x->arg = arg;
    return 0;
}

static int valid_bounds(const double *bounds, size_t n)
{
    if (!bounds || n == 0 || n > KV_METRICS_MAX_BUCKETS)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
            return 0;
    }
    return 1;
}

/* The bounds of the family `name`, or NULL when it has no histogram series yet. */
static const struct hist *family_hist(kv_metrics *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++) {
        if (m->series[i]->hist && strcmp(m->series[i]->name, name) == 0)
            return m->series[i]->hist;
    }
    return NULL;
}

kv_metric *kv_metrics_histogram(kv_metrics *m, const char *name, const char *help,
                                const char *labels, const double *bounds, size_t n_bounds)
{
    int err;
    if (!m || !valid_bounds(bounds, n_bounds))
        return NULL;
    const struct hist *fam = family_hist(m, name ? name : "");
    size_t before = m->n;
    kv_metric *x = get_or_create(m, K_HISTOGRAM, name, help, labels, &err);
    if (!x || m->n == before)
        return x; /* refused, or an existing series (keeps its bounds) */
    if (fam &&
        (fam->n_bounds != n_bounds || memcmp(fam->bounds, bounds, n_bounds * sizeof(*bounds)) != 0))
        goto undo;
    x->hist = calloc(1, sizeof(*x->hist));
    if (!x->hist)
        goto undo;
    x->hist->n_bounds = n_bounds;
    memcpy(x->hist->bounds, bounds, n_bounds * sizeof(*bounds));
    return x;
undo:
    /* the series was the last one created: take it back out of the index */
    *find_slot(m, x->name, x->labels) = 0;
    m->n--;
    rehash_after_delete(m);
    free(x->name);
    free(x->labels);
    free(x->help);
    free(x);
    return NULL;
}

void kv_metrics_exp_buckets(double *out, double start, double factor, size_t n)
{
    double v = start;
    for (size_t i = 0; i < n; i++) {
        out[i] = v;
        v *= factor;
    }
}

void kv_metric_observe(kv_metric *h, double v)
{
    if (!h || h->kind != K_HISTOGRAM || !h->hist || isnan(v))
        return;
    struct hist *x = h->hist;
    size_t i = 0;
    while (i < x->n_bounds && v > x->bounds[i])
        i++;
    atomic_fetch_add_explicit(&x->counts[i], 1, memory_order_relaxed);
    uint64_t old = atomic_load_explicit(&x->sum_bits, memory_order_relaxed), nw;
    do {
        double d;
        memcpy(&d, &old, sizeof(d));
        d += v;
        memcpy(&nw, &d, sizeof(nw));
    } while (!atomic_compare_exchange_weak_explicit(&x->sum_bits, &old, nw, memory_order_relaxed,
                                                    memory_order_relaxed));
}

uint64_t kv_metric_hist_count(const kv_metric *h)
{
    if (!h || h->kind != K_HISTOGRAM || !h->hist)
        return 0;
    uint64_t n = 0;
    for (size_t i = 0; i <= h->hist->n_bounds; i++)
        n += atomic_load_explicit(&h->hist->counts[i], memory_order_relaxed);
    return n;
}

double kv_metric_hist_sum(const kv_metric *h)
{
    if (!h || h->kind != K_HISTOGRAM || !h->hist)
        return 0;
    uint64_t bits = atomic_load_explicit(&h->hist->sum_bits, memory_order_relaxed);
    double d;
    memcpy(&d, &bits, sizeof(d));
    return d;
}

void kv_metrics_gauge_fn_remove(kv_metrics *m, void *arg)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        kv_metric *x = m->series[i];
        if ((x->kind == K_GAUGE_FN || x->kind == K_COUNTER_FN) && x->arg == arg) {
            x->fn = NULL;
            x->arg = NULL;
        }
    }
}

void kv_metric_inc(kv_metric *c)
{
    kv_metric_add(c, 1);
}

void kv_metric_add(kv_metric *c, int64_t n)
{
    if (c && c->kind == K_COUNTER)
        c->ival += n;
}

void kv_metric_set(kv_metric *g, double v)
{
    if (g && g->kind == K_GAUGE)
        g->dval = v;
}

void kv_metric_gauge_add(kv_metric *g, double delta)
{
    if (g && g->kind == K_GAUGE)
        g->dval += delta;
}

double kv_metric_value(const kv_metric *x)
{
    if (!x)
        return 0;
    switch (x->kind) {
    case K_COUNTER:
        return (double)x->ival;
    case K_GAUGE:
        return x->dval;
    case K_GAUGE_FN:
    case K_COUNTER_FN:
        return x->fn ? x->fn(x->arg) : 0;
    case K_HISTOGRAM:
        return (double)kv_metric_hist_count(x);
    }
    return 0;
}

uint64_t kv_metrics_refused(const kv_metrics *m)
{
    return m ? m->refused : 0;
}

size_t kv_metrics_size(const kv_metrics *m)
{
    return m ? m->n : 0;
}

/* ---- rendering ---- */

struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
};

static void sb_reserve(struct sbuf *b, size_t extra)
{
    if (b->oom || b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) {
        b->oom = 1;
        return;
    }
    b->p = np;
    b->cap = cap;
}

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_help(struct sbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            sb_puts(b, "\\\\");
        else if (*s == '\n')
            sb_puts(b, "\\n");
        else
            sb_put(b, s, 1);
    }
}

static void sb_double(struct sbuf *b, double v)
{
    char tmp[64];
    if (isnan(v))
        sb_puts(b, "NaN");
    else if (isinf(v))
        sb_puts(b, v > 0 ? "+Inf" : "-Inf");
    else {
        /* integers as integers; otherwise the shortest text that reads back as v, so bucket
         * bounds read like etcd's (le="0.001", not 0.0010000000000000000208) */
        if (v == floor(v) && fabs(v) < 1e15)
            snprintf(tmp, sizeof(tmp), "%.0f", v);
        else
            for (int prec = 1; prec <= 17; prec++) {
                snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
                if (strtod(tmp, NULL) == v)
                    break;
            }
        sb_puts(b, tmp);
    }
}

static void sb_series_head(struct sbuf *b, const kv_metric *x, const char *suffix)
{
    sb_puts(b, x->name);
    sb_puts(b, suffix);
    if (x->labels[0]) {
        sb_puts(b, "{");
        sb_puts(b, x->labels);
        sb_puts(b, "}");
    }
    sb_puts(b, " ");
}

static void render_hist(struct sbuf *b, const kv_metric *x)
{
    const struct hist *h = x->hist;
    char tmp[32];
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->n_bounds; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        sb_puts(b, x->name);
        sb_puts(b, "_bucket{");
        if (x->labels[0]) {
            sb_puts(b, x->labels);
            sb_puts(b, ",");
        }
        sb_puts(b, "le=\"");
        if (i < h->n_bounds)
            sb_double(b, h->bounds[i]);
        else
            sb_puts(b, "+Inf");
        snprintf(tmp, sizeof(tmp), "\"} %llu\n", (unsigned long long)cum);
        sb_puts(b, tmp);
    }
    sb_series_head(b, x, "_sum");
    sb_double(b, kv_metric_hist_sum(x));
    sb_puts(b, "\n");
    sb_series_head(b, x, "_count");
    snprintf(tmp, sizeof(tmp), "%llu\n", (unsigned long long)cum);
    sb_puts(b, tmp);
}

static int cmp_series(const void *a, const void *b)
{
    const kv_metric *x = *(kv_metric *const *)a, *y = *(kv_metric *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

int kv_metrics_render(kv_metrics *m, char **out, size_t *len)
{
    if (!m || !out)
        return -EINVAL;
    struct sbuf b = {0};
    kv_metric **sorted = NULL;
    if (m->n) {
        sorted = malloc(m->n * sizeof(*sorted));
        if (!sorted)
            return -ENOMEM;
        memcpy(sorted, m->series, m->n * sizeof(*sorted));
        qsort(sorted, m->n, sizeof(*sorted), cmp_series);
    }
    const char *family = NULL;
    for (size_t i = 0; i < m->n; i++) {
        kv_metric *x = sorted[i];
        if ((x->kind == K_GAUGE_FN || x->kind == K_COUNTER_FN) && !x->fn)
            continue;
        if (!family || strcmp(family, x->name) != 0) {
            family = x->name;
            sb_puts(&b, "# HELP ");
            sb_puts(&b, x->name);
            sb_puts(&b, " ");
            sb_help(&b, x->help);
            sb_puts(&b, "\n# TYPE ");
            sb_puts(&b, x->name);
            sb_puts(&b, x->kind == K_HISTOGRAM                            ? " histogram\n"
                        : x->kind == K_COUNTER || x->kind == K_COUNTER_FN ? " counter\n"
                                                                          : " gauge\n");
        }
        if (x->kind == K_HISTOGRAM) {
            render_hist(&b, x);
            continue;
        }
        sb_puts(&b, x->name);
        if (x->labels[0]) {
            sb_puts(&b, "{");
            sb_puts(&b, x->labels);
            sb_puts(&b, "}");
        }
        sb_puts(&b, " ");
        if (x->kind == K_COUNTER) {
            char tmp[32];
            snprintf(tmp, sizeof(tmp), "%lld", (long long)x->ival);
            sb_puts(&b, tmp);
        } else {
            sb_double(&b, kv_metric_value(x));
        }
        sb_puts(&b, "\n");
    }
    char tmp[32];
    sb_puts(&b, "# HELP kvd_metrics_series_refused_total Metric series refused because the "
                "registry was full.\n# TYPE kvd_metrics_series_refused_total counter\n"
                "kvd_metrics_series_refused_total ");
    snprintf(tmp, sizeof(tmp), "%llu\n", (unsigned long long)m->refused);
    sb_puts(&b, tmp);
    free(sorted);
    if (b.oom) {
        free(b.p);
        return -ENOMEM;
    }
    *out = b.p;
    if (len)
        *len = b.len;
    return 0;
}
