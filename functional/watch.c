/*
 * watch: the watch stresser of a case (fn.h) and its checker hook.
 *
 * Watchers watch the case's register keys (<prefix>/reg/) through libkvclient, each on its
 * own member (one single-endpoint client per member, shared by the watchers on it), from a
 * known start revision (the revision before the KV stressers started, + 1). Every event is
 * logged (receive time, member, revision, key, type, value) with the watchers' lifecycle:
 * START (created on a member from a revision), COMPACTED, CANCELED. A monitor thread moves a
 * watcher whose member went quiet for WATCH_SILENT_US (killed, stopped, cut off) or whose
 * watch was canceled to the next member, from its last event's revision + 1 (what etcd
 * clients do when their endpoint dies). At stop a fence put on a register of its own gives
 * the final revision; each watcher must deliver its event (W4), which proves it delivered
 * everything before it. Then the checker (check_watch.c) runs. Under --proxies every
 * "member" above is a gRPC proxy (kv_fn_client_endpoints): one client per proxy, and a
 * watcher moves to the next proxy.
 *
 * Threads: watch callbacks run on the clients' I/O threads and append to the watcher's log
 * under the set's mutex; the monitor thread and the caller's thread do the rest.
 */
#include "fn.h"

#include "kvclient.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WATCH_SILENT_US 2500000 /* no response for this long: move to another member */
#define WATCH_CREATE_MS 2000
#define WATCH_MAX_LOG 2000000 /* records; beyond it the log is cut (verdict unknown) */

typedef struct watcher {
    struct kv_fn_watchers *set;
    int id;
    int member;       /* current member, -1: none */
    kvc_watch *w;     /* NULL between members */
    int64_t next_rev; /* where a restart resumes */
    int64_t last_resp_us;
    int need_move;
} watcher;

struct kv_fn_watchers {
    const kv_fn_cluster *c;
    char prefix[160];
    size_t prefix_len;
    int n_members, n;
    kvc_client *kc[KV_FN_MAX_MEMBERS];
    watcher ws[KV_FN_MAX_WATCHERS];
    pthread_mutex_t mu;
    kv_fn_watch_ev *log;
    size_t n_log, cap_log;
    int truncated;
    atomic_int stop;
    int monitor_started;
    pthread_t monitor;
    int64_t start_rev;
};

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Appends a record; caller holds set->mu. */
static void log_add(kv_fn_watchers *s, const kv_fn_watch_ev *e)
{
    if (s->n_log == s->cap_log) {
        size_t nc = s->cap_log ? s->cap_log * 2 : 1024;
        kv_fn_watch_ev *na = nc <= WATCH_MAX_LOG ? realloc(s->log, nc * sizeof(*na)) : NULL;
        if (!na) {
            s->truncated = 1;
            return;
        }
        s->log = na;
        s->cap_log = nc;
    }
    s->log[s->n_log++] = *e;
}

static void on_watch(void *arg, const kvc_watch_response *r)
{
    watcher *k = arg;
    kv_fn_watchers *s = k->set;
    int64_t now = kv_fn_now_us();
    pthread_mutex_lock(&s->mu);
    k->last_resp_us = now;
    for (size_t i = 0; i < r->n_events; i++) {
        const kvc_event *ev = &r->events[i];
        kv_fn_watch_ev e = {.watcher = k->id,
                            .type = ev->type == KVC_EVENT_DELETE ? KV_FN_WEV_DELETE : KV_FN_WEV_PUT,
                            .key = -1,
                            .member = k->member,
                            .rev = ev->kv.mod_revision,
                            .at_us = now};
        const char *key = (const char *)ev->kv.key;
        if (ev->kv.key_len > s->prefix_len && memcmp(key, s->prefix, s->prefix_len) == 0) {
            char num[16];
            size_t l = ev->kv.key_len - s->prefix_len;
            if (l < sizeof(num)) {
                memcpy(num, key + s->prefix_len, l);
                num[l] = '\0';
                e.key = atoi(num);
            }
        }
        if (e.type == KV_FN_WEV_PUT) {
            size_t l =
                ev->kv.value_len < sizeof(e.value) - 1 ? ev->kv.value_len : sizeof(e.value) - 1;
            memcpy(e.value, ev->kv.value, l);
            e.value[l] = '\0';
        }
        log_add(s, &e);
        if (e.rev >= k->next_rev)
            k->next_rev = e.rev + 1;
    }
    if (r->canceled) {
        kv_fn_watch_ev e = {.watcher = k->id,
                            .type = r->compact_revision ? KV_FN_WEV_COMPACTED : KV_FN_WEV_CANCELED,
                            .key = -1,
                            .member = k->member,
                            .rev = r->compact_revision,
                            .at_us = now};
        snprintf(e.value, sizeof(e.value), "%s", r->cancel_reason ? r->cancel_reason : "");
        for (char *p = e.value; *p; p++)
            if (*p == ' ' || *p == '\n')
                *p = '_';
        log_add(s, &e);
        if (r->compact_revision > k->next_rev)
            k->next_rev = r->compact_revision;
        k->need_move = 1;
    }
    pthread_mutex_unlock(&s->mu);
}

/* (Re)creates watcher k on member m from k->next_rev. Caller: not holding mu. */
static int watcher_place(kv_fn_watchers *s, watcher *k, int m)
{
    pthread_mutex_lock(&s->mu);
    kv_fn_watch_ev e = {.watcher = k->id,
                        .type = KV_FN_WEV_START,
                        .key = -1,
                        .member = m,
                        .rev = k->next_rev,
                        .at_us = kv_fn_now_us()};
    log_add(s, &e);
    k->member = m;
    k->need_move = 0;
    k->last_resp_us = e.at_us;
    pthread_mutex_unlock(&s->mu);
    kvc_watch_opts o = {.prefix = 1, .start_revision = e.rev};
    kvc_watch *w = NULL;
    kvc_error err = {0};
    int r = kvc_watch_create(s->kc[m], s->prefix, s->prefix_len, &o, WATCH_CREATE_MS, on_watch, k,
                             &w, NULL, &err);
    pthread_mutex_lock(&s->mu);
    if (r == 0) {
        k->w = w;
    } else {
        kv_fn_watch_ev c = {.watcher = k->id,
                            .type = KV_FN_WEV_CANCELED,
                            .key = -1,
                            .member = m,
                            .at_us = kv_fn_now_us()};
        snprintf(c.value, sizeof(c.value), "create_failed:%d", r);
        log_add(s, &c);
        k->need_move = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* Moves watcher k to the next member (cancel first: no two watches of k overlap). */
static void watcher_move(kv_fn_watchers *s, watcher *k)
{
    kvc_watch *old;
    pthread_mutex_lock(&s->mu);
    old = k->w;
    k->w = NULL;
    int next = (k->member + 1) % s->n_members;
    pthread_mutex_unlock(&s->mu);
    kvc_watch_cancel(old); /* after it returns the callback does not run again */
    watcher_place(s, k, next);
}

static void *monitor_main(void *arg)
{
    kv_fn_watchers *s = arg;
    while (!atomic_load(&s->stop)) {
        for (int i = 0; i < s->n && !atomic_load(&s->stop); i++) {
            watcher *k = &s->ws[i];
            pthread_mutex_lock(&s->mu);
            int move = k->need_move || kv_fn_now_us() - k->last_resp_us > WATCH_SILENT_US;
            pthread_mutex_unlock(&s->mu);
            if (move) /* with one member: re-created on it */
                watcher_move(s, k);
        }
        sleep_ms(100);
    }
    return NULL;
}

int kv_fn_watchers_start(kv_fn_watchers **out, const kv_fn_cluster *c, const char *prefix, int n,
                         uint64_t seed)
{
    if (n < 1 || n > KV_FN_MAX_WATCHERS)
        return -EINVAL;
    kv_fn_watchers *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    s->c = c;
    s->n = n;
    const char *eps[KV_FN_MAX_MEMBERS];
    s->n_members = kv_fn_client_endpoints(c, 0, eps); /* --proxies: "member" is a proxy */
    int r = 0;
    int len = snprintf(s->prefix, sizeof(s->prefix), "%s", prefix);
    if (len <= 0 || (size_t)len >= sizeof(s->prefix)) {
        r = -EINVAL;
        goto fail;
    }
    s->prefix_len = (size_t)len;
    for (int m = 0; m < s->n_members; m++) {
        const char *ep = eps[m];
        kvc_config kcfg;
        kvc_config_default(&kcfg);
        kcfg.endpoints = &ep;
        kcfg.n_endpoints = 1;
        kcfg.dial_timeout_ms = WATCH_CREATE_MS;
        kcfg.seed = seed + (uint64_t)m * 31 + 7;
        if ((r = kvc_open(&s->kc[m], &kcfg, NULL)) != 0)
            goto fail;
    }
    /* The start revision: the store's revision now (before the KV stressers start). */
    r = -EIO;
    for (int m = 0; m < s->n_members && r; m++) {
        kvc_range_result rr = {0};
        kvc_range_opts ro = {.prefix = 1, .count_only = 1};
        r = kvc_get(s->kc[m], s->prefix, s->prefix_len, &ro, WATCH_CREATE_MS, &rr, NULL);
        if (r == 0)
            s->start_rev = rr.header.revision + 1;
        kvc_range_result_free(&rr);
    }
    if (r)
        goto fail;
    for (int i = 0; i < n; i++) {
        watcher *k = &s->ws[i];
        k->set = s;
        k->id = i;
        k->member = -1;
        k->next_rev = s->start_rev;
    }
    for (int i = 0; i < n; i++) /* watcher i on member i (mod n); a failure moves it later */
        watcher_place(s, &s->ws[i], i % s->n_members);
    if (pthread_create(&s->monitor, NULL, monitor_main, s) != 0) {
        r = -EAGAIN;
        goto fail;
    }
    s->monitor_started = 1;
    *out = s;
    return 0;
fail:
    kv_fn_watchers_free(s);
    return r;
}

/* Puts the fence (register `fence_key`) and returns its revision, or 0. */
static int64_t put_fence(kv_fn_watchers *s, int fence_key, kv_fn_op *op)
{
    char kb[200];
    int kl = snprintf(kb, sizeof(kb), "%s%d", s->prefix, fence_key);
    for (int attempt = 0; attempt < 3 * s->n_members; attempt++) {
        kv_fn_op o = {.key = fence_key, .type = KV_FN_OP_PUT, .client = 900};
        snprintf(o.value, sizeof(o.value), "fence-%d", attempt);
        kvc_put_result pr = {0};
        o.call_us = kv_fn_now_us();
        int r = kvc_put(s->kc[attempt % s->n_members], kb, (size_t)kl, o.value, strlen(o.value),
                        NULL, 2000, &pr, NULL);
        o.ret_us = r == 0 ? kv_fn_now_us() : KV_FN_INF;
        o.rev = r == 0 ? pr.header.revision : 0;
        kvc_put_result_free(&pr);
        op[attempt] = o;
        if (r == 0)
            return o.rev;
    }
    return 0;
}

int kv_fn_watchers_stop(kv_fn_watchers *s, int fence_key, uint32_t timeout_ms, kv_fn_op *fence_ops,
                        size_t *n_fence_ops, int64_t *final_rev)
{
    *final_rev = put_fence(s, fence_key, fence_ops);
    *n_fence_ops = 0;
    while (*n_fence_ops < (size_t)(3 * s->n_members) && fence_ops[*n_fence_ops].call_us)
        (*n_fence_ops)++;
    /* Wait until every watcher delivered the fence (the monitor keeps moving stalled ones). */
    int64_t deadline = kv_fn_now_us() + (int64_t)timeout_ms * 1000;
    while (*final_rev > 0 && kv_fn_now_us() < deadline) {
        int all = 1;
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < s->n; i++)
            if (s->ws[i].next_rev <= *final_rev)
                all = 0;
        pthread_mutex_unlock(&s->mu);
        if (all)
            break;
        sleep_ms(50);
    }
    atomic_store(&s->stop, 1);
    if (s->monitor_started) {
        pthread_join(s->monitor, NULL);
        s->monitor_started = 0;
    }
    for (int i = 0; i < s->n; i++) {
        kvc_watch_cancel(s->ws[i].w);
        s->ws[i].w = NULL;
    }
    return s->truncated ? -ENOSPC : 0;
}

void kv_fn_watchers_log(kv_fn_watchers *s, kv_fn_watch_ev **evs, size_t *n)
{
    *evs = s->log;
    *n = s->n_log;
}

void kv_fn_watchers_free(kv_fn_watchers *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    if (s->monitor_started)
        pthread_join(s->monitor, NULL);
    for (int i = 0; i < s->n; i++)
        kvc_watch_cancel(s->ws[i].w);
    for (int m = 0; m < KV_FN_MAX_MEMBERS; m++)
        kvc_close(s->kc[m]);
    pthread_mutex_destroy(&s->mu);
    free(s->log);
    free(s);
}

/* ---- the checker hook ---- */

/* Drops one event of watcher 0 that an acknowledged put explains (--inject-bug
 * drop-watch-event). Returns 1 if one was dropped. */
static int inject_drop(kv_fn_watch_ev *evs, size_t *n, const kv_fn_op *ops, size_t n_ops)
{
    size_t cand = 0, pick = SIZE_MAX;
    for (size_t i = 0; i < *n; i++)
        if (evs[i].watcher == 0 && evs[i].type == KV_FN_WEV_PUT)
            cand++;
    size_t want = cand / 2, seen = 0;
    for (size_t i = 0; i < *n && pick == SIZE_MAX; i++) {
        if (evs[i].watcher != 0 || evs[i].type != KV_FN_WEV_PUT || seen++ < want)
            continue;
        for (size_t j = 0; j < n_ops; j++)
            if (ops[j].type == KV_FN_OP_PUT && ops[j].ret_us != KV_FN_INF &&
                ops[j].rev == evs[i].rev && ops[j].key == evs[i].key) {
                pick = i;
                break;
            }
    }
    if (pick == SIZE_MAX)
        return 0;
    memmove(&evs[pick], &evs[pick + 1], (*n - pick - 1) * sizeof(*evs));
    (*n)--;
    return 1;
}

int kv_fn_watch_file_write(const char *path, const kv_fn_op *ops, size_t n_ops,
                           const kv_fn_watch_ev *evs, size_t n_evs, int64_t final_rev)
{
    int r = kv_fn_history_write(path, ops, n_ops, NULL, 0, NULL, 0, NULL, 0);
    if (r)
        return r;
    FILE *f = fopen(path, "a");
    if (!f)
        return -errno;
    fprintf(f, "# watch records: wev watcher type(0 put,1 delete,2 start,3 compacted,4 canceled,"
               "5 progress) key member rev at_us value(- none) | wfinal final_rev\n");
    for (size_t i = 0; i < n_evs; i++)
        fprintf(f, "wev %d %d %d %d %" PRId64 " %" PRId64 " %s\n", evs[i].watcher, evs[i].type,
                evs[i].key, evs[i].member, evs[i].rev, evs[i].at_us,
                evs[i].value[0] ? evs[i].value : "-");
    fprintf(f, "wfinal %" PRId64 "\n", final_rev);
    return fclose(f) == 0 ? 0 : -EIO;
}

int kv_fn_watch_file_check(const char *path, int inject)
{
    kv_fn_op *ops = NULL;
    kv_fn_lease_info *l = NULL;
    kv_fn_lease_ev *lev = NULL;
    kv_fn_window *w = NULL;
    kv_fn_watch_ev *evs = NULL;
    size_t n_ops, n_l, n_lev, n_w, n_evs = 0, cap = 0;
    int64_t final_rev = 0;
    int r = kv_fn_history_read(path, &ops, &n_ops, &l, &n_l, &lev, &n_lev, &w, &n_w);
    if (r) {
        fprintf(stderr, "kvfunctional: cannot read %s: %s\n", path, strerror(-r));
        return 2;
    }
    FILE *f = fopen(path, "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "wfinal ", 7) == 0) {
            sscanf(line, "wfinal %" SCNd64, &final_rev);
            continue;
        }
        if (strncmp(line, "wev ", 4) != 0)
            continue;
        if (n_evs == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            kv_fn_watch_ev *na = realloc(evs, nc * sizeof(*na));
            if (!na)
                break;
            evs = na;
            cap = nc;
        }
        kv_fn_watch_ev *e = &evs[n_evs];
        memset(e, 0, sizeof(*e));
        char v[48];
        if (sscanf(line, "wev %d %d %d %d %" SCNd64 " %" SCNd64 " %47s", &e->watcher, &e->type,
                   &e->key, &e->member, &e->rev, &e->at_us, v) != 7)
            continue;
        snprintf(e->value, sizeof(e->value), "%s", strcmp(v, "-") ? v : "");
        n_evs++;
    }
    if (f)
        fclose(f);
    if (inject)
        inject_drop(evs, &n_evs, ops, n_ops);
    char rep[4096];
    kv_fn_verdict v = kv_fn_watch_check(ops, n_ops, evs, n_evs, final_rev, rep, sizeof(rep));
    printf("watch=%s: %s\n", kv_fn_verdict_name(v), rep);
    free(ops);
    free(l);
    free(lev);
    free(w);
    free(evs);
    return v == KV_FN_PASS ? 0 : 1;
}

void kv_fn_watch_finish(kv_fn_watchers *s, kv_fn_watch_sink *sink, const char *case_name,
                        const kv_fn_op *ops, size_t n_ops, int64_t final_rev, int stop_rc)
{
    if (!sink)
        return;
    kv_fn_watch_ev *evs;
    size_t n_evs;
    kv_fn_watchers_log(s, &evs, &n_evs);
    if (sink->inject_drop)
        inject_drop(evs, &n_evs, ops, n_ops);
    sink->checked = 1;
    sink->verdict =
        kv_fn_watch_check(ops, n_ops, evs, n_evs, final_rev, sink->report, sizeof(sink->report));
    if (stop_rc == -ENOSPC && sink->verdict == KV_FN_PASS) {
        sink->verdict = KV_FN_UNKNOWN;
        snprintf(sink->report, sizeof(sink->report), "watch log cut at %d records", WATCH_MAX_LOG);
    }
    if (final_rev == 0 && sink->verdict == KV_FN_PASS) {
        sink->verdict = KV_FN_UNKNOWN;
        snprintf(sink->report, sizeof(sink->report), "the fence put after the case failed");
    }
    sink->path[0] = '\0';
    if (sink->root && (sink->verdict != KV_FN_PASS || sink->keep_all)) {
        snprintf(sink->path, sizeof(sink->path), "%s/%s.watch", sink->root, case_name);
        if (kv_fn_watch_file_write(sink->path, ops, n_ops, evs, n_evs, final_rev) != 0)
            sink->path[0] = '\0';
    }
}
