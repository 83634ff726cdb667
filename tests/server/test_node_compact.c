/* The node's batched physical compaction: a Compact of many revisions is
 * answered at once, the removal runs in many bounded batches, a put proposed after the
 * Compact is acknowledged long before the compaction ends, kv_node_compact_wait fires when it
 * is done, and an interrupted compaction resumes when the node starts again. */
#include "apply/internal_req.h"
#include "node/node.h"
#include "rpc.pb-c.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2 x KEYS puts: under ASan each applied request costs ~3 ms (its LMDB nested transaction
 * allocates 3 MiB, an mmap there), so 1,000 keys (20 compaction steps) keep the three tests
 * at a few seconds each instead of 20. */
#define KEYS 1000
#define STEP 50

typedef struct fx {
    char dir[64];
    uv_loop_t loop;
    kv_store *store;
    kv_node *node;
} fx;

static void node_open(fx *f)
{
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    kv_header_info hdr = {.cluster_id = 1, .member_id = 2, .raft_term = 3};
    kv_node_config nc = {.max_pending = 10000, .compact_batch_keys = STEP};
    cr_assert_eq(kv_node_init(&f->node, &f->loop, f->store, &nc, &hdr, NULL), 0);
}

static void node_close(fx *f)
{
    kv_node_close(f->node);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&f->loop), 0);
}

static void fx_open(fx *f)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/kvd-ncompact-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = f->dir;
    sc.quota_bytes = 256u << 20;
    cr_assert_eq(kv_store_open(&f->store, &sc), 0);
    node_open(f);
}

static void fx_close(fx *f)
{
    node_close(f);
    kv_store_close(f->store);
    cr_assert_eq(kvt_rmtree(f->dir), 0);
}

typedef struct log {
    int calls, err, failed; /* err: the last kv_etcd_err */
    int64_t rev, max_rev;
    int compact_pending_at_ack; /* for the put: was the compaction still running? */
    kv_node *node;
} log_t;

static void on_done(void *arg, kv_result *res)
{
    log_t *l = arg;
    l->calls++;
    l->err = (int)res->err;
    l->rev = res->revision;
    if (res->err != KV_ERR_NONE)
        l->failed++;
    else if (res->revision > l->max_rev)
        l->max_rev = res->revision;
    if (l->node)
        l->compact_pending_at_ack = kv_node_compact_pending(l->node);
}

static int propose(fx *f, int field, const ProtobufCMessage *m, log_t *l)
{
    uint8_t buf[256];
    size_t len = protobuf_c_message_pack(m, buf);
    uint8_t *req;
    size_t rlen;
    cr_assert_eq(kv_internal_wrap((enum kv_ireq_field)field, 0, buf, len, &req, &rlen), 0);
    return kv_node_propose(f->node, req, rlen, on_done, l, NULL);
}

static void put(fx *f, const char *key, const char *val, log_t *l)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)key;
    p.key.len = strlen(key);
    p.value.data = (uint8_t *)val;
    p.value.len = strlen(val);
    cr_assert_eq(propose(f, KV_IREQ_PUT, &p.base, l), 0);
}

static void spin(fx *f, const int *counter, int target)
{
    for (int i = 0; i < 200000 && *counter < target; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    cr_assert_geq(*counter, target, "loop did not get there");
}

/* KEYS keys, 2 revisions each, proposed 250 at a time (6,000 at once outlived the node's
 * request timeout on a loaded sanitizer build: the late puts failed and the compaction went to
 * a revision of 0). Every put must succeed. Returns the highest revision. */
static int64_t populate(fx *f)
{
    log_t l = {0};
    char k[16];
    int n = 0;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < KEYS; i++) {
            snprintf(k, sizeof k, "k%05d", i);
            put(f, k, round ? "b" : "a", &l);
            if (++n % 250 == 0)
                spin(f, &l.calls, n);
        }
    spin(f, &l.calls, 2 * KEYS);
    cr_assert_eq(l.failed, 0, "%d of %d puts failed (last error %d)", l.failed, 2 * KEYS, l.err);
    return l.max_rev;
}

static void on_wait(void *arg, int status)
{
    int *p = arg;
    *p = status == 0 ? 1 : -1;
}

Test(node_compact, puts_interleave_and_wait_fires_when_done)
{
    fx f;
    fx_open(&f);
    int64_t rev = populate(&f);
    kv_node_stats st0, st1;
    kv_node_get_stats(f.node, &st0);

    log_t cl = {0}, pl = {.node = f.node};
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = rev;
    cr_assert_eq(propose(&f, KV_IREQ_COMPACTION, &c.base, &cl), 0);
    spin(&f, &cl.calls, 1);
    cr_assert_eq(cl.err, 0, "compaction to %lld: error %d", (long long)rev, cl.err);
    cr_assert(kv_node_compact_pending(f.node), "one step of %d keys cannot finish %d keys", STEP,
              KEYS);
    int waited = 0;
    cr_assert_eq(kv_node_compact_wait(f.node, on_wait, &waited, NULL), 0);
    put(&f, "late", "x", &pl);
    spin(&f, &pl.calls, 1);
    cr_assert_eq(pl.err, 0);
    cr_assert(pl.compact_pending_at_ack, "the put waited for the whole compaction");
    cr_assert_eq(waited, 0);
    spin(&f, &waited, 1);
    cr_assert_eq(waited, 1);
    cr_assert_not(kv_node_compact_pending(f.node));
    cr_assert_eq(kv_store_compact_pending(f.store, NULL), 0);
    kv_node_get_stats(f.node, &st1);
    cr_assert_geq(st1.batches_total - st0.batches_total, KEYS / STEP, "bounded steps: %llu batches",
                  (unsigned long long)(st1.batches_total - st0.batches_total));
    cr_assert_eq(kv_node_compact_wait(f.node, on_wait, &waited, NULL), 1, "nothing pending");
    fx_close(&f);
}

Test(node_compact, interrupted_compaction_resumes_at_start)
{
    fx f;
    fx_open(&f);
    int64_t rev = populate(&f);
    log_t cl = {0};
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = rev;
    cr_assert_eq(propose(&f, KV_IREQ_COMPACTION, &c.base, &cl), 0);
    spin(&f, &cl.calls, 1);
    /* stop the node right away: the compaction is still pending */
    node_close(&f);
    cr_assert_eq(kv_store_compact_pending(f.store, NULL), 1);
    node_open(&f);
    cr_assert(kv_node_compact_pending(f.node), "resumed from the store");
    int waited = 0;
    cr_assert_eq(kv_node_compact_wait(f.node, on_wait, &waited, NULL), 0);
    spin(&f, &waited, 1);
    cr_assert_eq(waited, 1);
    cr_assert_eq(kv_store_compact_pending(f.store, NULL), 0);
    fx_close(&f);
}

Test(node_compact, close_cancels_waiters)
{
    fx f;
    fx_open(&f);
    int64_t rev = populate(&f);
    log_t cl = {0};
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = rev;
    cr_assert_eq(propose(&f, KV_IREQ_COMPACTION, &c.base, &cl), 0);
    spin(&f, &cl.calls, 1);
    int waited = 0;
    cr_assert_eq(kv_node_compact_wait(f.node, on_wait, &waited, NULL), 0);
    kv_node_close(f.node);
    cr_assert_eq(waited, -1, "a waiter is told when the node closes");
    uv_run(&f.loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&f.loop), 0);
    kv_store_close(f.store);
    cr_assert_eq(kvt_rmtree(f.dir), 0);
}
