/*
 * Unit tests of the watch hub (server/watch): range matching, synced/unsynced transitions,
 * the bounded per-stream send buffer, catch-up from LMDB, compaction, the per-stream protocol
 * (ids, errors, cancel, progress) and fragmentation. A real store in a temporary directory;
 * the transport is a fake sink whose "queued bytes" the test controls.
 */
#include <criterion/criterion.h>

#include "kvt_store.h"
#include "watch/watch_hub.h"
#include "watch/watch_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct fsink {
    Etcdserverpb__WatchResponse *msg[4096];
    size_t n;
    size_t queued; /* what the sink reports as unsent */
    size_t sent_bytes;
} fsink;

static int f_send(void *arg, const uint8_t *m, size_t len)
{
    fsink *f = arg;
    cr_assert(f->n < 4096);
    f->msg[f->n] = etcdserverpb__watch_response__unpack(NULL, len, m);
    cr_assert_not_null(f->msg[f->n]);
    f->n++;
    f->sent_bytes += len;
    return 0;
}

static size_t f_queued(void *arg)
{
    return ((fsink *)arg)->queued;
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

static void fx_clear(fx *f)
{
    for (size_t i = 0; i < f->sink.n; i++)
        etcdserverpb__watch_response__free_unpacked(f->sink.msg[i], NULL);
    f->sink.n = 0;
}

static void fx_close(fx *f)
{
    fx_clear(f);
    kv_watch_stream_close(f->st);
    kv_watch_hub_close(f->h);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_loop_close(&f->loop);
    kvt_store_close(&f->t);
}

/* A write through the store, then the hub is told (as the node's commit hook does). */
static int64_t put(fx *f, const char *k, const char *v)
{
    int64_t r = kvt_store_put(&f->t, k, v, 0);
    kv_watch_hub_notify(f->h, kvt_store_rev(&f->t));
    return r;
}

static void del(fx *f, const char *k, const char *end)
{
    kvt_store_del(&f->t, k, end);
    kv_watch_hub_notify(f->h, kvt_store_rev(&f->t));
}

typedef struct wopts {
    const char *key, *end;
    int64_t start, id;
    int prev_kv, noput, nodelete, fragment, progress;
} wopts;

static int create(fx *f, wopts o)
{
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    c.key = kvt_bin(o.key ? o.key : "");
    if (o.end)
        c.range_end = o.end[0] ? kvt_bin(o.end) : (ProtobufCBinaryData){1, (uint8_t *)"\0"};
    c.start_revision = o.start;
    c.watch_id = o.id;
    c.prev_kv = o.prev_kv;
    c.fragment = o.fragment;
    c.progress_notify = o.progress;
    Etcdserverpb__WatchCreateRequest__FilterType ft[2];
    if (o.noput)
        ft[c.n_filters++] = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT;
    if (o.nodelete)
        ft[c.n_filters++] = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE;
    c.filters = ft;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &c;
    uint8_t buf[1024];
    size_t len = etcdserverpb__watch_request__pack(&r, buf);
    return kv_watch_stream_request(f->st, buf, len);
}

static int cancel(fx *f, int64_t id)
{
    Etcdserverpb__WatchCancelRequest c = ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
    c.watch_id = id;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
    r.cancel_request = &c;
    uint8_t buf[64];
    size_t len = etcdserverpb__watch_request__pack(&r, buf);
    return kv_watch_stream_request(f->st, buf, len);
}

/* Every event received for watch id, in order, flattened: "P key value rev" / "D key rev". */
static size_t events_of(fx *f, int64_t id, char out[][64], size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < f->sink.n; i++) {
        Etcdserverpb__WatchResponse *r = f->sink.msg[i];
        if (r->watch_id != id)
            continue;
        for (size_t j = 0; j < r->n_events && n < cap; j++) {
            Mvccpb__Event *e = r->events[j];
            if (e->type == MVCCPB__EVENT__EVENT_TYPE__PUT)
                snprintf(out[n++], 64, "P %.*s %.*s %lld", (int)e->kv->key.len, e->kv->key.data,
                         (int)e->kv->value.len, e->kv->value.data, (long long)e->kv->mod_revision);
            else
                snprintf(out[n++], 64, "D %.*s %lld", (int)e->kv->key.len, e->kv->key.data,
                         (long long)e->kv->mod_revision);
        }
    }
    return n;
}

Test(watch_hub, range_matching)
{
    kv_watcher w = {0};
    w.key = (uint8_t *)"b";
    w.klen = 1;
    w.kind = R_SINGLE;
    cr_assert(kv_watch_match(&w, (const uint8_t *)"b", 1));
    cr_assert(!kv_watch_match(&w, (const uint8_t *)"ba", 2));
    w.kind = R_FROM;
    cr_assert(kv_watch_match(&w, (const uint8_t *)"ba", 2));
    cr_assert(kv_watch_match(&w, (const uint8_t *)"z", 1));
    cr_assert(!kv_watch_match(&w, (const uint8_t *)"a", 1));
    w.kind = R_RANGE;
    w.end = (uint8_t *)"c";
    w.elen = 1;
    cr_assert(kv_watch_match(&w, (const uint8_t *)"b", 1));
    cr_assert(kv_watch_match(&w, (const uint8_t *)"bzz", 3));
    cr_assert(!kv_watch_match(&w, (const uint8_t *)"c", 1));
    cr_assert(!kv_watch_match(&w, (const uint8_t *)"a", 1));
}

Test(watch_hub, created_ids_and_events_in_order)
{
    fx f;
    fx_open(&f, NULL);
    cr_assert_eq(create(&f, (wopts){.key = "a", .end = "b"}), 0); /* prefix a */
    cr_assert_eq(create(&f, (wopts){.key = "k"}), 0);             /* single key */
    cr_assert_eq(create(&f, (wopts){.key = "m", .end = ""}), 0);  /* from key m */
    cr_assert_eq(f.sink.n, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert(f.sink.msg[i]->created);
        cr_assert_eq(f.sink.msg[i]->watch_id, i); /* auto ids from 0 (etcd 3.4) */
        cr_assert_eq(f.sink.msg[i]->header->revision, 1);
        cr_assert_eq(f.sink.msg[i]->header->cluster_id, 7);
    }
    fx_clear(&f);
    put(&f, "a1", "x");
    put(&f, "k", "v");
    put(&f, "kk", "no");
    put(&f, "z", "zz");
    del(&f, "a1", NULL);
    char ev[16][64];
    cr_assert_eq(events_of(&f, 0, ev, 16), 2);
    cr_assert_str_eq(ev[0], "P a1 x 2");
    cr_assert_str_eq(ev[1], "D a1 6");
    cr_assert_eq(events_of(&f, 1, ev, 16), 1);
    cr_assert_str_eq(ev[0], "P k v 3");
    cr_assert_eq(events_of(&f, 2, ev, 16), 1);
    cr_assert_str_eq(ev[0], "P z zz 5");
    cr_assert_eq(f.sink.msg[f.sink.n - 1]->header->revision, 6);
    kv_watch_stats s;
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.watchers, 3);
    cr_assert_eq(s.unsynced, 0);
    cr_assert_eq(s.events_sent, 4);
    fx_close(&f);
}

Test(watch_hub, txn_events_together_prev_kv_and_filters)
{
    fx f;
    fx_open(&f, NULL);
    put(&f, "a", "0");
    cr_assert_eq(create(&f, (wopts){.key = "a", .end = "b", .prev_kv = 1}), 0);
    cr_assert_eq(create(&f, (wopts){.key = "a", .end = "b", .noput = 1}), 0);
    fx_clear(&f);
    /* one txn: put a, put ab, delete a... -> same revision, sub-revision order */
    Etcdserverpb__PutRequest p1 = ETCDSERVERPB__PUT_REQUEST__INIT, p2 = p1;
    p1.key = kvt_bin("a");
    p1.value = kvt_bin("1");
    p2.key = kvt_bin("ab");
    p2.value = kvt_bin("2");
    Etcdserverpb__RequestOp o1 = ETCDSERVERPB__REQUEST_OP__INIT, o2 = o1;
    o1.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o1.request_put = &p1;
    o2.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o2.request_put = &p2;
    Etcdserverpb__RequestOp *ops[] = {&o1, &o2};
    Etcdserverpb__TxnRequest x = ETCDSERVERPB__TXN_REQUEST__INIT;
    x.success = ops;
    x.n_success = 2;
    kv_result res;
    Etcdserverpb__TxnResponse *tr = kvt_store_txn(&f.t, &x, &res);
    cr_assert_not_null(tr);
    etcdserverpb__txn_response__free_unpacked(tr, NULL);
    del(&f, "a", "b"); /* notify covers both revisions in one batch-like step */
    cr_assert_eq(f.sink.n, 2);
    Etcdserverpb__WatchResponse *r = f.sink.msg[0];
    cr_assert_eq(r->watch_id, 0);
    cr_assert_eq(r->n_events, 4);
    cr_assert_eq(r->events[0]->kv->mod_revision, 3);
    cr_assert_eq(r->events[1]->kv->mod_revision, 3);
    cr_assert(r->events[1]->kv->key.len == 2 && memcmp(r->events[1]->kv->key.data, "ab", 2) == 0);
    cr_assert_not_null(r->events[0]->prev_kv);
    cr_assert_eq(r->events[0]->prev_kv->value.data[0], '0');
    cr_assert_null(r->events[1]->prev_kv);
    cr_assert_eq(r->events[2]->type, MVCCPB__EVENT__EVENT_TYPE__DELETE);
    cr_assert_eq(r->events[2]->prev_kv->value.data[0], '1');
    cr_assert_eq(r->events[2]->kv->mod_revision, 4);
    r = f.sink.msg[1]; /* NOPUT: deletes only */
    cr_assert_eq(r->watch_id, 1);
    cr_assert_eq(r->n_events, 2);
    cr_assert_eq(r->events[0]->type, MVCCPB__EVENT__EVENT_TYPE__DELETE);
    fx_close(&f);
}

Test(watch_hub, past_start_replays_future_waits)
{
    fx f;
    fx_open(&f, NULL);
    put(&f, "a", "1");
    put(&f, "a", "2");
    put(&f, "a", "3");
    cr_assert_eq(create(&f, (wopts){.key = "a", .start = 3}), 0);
    cr_assert_eq(create(&f, (wopts){.key = "a", .start = 6}), 0);
    kv_watch_stats s;
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.unsynced, 1);
    kv_watch_hub_sync_now(f.h, 10);
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.unsynced, 0);
    char ev[16][64];
    cr_assert_eq(events_of(&f, 0, ev, 16), 2);
    cr_assert_str_eq(ev[0], "P a 2 3");
    cr_assert_str_eq(ev[1], "P a 3 4");
    cr_assert_eq(events_of(&f, 1, ev, 16), 0);
    put(&f, "a", "4"); /* rev 5: before the future watcher's start */
    put(&f, "a", "5"); /* rev 6 */
    cr_assert_eq(events_of(&f, 1, ev, 16), 1);
    cr_assert_str_eq(ev[0], "P a 5 6");
    cr_assert_eq(events_of(&f, 0, ev, 16), 4);
    fx_close(&f);
}

Test(watch_hub, full_stream_goes_unsynced_then_catches_up_without_gaps)
{
    kv_watch_config c;
    kv_watch_config_default(&c);
    c.stream_send_buffer_bytes = 4096;
    c.slice_revs = 7; /* several slices */
    fx f;
    fx_open(&f, &c);
    cr_assert_eq(create(&f, (wopts){.key = "k", .end = "l"}), 0);
    fx_clear(&f);
    put(&f, "k0", "v");
    cr_assert_eq(f.sink.n, 1);
    f.sink.queued = 100000; /* the client stopped reading */
    size_t before = f.sink.n;
    for (int i = 1; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        put(&f, k, "v");
    }
    cr_assert_eq(f.sink.n, before, "nothing is queued past the stream bound");
    kv_watch_stats s;
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.unsynced, 1);
    cr_assert_eq(s.slow_total, 1);
    cr_assert_eq(kv_watch_hub_sync_now(f.h, 100), 0, "no catch-up while the stream is full");
    f.sink.queued = 0; /* reading again */
    int slices = kv_watch_hub_sync_now(f.h, 1000);
    cr_assert_geq(slices, 14, "catch-up runs in bounded slices (%d)", slices);
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.unsynced, 0);
    put(&f, "k100", "v"); /* synced again: live delivery */
    char ev[128][64];
    size_t n = events_of(&f, 0, ev, 128);
    cr_assert_eq(n, 101);
    for (size_t i = 0; i < n; i++) {
        char want[64];
        snprintf(want, sizeof(want), "P k%zu v %zu", i, i + 2);
        cr_assert_str_eq(ev[i], want);
    }
    fx_close(&f);
}

Test(watch_hub, behind_compaction_gets_compacted_response)
{
    fx f;
    fx_open(&f, NULL);
    for (int i = 0; i < 10; i++)
        put(&f, "a", "v");
    kv_result res;
    Etcdserverpb__CompactionResponse *cr = kvt_store_compact(&f.t, 8, &res);
    cr_assert_not_null(cr);
    etcdserverpb__compaction_response__free_unpacked(cr, NULL);
    cr_assert_eq(create(&f, (wopts){.key = "a", .start = 3}), 0);
    cr_assert_eq(create(&f, (wopts){.key = "a", .start = 8}), 0); /* == compact: allowed */
    fx_clear(&f);
    kv_watch_hub_sync_now(f.h, 10);
    Etcdserverpb__WatchResponse *r = NULL, *ok = NULL;
    for (size_t i = 0; i < f.sink.n; i++) {
        if (f.sink.msg[i]->watch_id == 0)
            r = f.sink.msg[i];
        else
            ok = f.sink.msg[i];
    }
    cr_assert_not_null(r);
    cr_assert(r->canceled);
    cr_assert_eq(r->compact_revision, 8);
    cr_assert_eq(r->header->revision, 0); /* as etcd 3.4 */
    cr_assert_eq(r->n_events, 0);
    cr_assert_not_null(ok);
    cr_assert_eq(ok->n_events, 4); /* revisions 8..11 */
    kv_watch_stats s;
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.compacted_total, 1);
    cr_assert_eq(s.unsynced, 0);
    fx_close(&f);
}

/* A negative start revision, never compacted: etcd 3.4 (compactMainRev -1) cancels a
 * watcher below -1 with compact_revision -1 and serves one of -1 from revision 1. Neither
 * may hold up another watcher catching up in the same batch (a start of -5000 once made the
 * batch read nothing, and nobody advanced, ever). */
Test(watch_hub, a_negative_start_revision_stalls_no_one)
{
    fx f;
    fx_open(&f, NULL);
    for (int i = 0; i < 5; i++)
        put(&f, "a", "v");                                            /* revisions 2..6 */
    cr_assert_eq(create(&f, (wopts){.key = "a", .start = -5000}), 0); /* id 0 */
    cr_assert_eq(create(&f, (wopts){.key = "a", .start = 3}), 0);     /* id 1 */
    cr_assert_eq(create(&f, (wopts){.key = "a", .start = -1}), 0);    /* id 2 */
    fx_clear(&f);
    kv_watch_hub_sync_now(f.h, 10);
    Etcdserverpb__WatchResponse *r = NULL;
    for (size_t i = 0; i < f.sink.n; i++)
        if (f.sink.msg[i]->watch_id == 0)
            r = f.sink.msg[i];
    cr_assert_not_null(r, "no answer for the watcher at -5000");
    cr_assert(r->canceled);
    cr_assert_eq(r->compact_revision, -1);
    char ev[16][64];
    cr_assert_eq(events_of(&f, 1, ev, 16), 4, "the watcher from 3 was held up");
    cr_assert_str_eq(ev[0], "P a v 3");
    cr_assert_eq(events_of(&f, 2, ev, 16), 5, "the watcher from -1 reads from revision 1");
    cr_assert_str_eq(ev[0], "P a v 2");
    kv_watch_stats s;
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.unsynced, 0);
    fx_close(&f);
}

/* A sink whose sends fail with fail_rc once it is set, and whose failed callback records
 * the error and closes the stream (as service_watch.c ends the call). */
typedef struct xsink {
    int fail_rc;
    int in_send;
    int failed, failed_err, failed_in_send;
    kv_watch_stream *st;
} xsink;

static int x_send(void *arg, const uint8_t *m, size_t len)
{
    (void)m;
    (void)len;
    return ((xsink *)arg)->fail_rc;
}

static size_t x_queued(void *arg)
{
    (void)arg;
    return 0;
}

static void x_failed(void *arg, int err)
{
    xsink *x = arg;
    x->failed++;
    x->failed_err = err;
    x->failed_in_send = x->in_send;
    kv_watch_stream_close(x->st);
    x->st = NULL;
}

static const kv_watch_sink_ops xops = {x_send, x_queued, x_failed};

/* A send that fails for good (a response over --max-response-bytes) is not left silent: the
 * owner hears of it once, on a later loop turn, outside the delivery, and may close the
 * stream there (etcd ends a watch stream whose send fails). */
Test(watch_hub, a_failed_send_is_reported_on_a_later_turn)
{
    fx f;
    fx_open(&f, NULL);
    xsink x = {0};
    cr_assert_eq(kv_watch_stream_open(f.h, 2, &xops, &x, &x.st), 0);
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    c.key = kvt_bin("a");
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &c;
    uint8_t buf[64];
    size_t len = etcdserverpb__watch_request__pack(&r, buf);
    cr_assert_eq(kv_watch_stream_request(x.st, buf, len), 0);
    x.fail_rc = -EMSGSIZE;
    x.in_send = 1; /* the delivery below runs "inside" the writer */
    put(&f, "a", "v");
    put(&f, "a", "w");
    x.in_send = 0;
    cr_assert_eq(x.failed, 0, "reported inside the delivery");
    uv_run(&f.loop, UV_RUN_NOWAIT);
    cr_assert_eq(x.failed, 1, "a failed send was never reported (the stream stays silent)");
    cr_assert_eq(x.failed_err, -EMSGSIZE);
    cr_assert_eq(x.failed_in_send, 0);
    cr_assert_null(x.st);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    cr_assert_eq(x.failed, 1, "reported twice");
    fx_close(&f);
}

Test(watch_hub, protocol_errors_cancel_progress)
{
    kv_watch_config c;
    kv_watch_config_default(&c);
    c.max_watchers_per_stream = 3;
    fx f;
    fx_open(&f, &c);
    cr_assert_eq(create(&f, (wopts){.key = "b", .end = "a"}), 0);
    cr_assert_eq(f.sink.msg[0]->watch_id, -1);
    cr_assert(f.sink.msg[0]->created && f.sink.msg[0]->canceled);
    cr_assert_str_eq(f.sink.msg[0]->cancel_reason, "mvcc: watcher range is empty");
    cr_assert_eq(create(&f, (wopts){.key = "a", .id = 1}), 0);
    cr_assert_eq(create(&f, (wopts){.key = "a", .id = 1}), 0);
    cr_assert_str_eq(f.sink.msg[2]->cancel_reason,
                     "mvcc: duplicate watch ID provided on the WatchStream");
    cr_assert_eq(create(&f, (wopts){.key = "a"}), 0); /* auto: 0 */
    cr_assert_eq(f.sink.msg[3]->watch_id, 0);
    cr_assert_eq(create(&f, (wopts){.key = "a"}), 0); /* auto: 1 taken -> 2 */
    cr_assert_eq(f.sink.msg[4]->watch_id, 2);
    cr_assert_eq(create(&f, (wopts){.key = "a"}), 0); /* over the limit */
    cr_assert(f.sink.msg[5]->canceled);
    cr_assert(strstr(f.sink.msg[5]->cancel_reason, "--max-watchers-per-stream") != NULL);
    fx_clear(&f);
    cr_assert_eq(cancel(&f, 1), 0);
    cr_assert_eq(f.sink.n, 1);
    cr_assert(f.sink.msg[0]->canceled && !f.sink.msg[0]->created);
    cr_assert_eq(f.sink.msg[0]->watch_id, 1);
    cr_assert_eq(cancel(&f, 42), 0); /* unknown: no answer */
    cr_assert_eq(f.sink.n, 1);
    cr_assert_eq(kv_watch_stream_watchers(f.st), 2);
    put(&f, "a", "v");
    fx_clear(&f);
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    Etcdserverpb__WatchProgressRequest pr = ETCDSERVERPB__WATCH_PROGRESS_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST;
    r.progress_request = &pr;
    uint8_t buf[16];
    size_t len = etcdserverpb__watch_request__pack(&r, buf);
    cr_assert_eq(kv_watch_stream_request(f.st, buf, len), 0);
    cr_assert_eq(f.sink.n, 1);
    cr_assert_eq(f.sink.msg[0]->watch_id, -1);
    cr_assert_eq(f.sink.msg[0]->header->revision, 2);
    cr_assert_eq(kv_watch_stream_request(f.st, (const uint8_t *)"\xff\xff", 2), -EBADMSG);
    fx_close(&f);
}

Test(watch_hub, periodic_progress_only_when_idle_and_synced)
{
    fx f;
    fx_open(&f, NULL);
    cr_assert_eq(create(&f, (wopts){.key = "p", .progress = 1}), 0);
    cr_assert_eq(create(&f, (wopts){.key = "q"}), 0);
    fx_clear(&f);
    kv_watch_hub_progress_tick(f.h);
    cr_assert_eq(f.sink.n, 1);
    cr_assert_eq(f.sink.msg[0]->watch_id, 0);
    cr_assert_eq(f.sink.msg[0]->n_events, 0);
    put(&f, "p", "v"); /* an event elides the next notification */
    fx_clear(&f);
    kv_watch_hub_progress_tick(f.h);
    cr_assert_eq(f.sink.n, 0);
    kv_watch_hub_progress_tick(f.h);
    cr_assert_eq(f.sink.n, 1);
    cr_assert_eq(f.sink.msg[0]->header->revision, 2);
    fx_close(&f);
}

Test(watch_hub, fragment_splits_large_responses)
{
    kv_watch_config c;
    kv_watch_config_default(&c);
    c.max_response_bytes = 1000;
    fx f;
    fx_open(&f, &c);
    cr_assert_eq(create(&f, (wopts){.key = "f", .end = "g", .fragment = 1}), 0);
    cr_assert_eq(create(&f, (wopts){.key = "f", .end = "g"}), 0);
    fx_clear(&f);
    char big[301];
    memset(big, 'x', 300);
    big[300] = 0;
    for (int i = 0; i < 10; i++) {
        char k[8];
        snprintf(k, sizeof(k), "f%d", i);
        kvt_store_put(&f.t, k, big, 0);
    }
    kv_watch_hub_notify(f.h, kvt_store_rev(&f.t));
    size_t frag = 0, whole = 0, evs = 0;
    Etcdserverpb__WatchResponse *lastf = NULL;
    for (size_t i = 0; i < f.sink.n; i++) {
        Etcdserverpb__WatchResponse *r = f.sink.msg[i];
        if (r->watch_id == 1) {
            whole++;
            cr_assert(!r->fragment);
            continue;
        }
        if (lastf)
            cr_assert(lastf->fragment, "every fragment but the last is marked");
        evs += r->n_events;
        size_t len = etcdserverpb__watch_response__get_packed_size(r);
        cr_assert(len < 1000 + 400, "fragment of %zu bytes", len);
        lastf = r;
        frag++;
    }
    cr_assert_not_null(lastf);
    cr_assert(!lastf->fragment);
    cr_assert_eq(whole, 1);
    cr_assert_eq(evs, 10);
    cr_assert_geq(frag, 4);
    fx_close(&f);
}

Test(watch_hub, limits_streams_per_connection_and_unread_control_responses)
{
    kv_watch_config c;
    kv_watch_config_default(&c);
    c.max_streams_per_conn = 2;
    c.stream_send_buffer_bytes = 4096;
    fx f;
    fx_open(&f, &c); /* stream 1 on connection 1 */
    fsink other = {0};
    kv_watch_stream *s2 = NULL, *s3 = NULL, *s4 = NULL;
    cr_assert_eq(kv_watch_stream_open(f.h, 1, &fops, &other, &s2), 0);
    cr_assert_eq(kv_watch_stream_open(f.h, 1, &fops, &other, &s3), -EMFILE);
    cr_assert_eq(kv_watch_stream_open(f.h, 2, &fops, &other, &s4), 0); /* other connection */
    kv_watch_stats s;
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.streams, 3);
    kv_watch_stream_close(s2);
    kv_watch_stream_close(s4);
    /* a client that sends requests but never reads: control responses are bounded too */
    f.sink.queued = 3 * 4096;
    cr_assert_eq(create(&f, (wopts){.key = "a"}), -ENOBUFS);
    cr_assert_eq(f.sink.n, 0);
    fx_close(&f);
}

Test(watch_hub, compaction_in_the_same_batch_gives_compacted_response)
{
    fx f;
    fx_open(&f, NULL);
    cr_assert_eq(create(&f, (wopts){.key = "a"}), 0);
    fx_clear(&f);
    /* one "batch": writes and a compaction past them, then a single notify */
    kvt_store_put(&f.t, "a", "1", 0);
    kvt_store_put(&f.t, "a", "2", 0);
    kvt_store_put(&f.t, "a", "3", 0);
    kv_result res;
    Etcdserverpb__CompactionResponse *cr = kvt_store_compact(&f.t, 4, &res);
    cr_assert_not_null(cr);
    etcdserverpb__compaction_response__free_unpacked(cr, NULL);
    kv_watch_hub_notify(f.h, kvt_store_rev(&f.t));
    kv_watch_hub_sync_now(f.h, 10);
    cr_assert_eq(f.sink.n, 1);
    cr_assert(f.sink.msg[0]->canceled);
    cr_assert_eq(f.sink.msg[0]->compact_revision, 4);
    fx_close(&f);
}

/* Catch-up is spread over loop turns (bounded bytes per turn) and I/O runs between them: a
 * 0 ms timer re-armed from its own callback would run again inside the same timer phase. */
Test(watch_hub, catch_up_yields_to_the_loop_between_turns)
{
    fx f;
    fx_open(&f, NULL);
    char big[1025];
    memset(big, 'x', 1024);
    big[1024] = 0;
    for (int t = 0; t < 12; t++) {
        Etcdserverpb__PutRequest p[100];
        Etcdserverpb__RequestOp o[100], *ops[100];
        char keys[100][16];
        for (int i = 0; i < 100; i++) {
            snprintf(keys[i], sizeof(keys[i]), "y/%d/%d", t, i);
            etcdserverpb__put_request__init(&p[i]);
            p[i].key = kvt_bin(keys[i]);
            p[i].value = kvt_bin(big);
            etcdserverpb__request_op__init(&o[i]);
            o[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            o[i].request_put = &p[i];
            ops[i] = &o[i];
        }
        Etcdserverpb__TxnRequest x = ETCDSERVERPB__TXN_REQUEST__INIT;
        x.success = ops;
        x.n_success = 100;
        kv_result res;
        Etcdserverpb__TxnResponse *tr = kvt_store_txn(&f.t, &x, &res);
        cr_assert_not_null(tr);
        etcdserverpb__txn_response__free_unpacked(tr, NULL);
    }
    kv_watch_hub_notify(f.h, kvt_store_rev(&f.t));
    cr_assert_eq(create(&f, (wopts){.key = "y/", .end = "y0", .start = 2}), 0);
    kv_watch_stats s;
    int turns = 0;
    do {
        uv_run(&f.loop, UV_RUN_NOWAIT);
        turns++;
        kv_watch_hub_get_stats(f.h, &s);
        /* the test's sink takes everything at once: the watcher always has room */
    } while (s.unsynced > 0 && turns < 10000);
    cr_assert_eq(s.unsynced, 0);
    cr_assert_eq(s.events_sent, 1200);
    cr_assert_geq(turns, 4, "1.2 MB of catch-up took %d loop turn(s)", turns);
    fx_close(&f);
}

/* Idle watchers cost nothing to writes they do not match (docs/ARCHITECTURE.md, Watch): the
 * watchers or index nodes examined per committed event (kvd_watch_match_visits_total) stay
 * proportional to the matches with 100,000 synced single-key watchers and 1,000 range watchers
 * on keys nobody writes. Counts, not time. */
Test(watch_hub, idle_watchers_are_not_examined_by_writes, .timeout = 600)
{
    kv_watch_config c;
    kv_watch_config_default(&c);
    c.max_watchers_per_stream = 200000;
    fx f;
    fx_open(&f, &c);
    char k[32], e[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(k, sizeof(k), "idle/%06d", i);
        cr_assert_eq(create(&f, (wopts){.key = k}), 0);
        if (f.sink.n >= 4000)
            fx_clear(&f);
    }
    for (int i = 0; i < 1000; i++) { /* idle prefixes */
        snprintf(k, sizeof(k), "idler/%04d/", i);
        snprintf(e, sizeof(e), "idler/%04d0", i);
        cr_assert_eq(create(&f, (wopts){.key = k, .end = e}), 0);
        if (f.sink.n >= 4000)
            fx_clear(&f);
    }
    cr_assert_eq(create(&f, (wopts){.key = "zz", .end = ""}), 0);   /* id 101000: idle, >= zz */
    cr_assert_eq(create(&f, (wopts){.key = "hot"}), 0);             /* 101001 */
    cr_assert_eq(create(&f, (wopts){.key = "ho", .end = "hp"}), 0); /* 101002: prefix ho */
    fx_clear(&f);
    kv_watch_stats s0, s1;
    kv_watch_hub_get_stats(f.h, &s0);
    cr_assert_eq(s0.watchers, 101003);
    cr_assert_eq(s0.unsynced, 0);
    for (int i = 0; i < 100; i++)
        put(&f, "hot", "v");
    put(&f, "idle/004242", "w"); /* one idle watcher matches */
    kv_watch_hub_get_stats(f.h, &s1);
    uint64_t visits = s1.match_visits - s0.match_visits;
    /* 101 events, 201 matches: an index examines a few dozen nodes per event; a scan of the
     * synced watchers examines 101,003 per commit (over 10 million) */
    cr_assert_leq(visits, 101 * 200, "%llu watchers examined for 101 events with 201 matches",
                  (unsigned long long)visits);
    cr_log_info("%llu watchers or index nodes examined for 101 events", (unsigned long long)visits);
    kv_watch_hub_sync_now(f.h, 1000); /* whatever live delivery left to catch-up */
    char ev[128][64];
    cr_assert_eq(events_of(&f, 101001, ev, 128), 100);
    cr_assert_eq(events_of(&f, 101002, ev, 128), 100);
    cr_assert_eq(events_of(&f, 4242, ev, 128), 1);
    cr_assert_str_eq(ev[0], "P idle/004242 w 102");
    cr_assert_eq(events_of(&f, 101000, ev, 128), 0);
    cr_assert_eq(events_of(&f, 4243, ev, 128), 0);
    fx_close(&f);
}

/* A synced watcher's next revision advances only when an event matches it (the index,
 * docs/ARCHITECTURE.md, Watch). One that stayed idle while other keys were written and a
 * compaction passed, then became a victim of its full stream, resumes at the revision it was
 * synced to: no compacted response, no gap, nothing twice. Cancel and stream close take
 * watchers out of the index. */
Test(watch_hub, idle_synced_watcher_victim_resumes_where_it_was_synced)
{
    kv_watch_config c;
    kv_watch_config_default(&c);
    c.stream_send_buffer_bytes = 4096;
    fx f;
    fx_open(&f, &c);
    cr_assert_eq(create(&f, (wopts){.key = "a"}), 0);             /* 0 */
    cr_assert_eq(create(&f, (wopts){.key = "b", .end = "c"}), 0); /* 1: prefix b */
    cr_assert_eq(create(&f, (wopts){.key = "z", .end = ""}), 0);  /* 2: >= z */
    fx_clear(&f);
    for (int i = 0; i < 50; i++) { /* revisions 2..51 */
        char k[16];
        snprintf(k, sizeof(k), "b%d", i);
        put(&f, k, "v");
    }
    char ev[64][64];
    cr_assert_eq(events_of(&f, 1, ev, 64), 50);
    cr_assert_eq(events_of(&f, 0, ev, 64) + events_of(&f, 2, ev, 64), 0);
    fx_clear(&f);
    kv_result res;
    Etcdserverpb__CompactionResponse *cr = kvt_store_compact(&f.t, 40, &res);
    cr_assert_not_null(cr);
    etcdserverpb__compaction_response__free_unpacked(cr, NULL);
    f.sink.queued = 100000; /* the client stopped reading */
    put(&f, "a", "x");      /* 52: watcher 0 is a victim */
    put(&f, "zz", "y");     /* 53: watcher 2 too */
    kv_watch_stats s;
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.unsynced, 2);
    cr_assert_eq(s.slow_total, 2);
    f.sink.queued = 0;
    kv_watch_hub_sync_now(f.h, 100);
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.unsynced, 0);
    cr_assert_eq(s.compacted_total, 0);
    for (size_t i = 0; i < f.sink.n; i++)
        cr_assert_eq(f.sink.msg[i]->compact_revision, 0);
    cr_assert_eq(events_of(&f, 0, ev, 64), 1);
    cr_assert_str_eq(ev[0], "P a x 52");
    cr_assert_eq(events_of(&f, 2, ev, 64), 1);
    cr_assert_str_eq(ev[0], "P zz y 53");
    fx_clear(&f);
    put(&f, "a", "w"); /* 54: live again */
    cr_assert_eq(events_of(&f, 0, ev, 64), 1);
    cr_assert_str_eq(ev[0], "P a w 54");
    /* cancel, and a second stream closed with its watchers synced */
    cr_assert_eq(cancel(&f, 1), 0);
    fsink sink2 = {0};
    kv_watch_stream *st2;
    cr_assert_eq(kv_watch_stream_open(f.h, 2, &fops, &sink2, &st2), 0);
    kv_watch_stream *st1 = f.st;
    f.st = st2;
    cr_assert_eq(create(&f, (wopts){.key = "a"}), 0);
    cr_assert_eq(create(&f, (wopts){.key = "b", .end = "c"}), 0);
    f.st = st1;
    kv_watch_stream_close(st2);
    for (size_t i = 0; i < sink2.n; i++)
        etcdserverpb__watch_response__free_unpacked(sink2.msg[i], NULL);
    fx_clear(&f);
    put(&f, "b7", "v");
    put(&f, "a", "q");
    cr_assert_eq(events_of(&f, 1, ev, 64), 0);
    cr_assert_eq(events_of(&f, 0, ev, 64), 1);
    cr_assert_str_eq(ev[0], "P a q 56");
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.watchers, 2);
    fx_close(&f);
}

/* Random watchers (single keys, ranges, open-ended, prefixes, every key, filters), created
 * and canceled between random puts and deletes, some phases with the stream full (victims
 * caught up later): every watcher gets exactly the events a scan of its range and filters
 * selects, in order. The index (docs/ARCHITECTURE.md, Watch) changes nothing a client sees. */
enum { RW_MAX = 80, RW_EV = 400 };
typedef struct rw_watcher {
    int kind; /* 0 single, 1 range, 2 from, 3 prefix k1, 4 every key */
    int a, b; /* key indexes */
    int noput, nodelete;
    int64_t from, until; /* events with from < rev <= until */
    bool live;
    int64_t got[RW_EV], want[RW_EV];
    size_t n_got, n_want;
} rw_watcher;

static bool rw_match(const rw_watcher *w, const char *key)
{
    char ka[8], kb[8];
    snprintf(ka, sizeof(ka), "k%02d", w->a);
    snprintf(kb, sizeof(kb), "k%02d", w->b);
    switch (w->kind) {
    case 0:
        return strcmp(key, ka) == 0;
    case 1:
        return strcmp(key, ka) >= 0 && strcmp(key, kb) < 0;
    case 2:
        return strcmp(key, ka) >= 0;
    case 3:
        return strncmp(key, "k1", 2) == 0;
    default:
        return true;
    }
}

static void rw_collect(fx *f, rw_watcher *ws)
{
    for (size_t i = 0; i < f->sink.n; i++) {
        Etcdserverpb__WatchResponse *r = f->sink.msg[i];
        cr_assert_eq(r->compact_revision, 0);
        if (r->watch_id < 0 || r->watch_id >= RW_MAX)
            continue;
        rw_watcher *w = &ws[r->watch_id];
        for (size_t j = 0; j < r->n_events; j++) {
            cr_assert_lt(w->n_got, RW_EV);
            int64_t rev = r->events[j]->kv->mod_revision;
            w->got[w->n_got++] =
                r->events[j]->type == MVCCPB__EVENT__EVENT_TYPE__DELETE ? -rev : rev;
        }
    }
    fx_clear(f);
}

Test(watch_hub, random_watchers_get_exactly_their_events)
{
    fx f;
    fx_open(&f, NULL);
    static rw_watcher ws[RW_MAX];
    memset(ws, 0, sizeof(ws));
    int n_w = 0;
    bool exists[30] = {0};
    uint64_t seed = 0x2545f4914f6cdd1dull;
#define RW_RND() (seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17, seed)
    for (int op = 0; op < 300; op++) {
        bool full = op >= 100 && op < 140;
        f.sink.queued = full ? (size_t)(1.5 * (1 << 20)) : 0;
        if (op == 140) {
            kv_watch_hub_sync_now(f.h, 10000);
            rw_collect(&f, ws);
        }
        int64_t cur = kvt_store_rev(&f.t);
        if (n_w < RW_MAX && RW_RND() % 3 == 0) { /* a new watcher from now on */
            rw_watcher *w = &ws[n_w];
            w->kind = (int)(RW_RND() % 5);
            w->a = (int)(RW_RND() % 30);
            w->b = w->a + 1 + (int)(RW_RND() % (30 - w->a));
            w->noput = RW_RND() % 5 == 0;
            w->nodelete = !w->noput && RW_RND() % 5 == 0;
            w->from = cur;
            w->until = INT64_MAX;
            w->live = true;
            char ka[8], kb[8];
            snprintf(ka, sizeof(ka), "k%02d", w->a);
            snprintf(kb, sizeof(kb), "k%02d", w->b);
            wopts o = {.noput = w->noput, .nodelete = w->nodelete};
            if (w->kind == 0) {
                o.key = ka;
            } else if (w->kind == 1) {
                o.key = ka;
                o.end = kb;
            } else if (w->kind == 2) {
                o.key = ka;
                o.end = "";
            } else if (w->kind == 3) {
                o.key = "k1";
                o.end = "k2";
            } else {
                o.key = "";
                o.end = "";
            }
            cr_assert_eq(create(&f, o), 0);
            n_w++;
        }
        if (!full && n_w > 0 && RW_RND() % 10 == 0) { /* cancel one (all delivered so far) */
            rw_watcher *w = &ws[RW_RND() % (uint64_t)n_w];
            if (w->live) {
                cr_assert_eq(cancel(&f, (int64_t)(w - ws)), 0);
                w->live = false;
                w->until = cur;
            }
        }
        int k = (int)(RW_RND() % 30);
        char key[8];
        snprintf(key, sizeof(key), "k%02d", k);
        bool is_del = exists[k] && RW_RND() % 3 == 0;
        if (is_del)
            del(&f, key, NULL);
        else
            put(&f, key, "v");
        exists[k] = !is_del;
        int64_t rev = kvt_store_rev(&f.t);
        for (int i = 0; i < n_w; i++) {
            rw_watcher *w = &ws[i];
            if (rev > w->from && rev <= w->until && rw_match(w, key) &&
                !(is_del ? w->nodelete : w->noput))
                w->want[w->n_want++] = is_del ? -rev : rev;
        }
        rw_collect(&f, ws);
    }
    f.sink.queued = 0;
    kv_watch_hub_sync_now(f.h, 10000);
    rw_collect(&f, ws);
    kv_watch_stats s;
    kv_watch_hub_get_stats(f.h, &s);
    cr_assert_eq(s.unsynced, 0);
    cr_assert_gt(s.slow_total, 0, "some watchers were victims");
    cr_assert_geq(n_w, 40);
    for (int i = 0; i < n_w; i++) {
        rw_watcher *w = &ws[i];
        cr_assert_eq(w->n_got, w->n_want, "watcher %d kind %d [%d,%d): %zu events, want %zu", i,
                     w->kind, w->a, w->b, w->n_got, w->n_want);
        for (size_t j = 0; j < w->n_want; j++)
            cr_assert_eq(w->got[j], w->want[j], "watcher %d event %zu", i, j);
    }
#undef RW_RND
    fx_close(&f);
}
