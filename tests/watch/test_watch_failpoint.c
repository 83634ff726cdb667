/*
 * The watch failpoint (server/watch/watch_failpoint.c): off by default; with
 * fp_drop_event_at = N the Nth event the hub sends is dropped once and the watcher goes on.
 * Same fixture as test_watch_hub.c: a real store in a temporary directory, a fake sink.
 */
#include <criterion/criterion.h>

#include "kvt_store.h"
#include "watch/watch_hub.h"
#include "watch/watch_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct fsink {
    Etcdserverpb__WatchResponse *msg[256];
    size_t n;
} fsink;

static int f_send(void *arg, const uint8_t *m, size_t len)
{
    fsink *f = arg;
    cr_assert(f->n < 256);
    f->msg[f->n] = etcdserverpb__watch_response__unpack(NULL, len, m);
    cr_assert_not_null(f->msg[f->n]);
    f->n++;
    return 0;
}

static size_t f_queued(void *arg)
{
    (void)arg;
    return 0;
}

static const kv_watch_sink_ops fops = {f_send, f_queued, NULL};

typedef struct fx {
    kvt_store t;
    uv_loop_t loop;
    kv_header_info hdr;
    kv_watch_hub *h;
    fsink sink;
    kv_watch_stream *st;
} fx;

static void fx_open(fx *f, const kv_watch_config *cfg)
{
    memset(f, 0, sizeof(*f));
    kvt_store_open(&f->t, NULL);
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    f->hdr = (kv_header_info){.cluster_id = 7, .member_id = 9, .raft_term = 3};
    cr_assert_eq(
        kv_watch_hub_init(&f->h, &f->loop, f->t.s, cfg, &f->hdr, kvt_store_rev(&f->t), NULL), 0);
    cr_assert_eq(kv_watch_stream_open(f->h, 1, &fops, &f->sink, &f->st), 0);
}

static void fx_close(fx *f)
{
    for (size_t i = 0; i < f->sink.n; i++)
        etcdserverpb__watch_response__free_unpacked(f->sink.msg[i], NULL);
    kv_watch_stream_close(f->st);
    kv_watch_hub_close(f->h);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_loop_close(&f->loop);
    kvt_store_close(&f->t);
}

static void put(fx *f, const char *k, const char *v)
{
    kvt_store_put(&f->t, k, v, 0);
    kv_watch_hub_notify(f->h, kvt_store_rev(&f->t));
}

static void watch_prefix_a(fx *f)
{
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    c.key = kvt_bin("a");
    c.range_end = kvt_bin("b");
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &c;
    uint8_t buf[256];
    size_t len = etcdserverpb__watch_request__pack(&r, buf);
    cr_assert_eq(kv_watch_stream_request(f->st, buf, len), 0);
}

/* The values of every event received, concatenated ("12456"). */
static void values(fx *f, char *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < f->sink.n; i++)
        for (size_t j = 0; j < f->sink.msg[i]->n_events && n + 1 < cap; j++)
            out[n++] = (char)f->sink.msg[i]->events[j]->kv->value.data[0];
    out[n] = '\0';
}

static void run(uint64_t drop_at, char *out, size_t cap)
{
    kv_watch_config cfg;
    kv_watch_config_default(&cfg);
    cfg.fp_drop_event_at = drop_at;
    fx f;
    fx_open(&f, &cfg);
    watch_prefix_a(&f);
    const char *v[] = {"1", "2", "3", "4", "5", "6"};
    for (int i = 0; i < 6; i++)
        put(&f, "a1", v[i]);
    values(&f, out, cap);
    fx_close(&f);
}

Test(watch_failpoint, off_by_default_every_event_is_sent)
{
    kv_watch_config cfg;
    kv_watch_config_default(&cfg);
    cr_assert_eq(cfg.fp_drop_event_at, 0);
    char got[16];
    run(0, got, sizeof(got));
    cr_assert_str_eq(got, "123456");
}

Test(watch_failpoint, drops_the_nth_event_once)
{
    char got[16];
    run(3, got, sizeof(got));
    cr_assert_str_eq(got, "12456");
}

Test(watch_failpoint, env_parsing)
{
    unsetenv("KVD_FAILPOINT_WATCH_DROP_EVENT");
    cr_assert_eq(kv_watch_fp_env(), 0);
    setenv("KVD_FAILPOINT_WATCH_DROP_EVENT", "300", 1);
    cr_assert_eq(kv_watch_fp_env(), 300);
    setenv("KVD_FAILPOINT_WATCH_DROP_EVENT", "3x", 1);
    cr_assert_eq(kv_watch_fp_env(), 0);
    unsetenv("KVD_FAILPOINT_WATCH_DROP_EVENT");
}
