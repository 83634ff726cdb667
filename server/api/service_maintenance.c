/*
 * service_maintenance: etcdserverpb.Maintenance (Status, Alarm, HashKV, Defragment).
 * Snapshot and Hash: api/snapshot_stream.c. MoveLeader: api/move_leader.c.
 *
 * Alarm: every action (GET, ACTIVATE, DEACTIVATE) travels the ordered write path, as etcd
 * proposes AlarmRequests through raft; the store applies it (mvcc/alarm.c).
 * Defragment: an exclusive item of the node (no write runs meanwhile): a compacting copy on
 * the apply worker, then the swap on the loop (mvcc/store.h kv_store_defrag_*).
 */
#include "apply/internal_req.h"
#include "api/move_leader.h"
#include "api/read_req.h"
#include "api/snapshot_stream.h"
#include "common/version.h"
#include "api/services.h"
#include "pb/pb_strip.h"
#include "rpc.pb-c.h"
#include "api/api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unpack_ok(kv_grpc_call *call, const ProtobufCMessageDescriptor *d, const uint8_t *msg,
                     size_t len, ProtobufCMessage **out)
{
    *out = kv_pb_unpack(d, msg, len); /* unknown fields dropped: pb/pb_strip.h */
    if (*out == NULL) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return 0;
    }
    return 1;
}

typedef struct status_errors {
    char **v;
    size_t n, cap;
} status_errors;

static int add_status_text(status_errors *e, const char *text)
{
    if (e->n == 65) /* the no-leader line and up to 64 alarms */
        return 0;
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 4;
        char **v = realloc(e->v, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        e->v = v;
        e->cap = cap;
    }
    if ((e->v[e->n] = strdup(text)) == NULL)
        return -ENOMEM;
    e->n++;
    return 0;
}

/* etcd's Status lists the active alarms as AlarmMember.String() in `errors`. */
static int add_status_error(void *arg, uint64_t member, int type)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "memberID:%llu alarm:%s ", (unsigned long long)member,
             kv_alarm_name(type));
    return add_status_text(arg, buf);
}

static void on_status(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    ProtobufCMessage *req;
    if (!unpack_ok(call, &etcdserverpb__status_request__descriptor, msg, len, &req))
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    kv_store_status ss;
    if (kv_store_get_status(s->store, &ss) < 0) {
        kv_reply_etcd_err(call, KV_ERR_STORAGE);
        return;
    }
    /* etcd 3.4 maintenanceServer.Status: leader, raftIndex = the raft commit index,
     * raftAppliedIndex, raftTerm and isLearner from raft; "etcdserver: no leader" first in
     * errors when no leader is known, then the alarms. */
    kv_node_raft_status rs;
    kv_node_get_raft_status(s->node, &rs);
    Etcdserverpb__StatusResponse r = ETCDSERVERPB__STATUS_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    kv_fill_header(call, &h, ss.revision);
    if (rs.term)
        h.raft_term = rs.term;
    r.header = &h;
    r.version = (char *)KV_ETCD_SERVER_VERSION;
    r.dbsize = ss.db_size;
    r.dbsizeinuse = ss.db_size_in_use;
    r.leader = rs.leader;
    r.raftindex = rs.commit_index;
    r.raftappliedindex = rs.applied_index;
    r.raftterm = h.raft_term;
    r.islearner = rs.is_learner != 0;
    status_errors errs = {0};
    int rc = 0;
    if (rs.leader == 0)
        rc = add_status_text(&errs, kv_etcd_err_msg(KV_ERR_NO_LEADER));
    if (rc == 0 && kv_store_alarms(s->store) != 0)
        kv_store_alarm_list(s->store, add_status_error, &errs);
    r.errors = errs.v;
    r.n_errors = errs.n;
    kv_reply_message(call, &r.base);
    for (size_t i = 0; i < errs.n; i++)
        free(errs.v[i]);
    free(errs.v);
}

static void on_alarm(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__AlarmRequest *req;
    if (!unpack_ok(call, &etcdserverpb__alarm_request__descriptor, msg, len,
                   (ProtobufCMessage **)&req))
        return;
    protobuf_c_message_free_unpacked(&req->base, NULL);
    kv_propose_unary(call, KV_IREQ_ALARM, msg, len);
}

/* HashKV walks every stored revision: it runs on a read worker, never on the loop (lesson 10). */
static void on_hash_kv(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_read_unary(call, kv_store_hash_kv_request, msg, len);
}

/* LMDB reuses freed pages but never gives them back to the file system, and the quota counts
 * the file's pages (as etcd counts bbolt's file): Defragment rewrites the file compactly. */
typedef struct defrag_ctx {
    kv_api *s;
    kv_grpc_call *call; /* NULL once the client went away */
    kv_store_defrag_stats st;
    uv_work_t release; /* drops the old file off the loop */
} defrag_ctx;

static void release_run(uv_work_t *w)
{
    defrag_ctx *d = w->data;
    kv_store_defrag_release(&d->st);
}

static void release_after(uv_work_t *w, int status)
{
    (void)status;
    defrag_ctx *d = w->data;
    kv_store_defrag_release(&d->st);
    free(d);
}

/* A physical compaction still running in steps (docs/ARCHITECTURE.md "Compaction") would
 * leave the revisions it has not removed yet in the copy: Defragment finishes it first, in
 * one unbounded step (writes wait for the copy anyway), so "compact, then defrag" reclaims
 * the space as with etcd. Apply worker, alone (kv_node_exclusive). */
static int finish_compaction(kv_store *st)
{
    for (int more = 1; more > 0;) {
        kv_store_batch *b = NULL;
        int rc = kv_store_batch_begin(st, &b);
        if (rc < 0)
            return rc;
        more = kv_store_compact_step(st, b, 0, 0, 0, NULL, NULL);
        if (more < 0) {
            kv_store_batch_abort(st, b);
            return more;
        }
        /* derivable from the log: the copy's own sync makes it durable */
        if ((rc = kv_store_batch_commit_nometasync(st, b)) < 0)
            return rc;
    }
    return 0;
}

static int defrag_work(void *arg)
{
    defrag_ctx *d = arg;
    int rc = kv_store_compact_pending(d->s->store, NULL) > 0 ? finish_compaction(d->s->store) : 0;
    return rc < 0 ? rc : kv_store_defrag_copy(d->s->store, &d->st);
}

static void defrag_done(void *arg, int status)
{
    defrag_ctx *d = arg;
    kv_api *s = d->s;
    if (status == 0)
        status = kv_store_defrag_swap(s->store, &d->st);
    if (status == 0)
        fprintf(stderr,
                "kvd: defragmented %s/data.mdb: %lld -> %lld bytes; copy %.1f ms (writes "
                "waited), swap %.1f ms (every request waited)\n",
                s->cfg->data_dir, (long long)d->st.file_before, (long long)d->st.file_after,
                (double)d->st.copy_us / 1000.0, (double)d->st.swap_us / 1000.0);
    else if (status != -ECANCELED)
        fprintf(stderr, "kvd: error: defragment failed: %s\n", strerror(-status));
    if (d->call) {
        kv_grpc_call_set_data(d->call, NULL);
        if (status != 0) {
            char why[96];
            snprintf(why, sizeof(why), ": %s", strerror(-status));
            if (status == -ECANCELED) /* the member stops */
                kv_reply_etcd_err(d->call, KV_ERR_DEFRAG_CANCELED);
            else
                kv_reply_etcd_err_detail(d->call, KV_ERR_DEFRAG_FAILED, why);
        } else {
            Etcdserverpb__DefragmentResponse r = ETCDSERVERPB__DEFRAGMENT_RESPONSE__INIT;
            Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
            kv_fill_header(d->call, &h, KV_HDR_REVISION_NOW);
            r.header = &h;
            kv_reply_message(d->call, &r.base);
        }
    }
    d->release.data = d;
    if (d->st.old_fd < 0 || uv_queue_work(s->loop, &d->release, release_run, release_after) < 0) {
        kv_store_defrag_release(&d->st);
        free(d);
    }
}

static void on_defragment(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    (void)msg;
    (void)len;
    defrag_ctx *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        return;
    }
    d->s = s;
    d->call = call;
    int rc = kv_node_exclusive(s->node, defrag_work, defrag_done, d);
    if (rc < 0) {
        free(d);
        kv_reply_propose_error(call, rc);
        return;
    }
    kv_grpc_call_set_data(call, d);
}

static void on_defragment_cancel(kv_grpc_call *call)
{
    defrag_ctx *d = kv_grpc_call_data(call);
    if (d)
        d->call = NULL;
}

const kv_grpc_method kv_service_maintenance[] = {
    {"/etcdserverpb.Maintenance/Status", 0, on_status, NULL, NULL},
    {"/etcdserverpb.Maintenance/Alarm", 0, on_alarm, NULL, kv_propose_cancel},
    {"/etcdserverpb.Maintenance/HashKV", 0, on_hash_kv, NULL, kv_read_cancel},
    {"/etcdserverpb.Maintenance/Defragment", 0, on_defragment, NULL, on_defragment_cancel},
    {"/etcdserverpb.Maintenance/Snapshot", 1, kv_snapshot_on_message, kv_snapshot_on_half_close,
     kv_snapshot_on_cancel},
    {"/etcdserverpb.Maintenance/Hash", 0, kv_hash_on_message, NULL, kv_read_cancel},
    {"/etcdserverpb.Maintenance/MoveLeader", 0, kv_move_leader_on_message, NULL,
     kv_move_leader_on_cancel},
};
const size_t kv_service_maintenance_len =
    sizeof(kv_service_maintenance) / sizeof(kv_service_maintenance[0]);
