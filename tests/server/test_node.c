/* The node's ordered write path: group commit, ordering, bounds, detach, barrier, stall. */
#include "apply/internal_req.h"
#include "mvcc/range.h"
#include "node/node.h"
#include "rpc.pb-c.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fixture {
    char dir[64];
    uv_loop_t loop;
    kv_store *store;
    kv_node *node;
} fixture;

typedef struct done_log {
    int calls;
    int64_t revs[256];
    kv_etcd_err errs[256];
} done_log;

static void fx_open(fixture *f, uint32_t max_pending)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/kvd-node-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = f->dir;
    sc.quota_bytes = 64u << 20;
    cr_assert_eq(kv_store_open(&f->store, &sc), 0);
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    kv_header_info hdr = {.cluster_id = 1, .member_id = 2, .raft_term = 3};
    kv_node_config nc = {.max_pending = max_pending};
    cr_assert_eq(kv_node_init(&f->node, &f->loop, f->store, &nc, &hdr, NULL), 0);
}

static void fx_close(fixture *f)
{
    kv_node_close(f->node);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&f->loop), 0);
    kv_store_close(f->store);
    cr_assert_eq(kvt_rmtree(f->dir), 0);
}

/* A put of key = value (vlen bytes) on lease (0: none), answered to done(arg); its handle in
 * *h when h. */
static int propose_put_value(fixture *f, const char *key, const uint8_t *value, size_t vlen,
                             int64_t lease, kv_node_done_fn done, void *arg, kv_node_req **h)
{
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    put.value = (ProtobufCBinaryData){vlen, (uint8_t *)value};
    put.lease = lease;
    size_t len = etcdserverpb__put_request__get_packed_size(&put), rlen;
    uint8_t *buf = malloc(len + 1), *req;
    cr_assert_not_null(buf);
    etcdserverpb__put_request__pack(&put, buf);
    cr_assert_eq(kv_internal_wrap(KV_IREQ_PUT, 0, buf, len, &req, &rlen), 0);
    free(buf);
    return kv_node_propose(f->node, req, rlen, done, arg, h);
}

/* A put of key = "v", no lease. */
static int propose_put(fixture *f, const char *key, kv_node_done_fn done, void *arg,
                       kv_node_req **h)
{
    return propose_put_value(f, key, (const uint8_t *)"v", 1, 0, done, arg, h);
}

/* Batches apply on a worker thread: run the loop until *counter reaches target (bounded). */
static void spin(fixture *f, const int *counter, int target)
{
    for (int i = 0; i < 5000 && *counter < target; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    cr_assert_geq(*counter, target, "loop did not complete the batch");
}

static void on_done(void *arg, kv_result *res)
{
    done_log *l = arg;
    l->errs[l->calls] = res->err;
    l->revs[l->calls] = res->revision;
    l->calls++;
}

static void on_barrier(void *arg, int status)
{
    int *p = arg;
    *p = status == 0 ? 1 : -1;
}

Test(node, one_loop_iteration_is_one_commit_in_order)
{
    fixture f;
    fx_open(&f, 1000);
    done_log log = {0};
    kv_store_counters before, after;
    kv_store_get_counters(f.store, &before);
    for (int i = 0; i < 100; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%03d", i);
        cr_assert_eq(propose_put(&f, key, on_done, &log, NULL), 0);
    }
    cr_assert_eq(log.calls, 0, "nothing is acknowledged before the batch commits");
    spin(&f, &log.calls, 100);
    kv_store_get_counters(f.store, &after);
    cr_assert_eq(log.calls, 100);
    cr_assert_eq(after.commits - before.commits, 1, "100 writes, one commit (one sync)");
    for (int i = 0; i < 100; i++) {
        cr_assert_eq(log.errs[i], KV_ERR_NONE);
        cr_assert_eq(log.revs[i], 2 + i, "revision %d at %d", (int)log.revs[i], i);
    }
    kv_node_stats st;
    kv_node_get_stats(f.node, &st);
    cr_assert_eq(st.applied_index, 101, "index 1 is the leader's empty entry");
    cr_assert_eq(st.max_batch_size, 100);
    cr_assert_eq(kv_node_revision(f.node), 101);
    fx_close(&f);
}

static void fx_open_wal(fixture *f)
{
    fx_open(f, 1000);
    kv_node_close(f->node);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    char wal[96];
    snprintf(wal, sizeof wal, "%s/wal", f->dir);
    kv_header_info hdr = {.cluster_id = 1, .member_id = 2, .raft_term = 3};
    kv_node_config nc = {.max_pending = 1000,
                         .wal_dir = wal,
                         .use_wal = 1,
                         .max_log_bytes = 256u << 20}; /* admits a Txn of 100 MiB */
    cr_assert_eq(kv_node_init(&f->node, &f->loop, f->store, &nc, &hdr, NULL), 0);
}

/* WAL mode applies a ready in the batch's own transaction (no LMDB child per request); a
 * request that fails after it may have written makes the node apply the ready again with a
 * child per request: the request fails alone, the others keep their results and revisions. */
static void puts_with_one_failing(int failing, uint64_t want_retries)
{
    fixture f;
    fx_open_wal(&f);
    done_log log = {0};
    kv_store_counters before, after;
    kv_store_get_counters(f.store, &before);
    for (int i = 0; i < 100; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%03d", i);
        int64_t lease = i == failing ? 999 : 0; /* no such lease */
        cr_assert_eq(
            propose_put_value(&f, key, (const uint8_t *)"v", 1, lease, on_done, &log, NULL), 0);
    }
    spin(&f, &log.calls, 100);
    int64_t rev = 1;
    for (int i = 0; i < 100; i++) {
        if (i == failing) {
            cr_assert_eq(log.errs[i], KV_ERR_LEASE_NOT_FOUND, "put %d: %d", i, log.errs[i]);
            continue;
        }
        cr_assert_eq(log.errs[i], KV_ERR_NONE, "put %d: %d", i, log.errs[i]);
        cr_assert_eq(log.revs[i], ++rev, "put %d: revision %d", i, (int)log.revs[i]);
    }
    for (int i = 0; i < 5000 && kv_node_revision(f.node) < rev; i++)
        uv_run(&f.loop, UV_RUN_ONCE); /* WAL mode: answered before the LMDB commit */
    cr_assert_eq(kv_node_revision(f.node), rev);
    kv_node_stats st;
    kv_node_get_stats(f.node, &st);
    cr_assert_eq(st.apply_retries, want_retries);
    kv_node_close(f.node); /* its last commit done: the counters are final */
    uv_run(&f.loop, UV_RUN_DEFAULT);
    kv_store_get_counters(f.store, &after);
    cr_assert_eq(after.applies - before.applies, 100, "every entry counted once: %llu",
                 (unsigned long long)(after.applies - before.applies));
    cr_assert_eq(uv_loop_close(&f.loop), 0);
    kv_store_close(f.store);
    cr_assert_eq(kvt_rmtree(f.dir), 0);
}

Test(node, wal_ready_applies_in_one_transaction)
{
    puts_with_one_failing(-1, 0);
}

Test(node, wal_ready_with_a_failed_request_is_applied_again)
{
    puts_with_one_failing(50, 1);
}

/* The request that fails half-way: with 60 MiB of values in the 80 MiB map (quota 64 MiB), a
 * Txn of 24 puts of 1 MiB fills it after it wrote part of them (MDB_MAP_FULL). Only that Txn fails
 * (NOSPACE); the puts around it in the same ready keep their results, and none of the Txn's puts is
 * kept. */
Test(node, wal_ready_with_a_request_failing_half_way_keeps_the_others)
{
    fixture f;
    fx_open_wal(&f);
    done_log log = {0};
    static uint8_t big[1 << 20];
    Etcdserverpb__PutRequest puts[24];
    Etcdserverpb__RequestOp ops[24], *opp[24];
    char keys[24][8];
    int fill = 0;
    for (int i = 0; i < 60; i++) {
        char key[16];
        snprintf(key, sizeof key, "fill%02d", i);
        cr_assert_eq(propose_put_value(&f, key, big, sizeof big, 0, on_done, &log, NULL), 0);
        spin(&f, &log.calls, ++fill);
        cr_assert_eq(log.errs[fill - 1], KV_ERR_NONE, "fill %d: %d", i, log.errs[fill - 1]);
    }
    log = (done_log){0};
    for (int i = 0; i < 24; i++) {
        snprintf(keys[i], sizeof keys[i], "t%02d", i);
        etcdserverpb__put_request__init(&puts[i]);
        puts[i].key = (ProtobufCBinaryData){strlen(keys[i]), (uint8_t *)keys[i]};
        puts[i].value = (ProtobufCBinaryData){sizeof big, big};
        etcdserverpb__request_op__init(&ops[i]);
        ops[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        ops[i].request_put = &puts[i];
        opp[i] = &ops[i];
    }
    Etcdserverpb__TxnRequest txn = ETCDSERVERPB__TXN_REQUEST__INIT;
    txn.n_success = 24;
    txn.success = opp;
    size_t len = etcdserverpb__txn_request__get_packed_size(&txn), rlen;
    uint8_t *buf = malloc(len), *req;
    etcdserverpb__txn_request__pack(&txn, buf);
    cr_assert_eq(propose_put(&f, "before", on_done, &log, NULL), 0);
    cr_assert_eq(kv_internal_wrap(KV_IREQ_TXN, 0, buf, len, &req, &rlen), 0);
    free(buf);
    cr_assert_eq(kv_node_propose(f.node, req, rlen, on_done, &log, NULL), 0);
    cr_assert_eq(propose_put(&f, "after", on_done, &log, NULL), 0);
    spin(&f, &log.calls, 3);
    cr_assert_eq(log.errs[0], KV_ERR_NONE, "before: %d, txn %d, after %d", log.errs[0], log.errs[1],
                 log.errs[2]);
    cr_assert_eq(log.revs[0], 62);
    cr_assert_eq(log.errs[1], KV_ERR_NO_SPACE, "the Txn: %d", log.errs[1]);
    cr_assert_eq(log.errs[2], KV_ERR_NONE);
    cr_assert_eq(log.revs[2], 63, "the Txn took no revision: %d", (int)log.revs[2]);
    kv_node_stats st;
    kv_node_get_stats(f.node, &st);
    cr_assert_eq(st.apply_retries, 1);
    kv_range_opts o = {0};
    o.key = (const uint8_t *)"t";
    o.key_len = 1;
    o.end = (const uint8_t *)"u";
    o.end_len = 1;
    o.count_only = 1;
    kv_range_result r;
    cr_assert_eq(kv_store_range_read(f.store, &o, &r), 0);
    cr_assert_eq(r.count, 0, "none of the Txn's puts is kept: %lld", (long long)r.count);
    kv_range_result_free(&r);
    fx_close(&f);
}

Test(node, full_queue_sheds_with_ebusy)
{
    fixture f;
    fx_open(&f, 10);
    done_log log = {0};
    int busy = 0;
    for (int i = 0; i < 25; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        int rc = propose_put(&f, key, on_done, &log, NULL);
        cr_assert(rc == 0 || rc == -EBUSY);
        busy += rc == -EBUSY;
    }
    cr_assert_eq(busy, 15);
    spin(&f, &log.calls, 10);
    cr_assert_eq(log.calls, 10);
    kv_node_stats st;
    kv_node_get_stats(f.node, &st);
    cr_assert_eq(st.refused_total, 15);
    cr_assert_eq(st.pending, 0);
    fx_close(&f);
}

Test(node, detached_request_is_applied_but_not_answered)
{
    fixture f;
    fx_open(&f, 10);
    done_log log = {0};
    kv_node_req *h = NULL;
    cr_assert_eq(propose_put(&f, "gone", on_done, &log, &h), 0);
    kv_node_req_detach(h);
    int barrier = 0;
    cr_assert_eq(kv_node_barrier(f.node, on_barrier, &barrier), 0);
    spin(&f, &barrier, 1);
    cr_assert_eq(log.calls, 0);
    cr_assert_eq(kv_node_revision(f.node), 2, "the write was still applied");
    fx_close(&f);
}

Test(node, barrier_and_stall_failpoint)
{
    fixture f;
    fx_open(&f, 10);
    int passed = 0;
    cr_assert_eq(kv_node_barrier(f.node, on_barrier, &passed), 0);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    cr_assert_eq(passed, 1, "an idle node passes a barrier on the next iteration");

    kv_node_set_stalled(f.node, 1);
    done_log log = {0};
    passed = 0;
    cr_assert_eq(propose_put(&f, "a", on_done, &log, NULL), 0);
    cr_assert_eq(kv_node_barrier(f.node, on_barrier, &passed), 0);
    for (int i = 0; i < 5; i++)
        uv_run(&f.loop, UV_RUN_NOWAIT);
    cr_assert_eq(passed, 0, "a stalled apply path holds the barrier");
    cr_assert_eq(log.calls, 0);

    kv_node_set_stalled(f.node, 0);
    spin(&f, &passed, 1);
    cr_assert_eq(log.calls, 1);
    fx_close(&f);
}

Test(node, close_fails_queued_requests)
{
    fixture f;
    fx_open(&f, 10);
    done_log log = {0};
    int passed = 0;
    cr_assert_eq(propose_put(&f, "a", on_done, &log, NULL), 0);
    cr_assert_eq(kv_node_barrier(f.node, on_barrier, &passed), 0);
    kv_node_close(f.node);
    cr_assert_eq(log.calls, 1);
    cr_assert_eq(log.errs[0], KV_ERR_STOPPED);
    cr_assert_eq(passed, -1);
    uv_run(&f.loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&f.loop), 0);
    kv_store_close(f.store);
    cr_assert_eq(kvt_rmtree(f.dir), 0);
}

/* ---- exclusive items and alarms (docs/ARCHITECTURE.md, "Alarms, quota and defragment") ---- */

typedef struct excl_probe {
    kv_store *store;
    int64_t seen_rev; /* revision the exclusive work saw (on the worker) */
    int done;
} excl_probe;

static int excl_work_fn(void *arg)
{
    excl_probe *p = arg;
    kv_store_status st;
    kv_store_get_status(p->store, &st);
    p->seen_rev = st.revision;
    return 0;
}

static void excl_done_fn(void *arg, int status)
{
    excl_probe *p = arg;
    p->done = status == 0 ? 1 : -1;
}

Test(node, exclusive_item_runs_alone_in_queue_order)
{
    fixture f;
    fx_open(&f, 1000);
    done_log log = {0};
    excl_probe p = {.store = f.store};
    kv_store_counters before, after;
    kv_store_get_counters(f.store, &before);
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "a%d", i);
        cr_assert_eq(propose_put(&f, key, on_done, &log, NULL), 0);
    }
    cr_assert_eq(kv_node_exclusive(f.node, excl_work_fn, excl_done_fn, &p), 0);
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "b%d", i);
        cr_assert_eq(propose_put(&f, key, on_done, &log, NULL), 0);
    }
    spin(&f, &log.calls, 10);
    cr_assert_eq(p.done, 1);
    cr_assert_eq(p.seen_rev, 6, "the exclusive item runs after the 5 writes queued before it");
    for (int i = 0; i < 10; i++)
        cr_assert_eq(log.revs[i], 2 + i);
    kv_store_get_counters(f.store, &after);
    cr_assert_eq(after.commits - before.commits, 2, "one batch before, one after");
    fx_close(&f);
}

Test(node, requested_alarm_is_raised_through_the_write_path)
{
    fixture f;
    fx_open(&f, 1000);
    cr_assert_eq(kv_node_alarms(f.node), 0u);
    kv_store_request_alarm(f.store, KV_ALARM_NOSPACE);
    for (int i = 0; i < 5000 && !(kv_node_alarms(f.node) & (1u << KV_ALARM_NOSPACE)); i++) {
        uv_run(&f.loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    cr_assert_eq(kv_node_alarms(f.node), 1u << KV_ALARM_NOSPACE, "NOSPACE raised and committed");
    /* the capped applier refuses puts */
    done_log log = {0};
    cr_assert_eq(propose_put(&f, "k", on_done, &log, NULL), 0);
    spin(&f, &log.calls, 1);
    cr_assert_eq(log.errs[0], KV_ERR_NO_SPACE);
    fx_close(&f);
}

/* Client writes that fill the queue must not shed /health's barrier (lesson 13). */
static void on_health(void *arg, int status)
{
    int *p = arg;
    (*p) += status == 0 ? 1 : 100;
}

Test(node, health_barrier_has_a_reserved_slot_and_coalesces)
{
    fixture f;
    snprintf(f.dir, sizeof(f.dir), "/tmp/kvd-node-XXXXXX");
    cr_assert_not_null(mkdtemp(f.dir));
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = f.dir;
    sc.quota_bytes = 64u << 20;
    cr_assert_eq(kv_store_open(&f.store, &sc), 0);
    cr_assert_eq(uv_loop_init(&f.loop), 0);
    kv_header_info hdr = {.cluster_id = 1, .member_id = 2, .raft_term = 3};
    kv_node_config nc = {.max_pending = 2, .max_health_waiters = 3};
    cr_assert_eq(kv_node_init(&f.node, &f.loop, f.store, &nc, &hdr, NULL), 0);

    kv_node_set_stalled(f.node, 1);
    done_log log = {0};
    cr_assert_eq(propose_put(&f, "a", on_done, &log, NULL), 0);
    cr_assert_eq(propose_put(&f, "b", on_done, &log, NULL), 0);
    cr_assert_eq(propose_put(&f, "c", on_done, &log, NULL), -EBUSY, "the write queue is full");
    int plain = 0;
    cr_assert_eq(kv_node_barrier(f.node, on_barrier, &plain), -EBUSY,
                 "plain barriers share the proposals' bound");
    int h = 0;
    cr_assert_eq(kv_node_health_barrier(f.node, on_health, &h), 0, "health is not shed");
    cr_assert_eq(kv_node_health_barrier(f.node, on_health, &h), 0);
    cr_assert_eq(kv_node_health_barrier(f.node, on_health, &h), 0);
    cr_assert_eq(kv_node_health_barrier(f.node, on_health, &h), -EBUSY,
                 "waiting probes are bounded (max_health_waiters)");
    cr_assert_eq(propose_put(&f, "d", on_done, &log, NULL), -EBUSY,
                 "health barriers take no proposal slot, and give none");
    for (int i = 0; i < 5; i++)
        uv_run(&f.loop, UV_RUN_NOWAIT);
    cr_assert_eq(h, 0, "a stalled apply path holds /health (lesson 13)");

    kv_node_set_stalled(f.node, 0);
    spin(&f, &h, 3);
    cr_assert_eq(h, 3, "the three probes pass together, after the writes queued before them");
    cr_assert_eq(log.calls, 2);
    kv_node_stats st;
    kv_node_get_stats(f.node, &st);
    cr_assert_eq(st.last_batch_size, 3, "two writes + one coalesced health barrier");
    fx_close(&f);
}
