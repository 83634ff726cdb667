#include "lease/leases.h"

#include "apply/internal_req.h"
#include "lease/lessor.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_leases {
    uv_loop_t *loop;
    kv_store *store;
    kv_node *node;
    kv_metrics *metrics; /* optional */
    kv_lessor *lessor;
    kv_leases_config cfg;
};

static int propose_packed(kv_leases *s, int field, const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return -ENOMEM;
    protobuf_c_message_pack(m, buf);
    uint8_t *req;
    size_t rlen;
    int rc = kv_internal_wrap((enum kv_ireq_field)field, 0, buf, len, &req, &rlen);
    free(buf);
    if (rc < 0)
        return rc;
    return kv_node_propose(s->node, req, rlen, NULL, NULL, NULL);
}

static int propose_revoke(void *arg, const int64_t *ids, size_t n)
{
    kv_leases *s = arg;
    for (size_t i = 0; i < n; i++) {
        Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
        r.id = ids[i];
        int rc = propose_packed(s, KV_IREQ_LEASE_REVOKE, &r.base);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int propose_checkpoint(void *arg, const kv_lease_checkpoint *cps, size_t n)
{
    kv_leases *s = arg;
    Etcdserverpb__LeaseCheckpoint *items = calloc(n ? n : 1, sizeof(*items));
    Etcdserverpb__LeaseCheckpoint **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    int rc = -ENOMEM;
    if (items == NULL || ptrs == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        etcdserverpb__lease_checkpoint__init(&items[i]);
        items[i].id = cps[i].id;
        items[i].remaining_ttl = cps[i].remaining_ttl;
        ptrs[i] = &items[i];
    }
    Etcdserverpb__LeaseCheckpointRequest r = ETCDSERVERPB__LEASE_CHECKPOINT_REQUEST__INIT;
    r.checkpoints = ptrs;
    r.n_checkpoints = n;
    rc = propose_packed(s, KV_IREQ_LEASE_CHECKPOINT, &r.base);
out:
    free(items);
    free(ptrs);
    return rc;
}

static void obs_granted(void *arg, int64_t id, int64_t ttl, int64_t remaining)
{
    kv_lessor_on_granted(arg, id, ttl, remaining);
}

static void obs_revoked(void *arg, int64_t id)
{
    kv_lessor_on_revoked(arg, id);
}

static void obs_checkpointed(void *arg, int64_t id, int64_t remaining)
{
    kv_lessor_on_checkpointed(arg, id, remaining);
}

#define LESSOR_GAUGE(field)                                                                        \
    static double gauge_##field(void *arg)                                                         \
    {                                                                                              \
        kv_lessor_metrics m;                                                                       \
        kv_lessor_metrics_get(((kv_leases *)arg)->lessor, &m);                                     \
        return (double)m.field;                                                                    \
    }
LESSOR_GAUGE(active_leases)
LESSOR_GAUGE(heap_size)
LESSOR_GAUGE(expired_total)
LESSOR_GAUGE(revoked_total)
LESSOR_GAUGE(checkpoints_total)
LESSOR_GAUGE(is_primary)
LESSOR_GAUGE(mem_bytes)

static void register_metrics(kv_leases *s)
{
    kv_metrics *m = s->metrics;
    if (m == NULL)
        return;
    kv_metrics_gauge_fn(m, "kvd_lease_active", "Leases granted and not revoked.",
                        gauge_active_leases, s);
    kv_metrics_gauge_fn(m, "kvd_lease_heap_size",
                        "Items in the lease expiry heap (0 on non-leaders).", gauge_heap_size, s);
    kv_metrics_counter_fn(m, "kvd_lease_expired_total",
                          "Leases found expired and proposed for revocation.", gauge_expired_total,
                          s);
    kv_metrics_counter_fn(m, "kvd_lease_revoked_total", "Lease revocations applied.",
                          gauge_revoked_total, s);
    kv_metrics_counter_fn(m, "kvd_lease_checkpoints_total", "Lease checkpoints proposed.",
                          gauge_checkpoints_total, s);
    kv_metrics_gauge_fn(m, "kvd_is_leader", "1 if this member is the leader.", gauge_is_primary, s);
    kv_metrics_gauge_fn(m, "kvd_lease_memory_bytes", "Bytes held by the lessor.", gauge_mem_bytes,
                        s);
}

static int promote(kv_leases *s)
{
    MDB_txn *txn = NULL;
    int rc = mdb_txn_begin(kv_store_env(s->store), NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        fprintf(stderr, "kvd: error: lease recovery: %s\n", mdb_strerror(rc));
        return -EIO;
    }
    rc = kv_lessor_promote(s->lessor, (int64_t)s->cfg.election_ms, txn, kv_store_leases(s->store));
    mdb_txn_abort(txn);
    if (rc < 0)
        fprintf(stderr, "kvd: error: lease recovery failed: %s\n", strerror(-rc));
    return rc;
}

static void on_leader(void *arg, int primary)
{
    kv_leases *s = arg;
    if (primary && !kv_lessor_is_primary(s->lessor)) {
        if (promote(s) == 0)
            fprintf(stderr, "kvd: leader: lease expiry runs here now\n");
    } else if (!primary && kv_lessor_is_primary(s->lessor)) {
        kv_lessor_demote(s->lessor);
        fprintf(stderr, "kvd: not leader: lease expiry stopped here\n");
    }
}

void kv_leases_resync(kv_leases *s)
{
    MDB_txn *txn = NULL;
    if (mdb_txn_begin(kv_store_env(s->store), NULL, MDB_RDONLY, &txn) != 0)
        return;
    int rc = kv_lessor_recover(s->lessor, txn, kv_store_leases(s->store));
    mdb_txn_abort(txn);
    if (rc < 0)
        fprintf(stderr, "kvd: error: reloading leases after a snapshot failed: %s\n",
                strerror(-rc));
}

static void on_snapshot_installed(void *arg)
{
    kv_leases_resync(arg);
}

/* The leader's name for a server-chosen grant's id, taken as the entry goes to raft
 * (kv_node_set_lease_namer): every member's grants then get ids in log order. */
static int64_t name_lease_id(void *arg)
{
    kv_leases *s = arg;
    return kv_lessor_new_id(s->lessor);
}

int kv_leases_start(kv_leases **out, const kv_leases_deps *d, const kv_leases_config *c)
{
    *out = NULL;
    kv_leases *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->loop = d->loop;
    s->store = d->store;
    s->node = d->node;
    s->metrics = d->metrics;
    s->cfg = *c;
    kv_lessor_config lc;
    kv_lessor_config_default(&lc);
    /* etcd: minimum TTL = 1.5 x election timeout, rounded up to whole seconds. */
    lc.min_ttl_s = (int64_t)((3ULL * c->election_ms / 2 + 999) / 1000);
    lc.max_ttl_s = c->max_ttl_s;
    lc.revoke_rate = c->revoke_rate;
    lc.checkpoint_rate = c->checkpoint_rate;
    lc.checkpoint_interval_ms = c->checkpoint_interval_ms;
    lc.id_member = (uint16_t)kv_node_self(d->node); /* the low bits of lease ids */
    kv_lessor_ops ops = {
        .now_ms = NULL,
        .propose_revoke = propose_revoke,
        .propose_checkpoint = c->checkpoint_interval_ms ? propose_checkpoint : NULL,
        .is_leader = NULL,
    };
    int rc = kv_lessor_create(&s->lessor, s->loop, &lc, &ops, s);
    if (rc < 0) {
        free(s);
        return rc;
    }
    kv_store_lease_observer obs = {
        .arg = s->lessor,
        .granted = obs_granted,
        .revoked = obs_revoked,
        .checkpointed = obs_checkpointed,
    };
    kv_node_set_lease_observer(s->node, &obs);
    /* Every lease the store holds, before anything is answered or applied: the map follows
     * the apply path only from here on, so a restarted member that skipped this would not
     * know the leases granted before its crash (docs/ARCHITECTURE.md "Leases"). */
    MDB_txn *txn = NULL;
    rc = mdb_txn_begin(kv_store_env(s->store), NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        fprintf(stderr, "kvd: error: lease recovery: %s\n", mdb_strerror(rc));
        rc = -EIO;
        goto fail;
    }
    rc = kv_lessor_recover(s->lessor, txn, kv_store_leases(s->store));
    mdb_txn_abort(txn);
    if (rc < 0) {
        fprintf(stderr, "kvd: error: lease recovery failed: %s\n", strerror(-rc));
        goto fail;
    }

    /* A single member leads its one-member cluster from the start; in a cluster the lessor
     * promotes when raft makes this member the leader and it applied an entry of its term
     * (kv_node_set_leader_hook), and demotes as soon as it stops leading (lesson 4). */
    if (c->lead_at_start) {
        rc = promote(s);
        if (rc < 0)
            goto fail;
    }
    kv_node_set_leader_hook(s->node, on_leader, s);
    kv_node_set_snapshot_hook(s->node, on_snapshot_installed, s);
    kv_node_set_lease_namer(s->node, name_lease_id, s);
    register_metrics(s);
    *out = s;
    return 0;
fail:
    kv_node_set_lease_observer(s->node, NULL);
    kv_lessor_free(s->lessor);
    free(s);
    return rc;
}

kv_lessor *kv_leases_lessor(const kv_leases *s)
{
    return s ? s->lessor : NULL;
}

void kv_leases_stop(kv_leases *s)
{
    if (s == NULL)
        return;
    kv_node_set_leader_hook(s->node, NULL, NULL);
    kv_node_set_snapshot_hook(s->node, NULL, NULL);
    kv_node_set_lease_namer(s->node, NULL, NULL);
    kv_node_set_lease_observer(s->node, NULL);
    if (s->metrics)
        kv_metrics_gauge_fn_remove(s->metrics, s);
    kv_lessor_free(s->lessor);
    free(s);
}
