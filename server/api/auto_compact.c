/*
 * auto_compact: periodic and revision auto-compaction (contract in auto_compact.h).
 */
#include "api/auto_compact.h"

#include "apply/internal_req.h"
#include "common/go_duration.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_AC_MAX_SAMPLES 16 /* P / (P/10) + 1 = 11 in practice */
#define KV_AC_HOUR_MS 3600000ull

struct kv_auto_compact {
    kv_api *s;
    uv_timer_t timer;
    int periodic;
    uint64_t period_ms; /* periodic: retention */
    int64_t keep_revs;  /* revision: retention */
    uint64_t tick_ms;
    /* periodic */
    int64_t revs[KV_AC_MAX_SAMPLES];
    size_t n_revs, max_revs;
    uint64_t last_success, base_interval;
    /* in flight */
    kv_node_req *inflight;
    int64_t inflight_rev;
    int64_t last_rev; /* revision mode: last compacted */
    kv_metric *m_ok, *m_err, *m_rev;
};

/* --auto-compaction-retention in periodic mode when it is not a whole number of hours: Go's
 * time.ParseDuration ("1h30m", "1.5h", "90s", "500ms"), as etcd 3.4 reads it
 * (embed/etcd.go parseCompactionRetention). Negative is refused (etcd takes it: a period
 * below 0 is meaningless); under 1 ms reads as 0 (off). Into whole milliseconds. */
static int parse_go_duration(const char *v, uint64_t *ms)
{
    int64_t ns = 0;
    if (kv_go_duration_parse(v, 0, &ns) < 0 || ns < 0)
        return -EINVAL;
    *ms = (uint64_t)(ns / KV_NS_PER_MS);
    return 0;
}

static int parse_int(const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end != '\0' || x < 0)
        return -EINVAL;
    *out = x;
    return 0;
}

static void on_compacted(void *arg, kv_result *res)
{
    kv_auto_compact *a = arg;
    a->inflight = NULL;
    /* "required revision has been compacted": already done (as etcd); a future revision
     * cannot happen (auto-compaction picks revisions it saw) and is taken as done too */
    if (res->err == KV_ERR_NONE || res->err == KV_ERR_COMPACTED || res->err == KV_ERR_FUTURE_REV) {
        if (a->m_ok)
            kv_metric_inc(a->m_ok);
        a->last_success = uv_now(a->s->loop);
        a->last_rev = a->inflight_rev;
        fprintf(stderr, "kvd: auto-compaction: finished at revision %lld\n",
                (long long)a->inflight_rev);
    } else {
        if (a->m_err)
            kv_metric_inc(a->m_err);
        fprintf(stderr, "kvd: warning: auto-compaction: failed at revision %lld: %s%s (retrying)\n",
                (long long)a->inflight_rev, kv_etcd_err_msg(res->err), res->detail);
    }
}

static void propose(kv_auto_compact *a, int64_t rev)
{
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = rev;
    uint8_t buf[32];
    size_t n = etcdserverpb__compaction_request__pack(&c, buf);
    uint8_t *req;
    size_t rlen;
    if (kv_internal_wrap(KV_IREQ_COMPACTION, 0, buf, n, &req, &rlen) < 0)
        return;
    if (a->periodic)
        fprintf(stderr, "kvd: auto-compaction: starting at revision %lld (retention: %llu ms)\n",
                (long long)rev, (unsigned long long)a->period_ms);
    else
        fprintf(stderr,
                "kvd: auto-compaction: starting at revision %lld (retention: %lld revisions)\n",
                (long long)rev, (long long)a->keep_revs);
    a->inflight_rev = rev;
    if (a->m_rev)
        kv_metric_set(a->m_rev, (double)rev);
    int rc = kv_node_propose(a->s->node, req, rlen, on_compacted, a, &a->inflight);
    if (rc < 0) {
        a->inflight = NULL;
        if (a->m_err)
            kv_metric_inc(a->m_err);
        fprintf(stderr, "kvd: warning: auto-compaction: cannot propose: %s (retrying)\n",
                strerror(-rc));
    }
}

static void on_tick(uv_timer_t *t)
{
    kv_auto_compact *a = t->data;
    if (a->inflight)
        return;
    int64_t cur = kv_node_revision(a->s->node);
    if (!a->periodic) {
        int64_t rev = cur - a->keep_revs;
        if (rev <= 0 || rev == a->last_rev)
            return;
        propose(a, rev);
        return;
    }
    /* etcd's Periodic.Run */
    if (a->n_revs == a->max_revs) {
        memmove(a->revs, a->revs + 1, (a->n_revs - 1) * sizeof(a->revs[0]));
        a->n_revs--;
    }
    a->revs[a->n_revs++] = cur;
    uint64_t now = uv_now(a->s->loop);
    if (now - a->last_success < a->base_interval)
        return;
    if (a->base_interval == a->period_ms)
        a->base_interval = a->period_ms > KV_AC_HOUR_MS ? KV_AC_HOUR_MS : a->period_ms;
    propose(a, a->revs[0]);
}

int kv_auto_compact_start(kv_auto_compact **out, kv_api *s, char *err, size_t errlen)
{
    const kv_api_config *cfg = s->cfg;
    *out = NULL;
    int periodic;
    if (strcmp(cfg->auto_compaction_mode, "periodic") == 0 || cfg->auto_compaction_mode[0] == 0)
        periodic = 1;
    else if (strcmp(cfg->auto_compaction_mode, "revision") == 0)
        periodic = 0;
    else {
        snprintf(err, errlen, "unknown auto-compaction-mode \"%s\"", cfg->auto_compaction_mode);
        return -EINVAL;
    }
    const char *r = cfg->auto_compaction_retention;
    int64_t n = 0;
    uint64_t ms = 0;
    int rc;
    if (periodic) {
        /* etcd 3.4: a whole number (strconv.Atoi, not negative) is hours; anything else must
         * be a Go duration ("1.5" and "-1" are refused, "0" is off) */
        rc = parse_int(r, &n);
        if (rc == 0 && (uint64_t)n > UINT64_MAX / KV_AC_HOUR_MS)
            rc = -ERANGE; /* past any period a uint64 of milliseconds holds (it wrapped) */
        else if (rc == 0)
            ms = (uint64_t)n * KV_AC_HOUR_MS;
        else
            rc = parse_go_duration(r, &ms);
    } else {
        rc = parse_int(r, &n);
    }
    if (rc < 0) {
        snprintf(err, errlen, "invalid --auto-compaction-retention \"%s\" for mode %s", r,
                 periodic ? "periodic" : "revision");
        return -EINVAL;
    }
    if ((periodic && ms == 0) || (!periodic && n == 0))
        return 0; /* off */
    kv_auto_compact *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    a->s = s;
    a->periodic = periodic;
    a->period_ms = ms;
    a->keep_revs = n;
    if (periodic) {
        uint64_t itv = ms > KV_AC_HOUR_MS ? KV_AC_HOUR_MS : ms;
        a->tick_ms = itv / 10 ? itv / 10 : 1;
        a->max_revs = (size_t)(ms / a->tick_ms) + 1;
        if (a->max_revs > KV_AC_MAX_SAMPLES)
            a->max_revs = KV_AC_MAX_SAMPLES; /* period > 1h: keep the last samples only */
        a->base_interval = ms;
        a->last_success = uv_now(s->loop);
    } else {
        a->tick_ms = cfg->auto_compaction_interval_ms ? cfg->auto_compaction_interval_ms : 300000;
    }
    if (s->metrics) {
        a->m_ok = kv_metrics_counter(s->metrics, "kvd_auto_compactions_total",
                                     "Auto-compactions proposed, by result", "result=\"ok\"");
        a->m_err = kv_metrics_counter(s->metrics, "kvd_auto_compactions_total",
                                      "Auto-compactions proposed, by result", "result=\"error\"");
        a->m_rev = kv_metrics_gauge(s->metrics, "kvd_auto_compaction_revision",
                                    "Revision of the last auto-compaction proposed", NULL);
    }
    rc = uv_timer_init(s->loop, &a->timer);
    if (rc < 0) {
        free(a);
        return rc;
    }
    a->timer.data = a;
    uv_timer_start(&a->timer, on_tick, a->tick_ms, a->tick_ms);
    fprintf(stderr, "kvd: auto-compaction: mode %s, retention %s, check every %llu ms\n",
            periodic ? "periodic" : "revision", r, (unsigned long long)a->tick_ms);
    *out = a;
    return 0;
}

static void free_cb(uv_handle_t *h)
{
    free(h->data);
}

void kv_auto_compact_stop(kv_auto_compact *a)
{
    if (a == NULL)
        return;
    if (a->inflight)
        kv_node_req_detach(a->inflight);
    a->inflight = NULL;
    uv_timer_stop(&a->timer);
    uv_close((uv_handle_t *)&a->timer, free_cb);
}
