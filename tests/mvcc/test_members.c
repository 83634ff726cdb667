/* MVCC store: the membership table (mvcc/members.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_store.h"
#include "mvcc/members.h"
#include "mvcc/snapshot.h"
#include "kvt_util.h"

#include <sys/stat.h>

static kvt_store t;
static void setup(void)
{
    kvt_store_open(&t, NULL);
}
static void teardown(void)
{
    kvt_store_close(&t);
}
TestSuite(mvcc_members, .init = setup, .fini = teardown);

static void mk(Kvdpb__Member *m, uint64_t id, const char *name, char **peers, size_t np)
{
    kvdpb__member__init(m);
    m->id = id;
    m->name = (char *)name;
    m->peer_urls = peers;
    m->n_peer_urls = np;
}

static char *peer_a[] = {"http://10.0.0.1:2380"};
static char *peer_b[] = {"http://10.0.0.2:2380", "http://10.0.0.2:2381"};
static char *peer_c[] = {"http://10.0.0.3:2380"};

/* Runs fn inside a batch of its own and commits it; returns fn's result. */
static int in_batch(int (*fn)(kv_store_batch *b, void *arg), void *arg)
{
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    int rc = fn(b, arg);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    return rc;
}

static int boot_fn(kv_store_batch *b, void *arg)
{
    const Kvdpb__Member *const *m = arg;
    size_t n = 0;
    while (m[n])
        n++;
    return kv_store_members_bootstrap(t.s, b, m, n);
}

static void bootstrap_two(void)
{
    Kvdpb__Member a, bm;
    mk(&a, 0x1111, "a", peer_a, 1);
    mk(&bm, 0x2222, "b", peer_b, 2);
    const Kvdpb__Member *v[] = {&bm, &a, NULL};
    cr_assert_eq(in_batch(boot_fn, v), 1);
}

static void list(Kvdpb__Member ***out, size_t *n)
{
    cr_assert_eq(kv_store_members_list(t.s, out, n), 0);
}

Test(mvcc_members, bootstrap_is_idempotent_and_survives_reopen)
{
    Kvdpb__Member **v;
    size_t n;
    list(&v, &n);
    cr_assert_eq(n, 0);
    cr_assert_null(v);
    bootstrap_two();
    /* A second bootstrap with another list changes nothing. */
    Kvdpb__Member c;
    mk(&c, 0x3333, "c", peer_c, 1);
    const Kvdpb__Member *w[] = {&c, NULL};
    cr_assert_eq(in_batch(boot_fn, w), 0);
    kvt_store_reopen(&t);
    list(&v, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(v[0]->id, 0x1111); /* id order */
    cr_assert_str_eq(v[0]->name, "a");
    cr_assert_eq(v[0]->n_peer_urls, 1);
    cr_assert_str_eq(v[0]->peer_urls[0], peer_a[0]);
    cr_assert_eq(v[1]->id, 0x2222);
    cr_assert_eq(v[1]->n_peer_urls, 2);
    cr_assert_str_eq(v[1]->peer_urls[1], peer_b[1]);
    cr_assert_eq(v[1]->is_learner, 0);
    kv_store_members_free(v, n);
}

Test(mvcc_members, bootstrap_refuses_bad_lists)
{
    Kvdpb__Member a, b;
    mk(&a, 7, "a", peer_a, 1);
    mk(&b, 7, "b", peer_c, 1);
    const Kvdpb__Member *dup[] = {&a, &b, NULL};
    cr_assert_eq(in_batch(boot_fn, dup), -EINVAL);
    mk(&b, 0, "b", peer_c, 1);
    const Kvdpb__Member *zero[] = {&b, NULL};
    cr_assert_eq(in_batch(boot_fn, zero), -EINVAL);
    Kvdpb__Member **v;
    size_t n;
    list(&v, &n);
    cr_assert_eq(n, 0);
}

typedef struct op {
    int kind; /* 0 put, 1 remove, 2 set_learner */
    uint64_t id;
    const Kvdpb__Member *m;
    int learner;
} op;

static int op_fn(kv_store_batch *b, void *arg)
{
    op *o = arg;
    if (o->kind == 1)
        return kv_store_member_remove(t.s, b, o->id);
    if (o->kind == 2)
        return kv_store_member_set_learner(t.s, b, o->id, o->learner);
    uint8_t buf[512];
    size_t len = kvdpb__member__pack(o->m, buf);
    return kv_store_member_put(t.s, b, o->id, buf, len);
}

static int do_put(uint64_t id, const Kvdpb__Member *m)
{
    op o = {0, id, m, 0};
    return in_batch(op_fn, &o);
}
static int do_remove(uint64_t id)
{
    op o = {1, id, NULL, 0};
    return in_batch(op_fn, &o);
}
static int do_learner(uint64_t id, int l)
{
    op o = {2, id, NULL, l};
    return in_batch(op_fn, &o);
}

Test(mvcc_members, put_learner_promote_remove_and_removed_ids)
{
    bootstrap_two();
    Kvdpb__Member c;
    mk(&c, 999 /* ignored: the id argument wins */, "", peer_c, 1);
    c.is_learner = 1;
    cr_assert_eq(do_put(0x3333, &c), 0);
    Kvdpb__Member *g = NULL;
    cr_assert_eq(kv_store_member_get(t.s, 0x3333, &g), 0);
    cr_assert_eq(g->id, 0x3333);
    cr_assert_eq(g->is_learner, 1);
    cr_assert_str_eq(g->name, "");
    kvdpb__member__free_unpacked(g, NULL);
    cr_assert_eq(kv_store_member_get(t.s, 0x999, &g), -ENOENT);

    cr_assert_eq(do_learner(0x3333, 0), 0); /* promote */
    cr_assert_eq(kv_store_member_get(t.s, 0x3333, &g), 0);
    cr_assert_eq(g->is_learner, 0);
    kvdpb__member__free_unpacked(g, NULL);
    cr_assert_eq(do_learner(0x4444, 0), -ENOENT);

    cr_assert_eq(kv_store_member_is_removed(t.s, 0x1111), 0);
    cr_assert_eq(do_remove(0x1111), 0);
    cr_assert_eq(do_remove(0x1111), -ENOENT);
    cr_assert_eq(kv_store_member_is_removed(t.s, 0x1111), 1);
    cr_assert_eq(kv_store_member_is_removed(t.s, 0x2222), 0);
    /* A removed member must not rejoin. */
    cr_assert_eq(do_put(0x1111, &c), -EPERM);
    kvt_store_reopen(&t);
    cr_assert_eq(kv_store_member_is_removed(t.s, 0x1111), 1);
    Kvdpb__Member **v;
    size_t n;
    list(&v, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(v[0]->id, 0x2222);
    cr_assert_eq(v[1]->id, 0x3333);
    kv_store_members_free(v, n);
    /* Bootstrap after a removal left the table with members: still a no-op. */
    Kvdpb__Member a;
    mk(&a, 0x1111, "a", peer_a, 1);
    const Kvdpb__Member *w[] = {&a, NULL};
    cr_assert_eq(in_batch(boot_fn, w), 0);
}

Test(mvcc_members, put_refuses_undecodable_and_oversized_records)
{
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    const uint8_t junk[] = {0x0a, 0x7f, 0x01}; /* length past the end */
    cr_assert_eq(kv_store_member_put(t.s, b, 5, junk, sizeof junk), -EINVAL);
    char *many[KV_MEMBER_MAX_URLS + 1];
    for (size_t i = 0; i <= KV_MEMBER_MAX_URLS; i++)
        many[i] = "http://x:1";
    Kvdpb__Member m;
    mk(&m, 5, "m", many, KV_MEMBER_MAX_URLS + 1);
    uint8_t buf[1024];
    size_t len = kvdpb__member__pack(&m, buf);
    cr_assert_eq(kv_store_member_put(t.s, b, 5, buf, len), -EINVAL);
    cr_assert_eq(kv_store_member_put(t.s, b, 0, buf, len), -EINVAL);
    kv_store_batch_abort(t.s, b);
}

/* ---- publish / update through kv_store_apply ---- */

static Etcdserverpb__MemberUpdateResponse *apply_publish(uint64_t id, const char *name,
                                                         char **curls, size_t nc, kv_result *res)
{
    Kvdpb__Member m;
    kvdpb__member__init(&m);
    m.id = id;
    m.name = (char *)name;
    m.client_urls = curls;
    m.n_client_urls = nc;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_PUBLISH;
    ir.member_publish = &m;
    kvt_store_apply(&t, &ir, res);
    if (KVT_STORE_CODE(*res))
        return NULL;
    Etcdserverpb__MemberUpdateResponse *r =
        etcdserverpb__member_update_response__unpack(NULL, res->resp_len, res->resp);
    free(res->resp);
    res->resp = NULL;
    cr_assert_not_null(r);
    return r;
}

static Etcdserverpb__MemberUpdateResponse *apply_update(uint64_t id, char **purls, size_t np,
                                                        kv_result *res)
{
    Kvdpb__MemberUpdate u = KVDPB__MEMBER_UPDATE__INIT;
    u.id = id;
    u.peer_urls = purls;
    u.n_peer_urls = np;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_UPDATE;
    ir.member_update = &u;
    kvt_store_apply(&t, &ir, res);
    if (KVT_STORE_CODE(*res))
        return NULL;
    Etcdserverpb__MemberUpdateResponse *r =
        etcdserverpb__member_update_response__unpack(NULL, res->resp_len, res->resp);
    free(res->resp);
    res->resp = NULL;
    cr_assert_not_null(r);
    return r;
}

Test(mvcc_members, publish_and_update_apply_without_a_revision)
{
    bootstrap_two();
    kvt_store_put(&t, "k", "v", 0);
    int64_t rev = kvt_store_rev(&t);
    char *curls[] = {"http://10.0.0.2:2379"};
    kv_result res;
    Etcdserverpb__MemberUpdateResponse *r = apply_publish(0x2222, "bee", curls, 1, &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(r->header->revision, rev);
    cr_assert_eq(r->n_members, 2);
    cr_assert_eq(r->members[1]->id, 0x2222);
    cr_assert_str_eq(r->members[1]->name, "bee");
    cr_assert_eq(r->members[1]->n_clienturls, 1);
    cr_assert_str_eq(r->members[1]->clienturls[0], curls[0]);
    cr_assert_eq(r->members[1]->n_peerurls, 2); /* publish leaves the peer URLs alone */
    etcdserverpb__member_update_response__free_unpacked(r, NULL);
    cr_assert_eq(kvt_store_rev(&t), rev);

    char *np[] = {"http://10.0.0.9:2380"};
    r = apply_update(0x2222, np, 1, &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(r->members[1]->n_peerurls, 1);
    cr_assert_str_eq(r->members[1]->peerurls[0], np[0]);
    cr_assert_str_eq(r->members[1]->name, "bee"); /* update leaves the attributes alone */
    etcdserverpb__member_update_response__free_unpacked(r, NULL);
    cr_assert_eq(kvt_store_rev(&t), rev);

    /* Another member's peer URL: refused, as etcd's ValidateConfigurationChange. */
    cr_assert_null(apply_update(0x2222, peer_a, 1, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_FAILED_PRECONDITION);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: Peer URLs already exists");

    kvt_store_reopen(&t);
    Kvdpb__Member *g;
    cr_assert_eq(kv_store_member_get(t.s, 0x2222, &g), 0);
    cr_assert_str_eq(g->name, "bee");
    cr_assert_str_eq(g->peer_urls[0], np[0]);
    cr_assert_str_eq(g->client_urls[0], curls[0]);
    kvdpb__member__free_unpacked(g, NULL);
}

/* A member added by MemberAdd has no name until it publishes: the unpacked record's empty name
 * is protobuf-c's shared default string, which publish must not free (it crashed every member
 * when a joiner published). */
Test(mvcc_members, publish_of_a_member_added_without_a_name)
{
    bootstrap_two();
    Kvdpb__Member c;
    mk(&c, 0x3333, "", peer_c, 1);
    cr_assert_eq(do_put(0x3333, &c), 0);
    char *curls[] = {"http://10.0.0.3:2379"};
    kv_result res;
    Etcdserverpb__MemberUpdateResponse *r = apply_publish(0x3333, "cee", curls, 1, &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    etcdserverpb__member_update_response__free_unpacked(r, NULL);
    Kvdpb__Member *g;
    cr_assert_eq(kv_store_member_get(t.s, 0x3333, &g), 0);
    cr_assert_str_eq(g->name, "cee");
    kvdpb__member__free_unpacked(g, NULL);
}

Test(mvcc_members, publish_or_update_of_unknown_member_is_not_found)
{
    bootstrap_two();
    kv_result res;
    cr_assert_null(apply_publish(0x9999, "x", NULL, 0, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_NOT_FOUND);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: member not found");
    cr_assert_null(apply_update(0x9999, peer_c, 1, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_NOT_FOUND);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: member not found");
    /* etcd ignores the publish of a removed member; an update of it is not found. */
    cr_assert_eq(do_remove(0x1111), 0);
    Etcdserverpb__MemberUpdateResponse *r = apply_publish(0x1111, "a", NULL, 0, &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(r->n_members, 1);
    etcdserverpb__member_update_response__free_unpacked(r, NULL);
    cr_assert_null(apply_update(0x1111, peer_c, 1, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_NOT_FOUND);
}

/* Flips one byte of member id's stored record. */
static void corrupt(uint64_t id)
{
    MDB_env *env = kv_store_env(t.s);
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "members", 0, &dbi), 0);
    uint8_t key[8];
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(id >> (56 - 8 * i));
    MDB_val k = {8, key}, v;
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
    uint8_t *copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size - 1] ^= 0x01;
    MDB_val nv = {v.mv_size, copy};
    cr_assert_eq(mdb_put(txn, dbi, &k, &nv, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    free(copy);
}

Test(mvcc_members, a_record_failing_its_crc_is_never_returned)
{
    bootstrap_two();
    corrupt(0x2222);
    Kvdpb__Member **v = NULL;
    size_t n = 0;
    cr_assert_eq(kv_store_members_list(t.s, &v, &n), -EBADMSG);
    cr_assert_null(v);
    Kvdpb__Member *g = NULL;
    cr_assert_eq(kv_store_member_get(t.s, 0x2222, &g), -EBADMSG);
    cr_assert_eq(kv_store_member_get(t.s, 0x1111, &g), 0);
    kvdpb__member__free_unpacked(g, NULL);
    cr_assert_eq(do_learner(0x2222, 1), -EBADMSG);
    kv_result res;
    cr_assert_null(apply_publish(0x2222, "b", NULL, 0, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_DATA_LOSS);
}

/* ---- configuration changes as they apply (kv_store_member_change) ---- */

typedef struct chg {
    int op;
    uint64_t id;
    const Kvdpb__Member *m;
    kv_result res;
} chg;

static int chg_fn(kv_store_batch *b, void *arg)
{
    chg *c = arg;
    uint8_t buf[512];
    size_t len = c->m ? kvdpb__member__pack(c->m, buf) : 0;
    return kv_store_member_change(t.s, b, c->op, c->id, c->m ? buf : NULL, len, &c->res);
}

/* Applies one change; returns KVT_STORE_CODE(res) (asserting no storage error) and its message. */
static int change(int op, uint64_t id, const Kvdpb__Member *m, char *msg)
{
    chg c = {op, id, m, {0}};
    cr_assert_eq(in_batch(chg_fn, &c), 0);
    strcpy(msg, KVT_STORE_MSG(c.res));
    return KVT_STORE_CODE(c.res);
}

Test(mvcc_members, configuration_changes_are_validated_as_etcd)
{
    bootstrap_two();
    char msg[160];
    Kvdpb__Member c, d, dup;
    mk(&c, 0, "", peer_c, 1);
    char *peer_d[] = {"http://10.0.0.4:2380"};
    mk(&d, 0, "", peer_d, 1);
    mk(&dup, 0, "", peer_b + 1, 1); /* one of member 0x2222's URLs */

    cr_assert_eq(change(KV_MEMBER_OP_ADD, 0x2222, &c, msg), KV_GRPC_FAILED_PRECONDITION);
    cr_assert_str_eq(msg, "etcdserver: member ID already exist");
    cr_assert_eq(change(KV_MEMBER_OP_ADD, 0x3333, &dup, msg), KV_GRPC_FAILED_PRECONDITION);
    cr_assert_str_eq(msg, "etcdserver: Peer URLs already exists");
    cr_assert_eq(change(KV_MEMBER_OP_ADD_LEARNER, 0x3333, &c, msg), 0, "%s", msg);
    cr_assert_eq(change(KV_MEMBER_OP_ADD_LEARNER, 0x4444, &d, msg), KV_GRPC_FAILED_PRECONDITION);
    cr_assert_str_eq(msg, "etcdserver: too many learner members in cluster");
    cr_assert_eq(change(KV_MEMBER_OP_PROMOTE, 0x1111, NULL, msg), KV_GRPC_FAILED_PRECONDITION);
    cr_assert_str_eq(msg, "etcdserver: can only promote a learner member");
    cr_assert_eq(change(KV_MEMBER_OP_PROMOTE, 0x9999, NULL, msg), KV_GRPC_NOT_FOUND);
    cr_assert_str_eq(msg, "etcdserver: member not found");
    cr_assert_eq(change(KV_MEMBER_OP_PROMOTE, 0x3333, NULL, msg), 0, "%s", msg);
    Kvdpb__Member *g;
    cr_assert_eq(kv_store_member_get(t.s, 0x3333, &g), 0);
    cr_assert_eq(g->is_learner, 0);
    cr_assert_str_eq(g->peer_urls[0], peer_c[0]);
    kvdpb__member__free_unpacked(g, NULL);
    /* Now a voter: a new learner fits again. */
    cr_assert_eq(change(KV_MEMBER_OP_ADD_LEARNER, 0x4444, &d, msg), 0, "%s", msg);

    cr_assert_eq(change(KV_MEMBER_OP_REMOVE, 0x9999, NULL, msg), KV_GRPC_NOT_FOUND);
    cr_assert_eq(change(KV_MEMBER_OP_REMOVE, 0x4444, NULL, msg), 0, "%s", msg);
    /* A removed id never comes back, whatever the change. */
    cr_assert_eq(change(KV_MEMBER_OP_ADD, 0x4444, &d, msg), KV_GRPC_NOT_FOUND);
    cr_assert_str_eq(msg, "etcdserver: member not found");
    cr_assert_eq(change(KV_MEMBER_OP_REMOVE, 0x4444, NULL, msg), KV_GRPC_NOT_FOUND);
    Kvdpb__Member **v;
    size_t n;
    list(&v, &n);
    cr_assert_eq(n, 3);
    kv_store_members_free(v, n);
    kv_result res;
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    cr_assert_eq(kv_store_member_change(t.s, b, 99, 1, NULL, 0, &res), -EINVAL);
    kv_store_batch_abort(t.s, b);
}

/* A restored snapshot starts a new cluster: the old membership (and removed ids) are gone, so
 * kvd bootstraps the one of its flags. */
Test(mvcc_members, snapshot_restore_drops_the_membership)
{
    bootstrap_two();
    cr_assert_eq(do_remove(0x1111), 0);
    kvt_store_put(&t, "k", "v", 0);
    char src[300], dst[300];
    snprintf(src, sizeof(src), "%s/data.mdb", t.dir);
    snprintf(dst, sizeof(dst), "%s-restored", t.dir);
    struct stat sb;
    cr_assert_eq(stat(src, &sb), 0);
    char msg[256] = "";
    cr_assert_eq(kv_snapshot_restore_dir(src, sb.st_size, dst, msg, sizeof(msg)), 0, "%s", msg);
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = dst;
    kv_store *r;
    cr_assert_eq(kv_store_open(&r, &sc), 0);
    Kvdpb__Member **v;
    size_t n;
    cr_assert_eq(kv_store_members_list(r, &v, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(kv_store_member_is_removed(r, 0x1111), 0);
    kv_store_close(r);
    cr_assert_eq(kvt_rmtree(dst), 0);
}

/* Past KV_MEMBERS_MAX an add is refused with a kvd row plus a detail (the limit): the value
 * is KV_ERR_TOO_MANY_MEMBERS, the text clients see "kvd: too many members (limit 64)". */
Test(mvcc_members, an_add_past_the_limit_is_a_value_with_a_detail)
{
    bootstrap_two();
    char msg[160];
    char urls[KV_MEMBERS_MAX][32];
    for (int i = 3; i <= KV_MEMBERS_MAX; i++) { /* members 3 .. 64 */
        char *u = urls[i - 1];
        snprintf(u, sizeof(urls[0]), "http://10.1.0.%d:2380", i);
        Kvdpb__Member m;
        mk(&m, 0, "", &u, 1);
        int code = change(KV_MEMBER_OP_ADD, 0x10000 + (uint64_t)i, &m, msg);
        cr_assert_eq(code, 0, "member %d: %s", i, msg);
    }
    char *u = "http://10.2.0.1:2380";
    Kvdpb__Member m;
    mk(&m, 0, "", &u, 1);
    chg c = {KV_MEMBER_OP_ADD, 0x99999, &m, {0}};
    cr_assert_eq(in_batch(chg_fn, &c), 0);
    cr_assert_eq(c.res.err, KV_ERR_TOO_MANY_MEMBERS);
    cr_assert_str_eq(c.res.detail, " (limit 64)");
    cr_assert_eq(KVT_STORE_CODE(c.res), KV_GRPC_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(KVT_STORE_MSG(c.res), "kvd: too many members (limit 64)");
}

/* A MemberAdd's record waits for its configuration entry in the store (members.h
 * kv_store_member_stage): it survives a reopen (the member restarted between the two
 * entries), is taken once, and at most KV_MEMBERS_MAX_STAGED wait (the one staged by the
 * oldest entry goes). */
struct stage_arg {
    uint64_t id, index; /* the member, and the log index of the entry that stages it */
};

static int stage_fn(kv_store_batch *b, void *arg)
{
    const struct stage_arg *a = arg;
    Kvdpb__Member m;
    char name[32];
    snprintf(name, sizeof(name), "m%llx", (unsigned long long)a->id);
    mk(&m, a->id, name, peer_c, 1);
    uint8_t buf[256];
    size_t len = kvdpb__member__pack(&m, buf);
    return kv_store_member_stage(t.s, b, a->id, a->index, buf, len);
}

struct take_arg {
    uint64_t id;
    char name[32];
};

static int take_fn(kv_store_batch *b, void *arg)
{
    struct take_arg *a = arg;
    uint8_t *rec = NULL;
    size_t len = 0;
    int rc = kv_store_member_take_staged(t.s, b, a->id, &rec, &len);
    a->name[0] = 0;
    if (rc == 0) {
        Kvdpb__Member *m = kvdpb__member__unpack(NULL, len, rec);
        cr_assert_not_null(m);
        snprintf(a->name, sizeof(a->name), "%s", m->name);
        kvdpb__member__free_unpacked(m, NULL);
        free(rec);
    }
    return rc;
}

Test(mvcc_members, a_staged_record_survives_a_restart_and_is_taken_once)
{
    struct stage_arg s = {0x4444, 7};
    cr_assert_eq(in_batch(stage_fn, &s), 0);
    kvt_store_reopen(&t);
    struct take_arg a = {0x4444, ""};
    cr_assert_eq(in_batch(take_fn, &a), 0);
    cr_assert_str_eq(a.name, "m4444");
    cr_assert_eq(in_batch(take_fn, &a), -ENOENT, "taken twice");
    a.id = 0x5555;
    cr_assert_eq(in_batch(take_fn, &a), -ENOENT);
    /* bounded: one past the bound pushes out the record of the oldest entry, here the one
     * of the highest id (an abandoned change), never a newer one */
    s = (struct stage_arg){0x1ff, 10};
    cr_assert_eq(in_batch(stage_fn, &s), 0);
    for (uint64_t i = 1; i <= KV_MEMBERS_MAX_STAGED; i++) {
        s = (struct stage_arg){0x100 + i, 10 + i};
        cr_assert_eq(in_batch(stage_fn, &s), 0);
    }
    a.id = 0x1ff;
    cr_assert_eq(in_batch(take_fn, &a), -ENOENT, "the oldest entry's record was kept");
    for (uint64_t i = 1; i <= KV_MEMBERS_MAX_STAGED; i++) {
        a.id = 0x100 + i;
        cr_assert_eq(in_batch(take_fn, &a), 0, "%llx lost", (unsigned long long)a.id);
    }
    /* a record over the limits is not staged */
    static uint8_t big[16384]; /* over MEMBER_REC_MAX (members.c), about 9 KB */
    memset(big, 0, sizeof(big));
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    cr_assert_eq(kv_store_member_stage(t.s, b, 0x6666, 1, big, sizeof(big)), -EINVAL);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
}
