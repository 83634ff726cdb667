/* The node's ordered write path: group commit, ordering, bounds, detach, barrier, stall. */
#include "apply/internal_req.h"
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

static int propose_put(fixture *f, const char *key, kv_node_done_fn done, void *arg,
                       kv_node_req **h)
{
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key.data = (uint8_t *)key;
    put.key.len = strlen(key);
    put.value.data = (uint8_t *)"v";
    put.value.len = 1;
    uint8_t buf[128];
    size_t len = etcdserverpb__put_request__pack(&put, buf);
    uint8_t *req;
    size_t rlen;
    cr_assert_eq(kv_internal_wrap(KV_IREQ_PUT, 0, buf, len, &req, &rlen), 0);
    return kv_node_propose(f->node, req, rlen, done, arg, h);
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
