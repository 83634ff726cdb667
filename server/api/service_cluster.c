/*
 * service_cluster: etcdserverpb.Cluster (etcd 3.4 etcdserver/api/v3rpc/member.go,
 * etcdserver/server.go, membership/cluster.go).
 *
 * The membership is the store's members table (mvcc/members.h). Before it is initialised
 * (main bootstraps it from the flags, members_boot.h) MemberList answers from the flags.
 * This member is serving, so it is started: while its own record has no client URLs (its
 * publish has not applied) the list shows the client URLs (and name) of its flags.
 *
 * Changes: MemberAdd/Remove/Promote are raft configuration changes (kv_node_change_member);
 * MemberUpdate is an ordered member_update request (kv_node_propose; mvcc/members.c applies
 * it); its URLs are checked here too (etcd 3.4 leaves that to clientv3). The checks etcd makes
 * before proposing (URLs, --strict-reconfig-check's started-member quorum) and the ones its apply
 * makes (id exists/removed, peer URL in use, learner count, promote of a voter) are made here
 * against the committed table, with etcd's errors; the node re-validates a change when it applies
 * (two concurrent changes). Health of the peers
 * ("etcdserver: unhealthy cluster") and learner catch-up are the node's checks.
 * Responses carry the header etcd's ClusterServer gives (cluster id, member id, raft term; no
 * revision) and the members after the change.
 * Loop thread only. A call cancelled while its change is in flight: the change still applies,
 * the completion finds no call and only frees its context.
 */
#include "api/member_urls.h"
#include "api/services.h"
#include "internal.pb-c.h"
#include "mvcc/members.h"
#include "pb/pb_strip.h"
#include "peer/peer_net.h"
#include "rpc.pb-c.h"
#include "api/api.h"

#include <errno.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert((int)KV_NODE_MEMBER_ADD == (int)KV_MEMBER_OP_ADD &&
                   (int)KV_NODE_MEMBER_ADD_LEARNER == (int)KV_MEMBER_OP_ADD_LEARNER &&
                   (int)KV_NODE_MEMBER_REMOVE == (int)KV_MEMBER_OP_REMOVE &&
                   (int)KV_NODE_MEMBER_PROMOTE == (int)KV_MEMBER_OP_PROMOTE,
               "node.h and mvcc/members.h agree on the membership change ops");

/* ---- the member list ---- */

typedef struct mlist {
    Kvdpb__Member **m;
    size_t n;
} mlist;

/* The committed table, or the flags' view while the table is empty. */
static int mlist_load(kv_api *s, mlist *l)
{
    int rc = kv_store_members_list(s->store, &l->m, &l->n);
    if (rc == 0 && l->n == 0)
        rc = s->flags_members(s->flags_members_arg, &l->m, &l->n);
    return rc;
}

static void mlist_free(mlist *l)
{
    kv_store_members_free(l->m, l->n);
    l->m = NULL;
    l->n = 0;
}

static const Kvdpb__Member *mlist_find(const mlist *l, uint64_t id)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->m[i]->id == id)
            return l->m[i];
    return NULL;
}

static int started(const Kvdpb__Member *m, uint64_t self)
{
    return m->id == self || (m->name && m->name[0]);
}

/* etcd RaftCluster.IsReadyToAddVotingMember / IsReadyToRemoveVotingMember /
 * IsReadyToPromoteMember: the started voters must keep a quorum of the new configuration. */
enum { READY_ADD, READY_REMOVE, READY_PROMOTE };
static int ready(const mlist *l, int what, uint64_t id, uint64_t self)
{
    int nmembers = what == READY_REMOVE ? 0 : 1, nstarted = what == READY_PROMOTE ? 1 : 0;
    for (size_t i = 0; i < l->n; i++) {
        const Kvdpb__Member *m = l->m[i];
        if (m->is_learner || (what == READY_REMOVE && m->id == id))
            continue;
        nstarted += started(m, self);
        nmembers++;
    }
    if (what == READY_ADD && nstarted == 1 && nmembers == 2)
        return 1; /* adding a member to a 1-member cluster (etcd: restoring cluster data) */
    return nstarted >= nmembers / 2 + 1;
}

/* 1 if this member has a live peer connection to voter m (itself counts: etcd's
 * numConnectedSince). A single member has no peer transport: only itself. */
static int connected(const kv_api *s, const Kvdpb__Member *m)
{
    if (m->id == s->member_id)
        return 1;
    return s->peers != NULL && kv_peer_net_is_up(s->peers, m->id);
}

/* etcd mayAddMember's isConnectedFullySince: every voter is connected. */
static int fully_connected(const kv_api *s, const mlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (!l->m[i]->is_learner && !connected(s, l->m[i]))
            return 0;
    return 1;
}

/* etcd mayRemoveMember: removing a connected voter must leave a connected quorum of the
 * remaining voters ((active - 1) >= 1 + (voters - 1) / 2); a voter that is down is safe to
 * remove (it is not part of the active quorum). */
static int remove_keeps_quorum(const kv_api *s, const mlist *l, uint64_t id)
{
    int voters = 0, active = 0, target_up = 0;
    for (size_t i = 0; i < l->n; i++) {
        const Kvdpb__Member *m = l->m[i];
        if (m->is_learner)
            continue;
        voters++;
        int up = connected(s, m);
        active += up;
        if (m->id == id)
            target_up = up;
    }
    if (!target_up && id != s->member_id)
        return 1;
    return active - 1 >= 1 + (voters - 1) / 2;
}

/* Borrowed etcdserverpb view of a list (pointers into l and s->cfg). */
typedef struct pb_list {
    Etcdserverpb__Member *m;
    Etcdserverpb__Member **p;
    char *self_urls[KV_API_MAX_URLS];
    size_t n;
} pb_list;

static int pb_list_make(kv_api *s, const mlist *l, pb_list *out)
{
    memset(out, 0, sizeof(*out));
    if (l->n == 0)
        return 0;
    out->m = calloc(l->n, sizeof(*out->m));
    out->p = calloc(l->n, sizeof(*out->p));
    if (!out->m || !out->p) {
        free(out->m);
        free(out->p);
        return -ENOMEM;
    }
    const kv_api_config *cfg = s->cfg;
    for (size_t i = 0; i < cfg->n_advertise_client && i < KV_API_MAX_URLS; i++)
        out->self_urls[i] = (char *)cfg->advertise_client[i];
    for (size_t i = 0; i < l->n; i++) {
        const Kvdpb__Member *k = l->m[i];
        Etcdserverpb__Member *m = &out->m[i];
        etcdserverpb__member__init(m);
        m->id = k->id;
        m->name = k->name;
        m->peerurls = k->peer_urls;
        m->n_peerurls = k->n_peer_urls;
        m->clienturls = k->client_urls;
        m->n_clienturls = k->n_client_urls;
        m->islearner = k->is_learner;
        if (k->id == s->member_id && k->n_client_urls == 0) {
            if (!k->name || !k->name[0])
                m->name = (char *)cfg->name; /* serving, so started (see the top) */
            m->clienturls = out->self_urls;
            m->n_clienturls = cfg->n_advertise_client;
        }
        out->p[i] = m;
    }
    out->n = l->n;
    return 0;
}

static void pb_list_free(pb_list *p)
{
    free(p->m);
    free(p->p);
}

static void reply_load_error(kv_grpc_call *call, int rc)
{
    kv_reply_etcd_err(call, rc == -EBADMSG ? KV_ERR_CORRUPT : KV_ERR_STORAGE);
}

/* Answers header + members (MemberList/Remove/Update/Promote responses share this wire
 * layout: header = 1, members = 2). added: MemberAdd's member (MemberAddResponse). */
static void reply_members(kv_grpc_call *call, const Etcdserverpb__Member *added)
{
    kv_api *s = kv_grpc_call_app(call);
    mlist l = {0};
    pb_list p;
    int rc = mlist_load(s, &l);
    if (rc) {
        reply_load_error(call, rc);
        return;
    }
    if (pb_list_make(s, &l, &p)) {
        mlist_free(&l);
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        return;
    }
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    kv_fill_header(call, &h, 0);
    if (added) {
        Etcdserverpb__MemberAddResponse r = ETCDSERVERPB__MEMBER_ADD_RESPONSE__INIT;
        r.header = &h;
        r.member = (Etcdserverpb__Member *)added;
        r.members = p.p;
        r.n_members = p.n;
        kv_reply_message(call, &r.base);
    } else {
        Etcdserverpb__MemberListResponse r = ETCDSERVERPB__MEMBER_LIST_RESPONSE__INIT;
        r.header = &h;
        r.members = p.p;
        r.n_members = p.n;
        kv_reply_message(call, &r.base);
    }
    pb_list_free(&p);
    mlist_free(&l);
}

static void *unpack(kv_grpc_call *call, const ProtobufCMessageDescriptor *d, const uint8_t *msg,
                    size_t len)
{
    void *r = kv_pb_unpack(d, msg, len);
    if (!r)
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
    return r;
}

static void on_member_list(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__MemberListRequest *req =
        unpack(call, &etcdserverpb__member_list_request__descriptor, msg, len);
    if (!req)
        return;
    etcdserverpb__member_list_request__free_unpacked(req, NULL);
    reply_members(call, NULL);
}

/* ---- changes in flight ---- */

typedef struct change_ctx {
    kv_grpc_call *call; /* NULL once the client went away */
    int add;            /* MemberAdd: answer with the new member */
    uint64_t id;
    int learner;
    char *urls[KV_MEMBER_MAX_URLS];
    size_t n_urls;
} change_ctx;

static void ctx_free(change_ctx *c)
{
    kv_member_urls_free(c->urls, c->n_urls);
    free(c);
}

static void on_change_done(void *arg, kv_result *res)
{
    change_ctx *c = arg;
    if (c->call) {
        kv_grpc_call_set_data(c->call, NULL);
        if (res->err != KV_ERR_NONE) {
            kv_reply_result_err(c->call, res);
        } else if (c->add) {
            Etcdserverpb__Member m = ETCDSERVERPB__MEMBER__INIT;
            m.id = c->id;
            m.peerurls = c->urls;
            m.n_peerurls = c->n_urls;
            m.islearner = c->learner;
            reply_members(c->call, &m);
        } else {
            reply_members(c->call, NULL);
        }
    }
    ctx_free(c);
}

static void on_change_cancel(kv_grpc_call *call)
{
    change_ctx *c = kv_grpc_call_data(call);
    if (c)
        c->call = NULL;
}

static void reply_node_error(kv_grpc_call *call, int rc)
{
    if (rc == -ENOTSUP)
        kv_reply_etcd_err(call, KV_ERR_MEMBERSHIP_NO_NODE);
    else
        kv_reply_propose_error(call, rc);
}

/* Hands c to the node (which owns record); on failure answers and frees c. */
static void start_change(kv_grpc_call *call, change_ctx *c, int op, uint8_t *record, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    c->call = call;
    kv_grpc_call_set_data(call, c);
    int rc = kv_node_change_member(s->node, op, c->id, record, len, on_change_done, c);
    if (rc < 0) {
        kv_grpc_call_set_data(call, NULL);
        ctx_free(c);
        reply_node_error(call, rc);
    }
}

static change_ctx *ctx_new(kv_grpc_call *call)
{
    change_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
    return c;
}

/* ---- MemberAdd ---- */

/* The new member's id, drawn here by the proposer and carried in the member record (the
 * apply takes it from the entry: a pure function of the log). First choice: SHA-1 of the
 * sorted peer URLs and the cluster token, exactly as the member itself derives it at start
 * (identity.c), so a member started with --initial-cluster-state existing and the same
 * --initial-cluster-token knows its id without asking the cluster. When that id is taken or
 * was removed (a failed member replaced on the same host and port: remove, wipe, add), the
 * id mixes in the time and random bytes, as etcd does, and is drawn again while it collides
 * with a current or removed member; the joiner is then started with --initial-member-id
 * (the id `member add` printed). 0: no free id found. */
static uint64_t new_member_id(kv_api *s, const mlist *l, char *const *urls, size_t n,
                              const char *token)
{
    uint64_t id = kv_members_compute_id((const char *const *)urls, n, token);
    for (int attempt = 0; attempt < 16; attempt++) {
        if (id != 0 && !mlist_find(l, id) && kv_store_member_is_removed(s->store, id) == 0)
            return id;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned char rnd[8] = {0};
        if (RAND_bytes(rnd, sizeof(rnd)) != 1)
            memset(rnd, attempt, sizeof(rnd));
        char salted[256]; /* kv_members_compute_id hashes 255 bytes of it */
        snprintf(salted, sizeof(salted), "%.200s/%lld.%09ld/%02x%02x%02x%02x%02x%02x%02x%02x",
                 token, (long long)ts.tv_sec, ts.tv_nsec, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5], rnd[6], rnd[7]);
        id = kv_members_compute_id((const char *const *)urls, n, salted);
    }
    return 0;
}

/* The peer URLs may not be in use: 0 or the error answered (returns 1). */
static int check_urls_free(kv_grpc_call *call, const mlist *l, const change_ctx *c)
{
    for (size_t i = 0; i < l->n; i++)
        for (size_t j = 0; j < l->m[i]->n_peer_urls; j++)
            for (size_t k = 0; k < c->n_urls; k++)
                if (strcmp(l->m[i]->peer_urls[j], c->urls[k]) == 0) {
                    kv_reply_etcd_err(call, KV_ERR_PEER_URL_EXIST);
                    return 1;
                }
    return 0;
}

/* etcd ValidateConfigurationChange for an add: 0 or the error answered (returns 1). */
static int check_add(kv_grpc_call *call, kv_api *s, const mlist *l, const change_ctx *c)
{
    if (kv_store_member_is_removed(s->store, c->id) == 1) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_NOT_FOUND); /* ErrIDRemoved */
        return 1;
    }
    /* Peer URLs before the id: ids derive from the URLs (new_member_id), so a URL in use would
     * otherwise show up as "member ID already exist". */
    size_t learners = 0;
    for (size_t i = 0; i < l->n; i++) {
        learners += l->m[i]->is_learner;
        for (size_t j = 0; j < l->m[i]->n_peer_urls; j++)
            for (size_t k = 0; k < c->n_urls; k++)
                if (strcmp(l->m[i]->peer_urls[j], c->urls[k]) == 0) {
                    kv_reply_etcd_err(call, KV_ERR_PEER_URL_EXIST);
                    return 1;
                }
    }
    if (mlist_find(l, c->id)) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_EXIST);
        return 1;
    }
    if (c->learner && learners + 1 > KV_MEMBERS_MAX_LEARNERS) {
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_LEARNERS);
        return 1;
    }
    if (l->n >= KV_MEMBERS_MAX) {
        char d[32];
        snprintf(d, sizeof(d), " (limit %d)", KV_MEMBERS_MAX);
        kv_reply_etcd_err_detail(call, KV_ERR_TOO_MANY_MEMBERS, d);
        return 1;
    }
    return 0;
}

static void on_member_add(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    Etcdserverpb__MemberAddRequest *req =
        unpack(call, &etcdserverpb__member_add_request__descriptor, msg, len);
    if (!req)
        return;
    change_ctx *c = ctx_new(call);
    mlist l = {0};
    uint8_t *record = NULL;
    if (!c)
        goto done;
    int rc = kv_member_urls_parse(req->peerurls, req->n_peerurls, c->urls, KV_MEMBER_MAX_URLS);
    if (rc == -ENOMEM) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        goto done;
    }
    if (rc < 0) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_BAD_URLS);
        goto done;
    }
    c->n_urls = req->n_peerurls;
    c->learner = req->islearner;
    c->add = 1;
    for (size_t i = 0; i < c->n_urls; i++)
        if (strlen(c->urls[i]) > KV_MEMBER_MAX_STR) {
            kv_reply_etcd_err(call, KV_ERR_MEMBER_BAD_URLS);
            goto done;
        }
    if ((rc = mlist_load(s, &l))) {
        reply_load_error(call, rc);
        goto done;
    }
    /* --strict-reconfig-check (etcd's default): mayAddMember. */
    if (s->cfg->strict_reconfig_check && !c->learner && !ready(&l, READY_ADD, 0, s->member_id)) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_NOT_ENOUGH_STARTED);
        goto done;
    }
    if (s->cfg->strict_reconfig_check && !fully_connected(s, &l)) {
        kv_reply_etcd_err(call, KV_ERR_UNHEALTHY);
        goto done;
    }
    if (check_urls_free(call, &l, c))
        goto done;
    c->id = new_member_id(s, &l, c->urls, c->n_urls, s->cfg->initial_cluster_token);
    if (c->id == 0) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_EXIST);
        goto done;
    }
    if (check_add(call, s, &l, c))
        goto done;
    Kvdpb__Member m = KVDPB__MEMBER__INIT;
    m.id = c->id;
    m.peer_urls = c->urls;
    m.n_peer_urls = c->n_urls;
    m.is_learner = c->learner;
    size_t rlen = kvdpb__member__get_packed_size(&m);
    if (!(record = malloc(rlen ? rlen : 1))) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        goto done;
    }
    kvdpb__member__pack(&m, record);
    start_change(call, c, c->learner ? KV_NODE_MEMBER_ADD_LEARNER : KV_NODE_MEMBER_ADD, record,
                 rlen);
    c = NULL; /* owned by start_change */
done:
    if (c)
        ctx_free(c);
    mlist_free(&l);
    etcdserverpb__member_add_request__free_unpacked(req, NULL);
}

/* ---- MemberRemove / MemberPromote ---- */

static void on_member_remove(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    Etcdserverpb__MemberRemoveRequest *req =
        unpack(call, &etcdserverpb__member_remove_request__descriptor, msg, len);
    if (!req)
        return;
    uint64_t id = req->id;
    etcdserverpb__member_remove_request__free_unpacked(req, NULL);
    mlist l = {0};
    int rc = mlist_load(s, &l);
    if (rc) {
        reply_load_error(call, rc);
        return;
    }
    const Kvdpb__Member *m = mlist_find(&l, id);
    /* mayRemoveMember: removing a voter must leave a started quorum. */
    if (s->cfg->strict_reconfig_check && !(m && m->is_learner) &&
        !ready(&l, READY_REMOVE, id, s->member_id)) {
        mlist_free(&l);
        kv_reply_etcd_err(call, KV_ERR_MEMBER_NOT_ENOUGH_STARTED);
        return;
    }
    if (s->cfg->strict_reconfig_check && !(m && m->is_learner) && !remove_keeps_quorum(s, &l, id)) {
        mlist_free(&l);
        kv_reply_etcd_err(call, KV_ERR_UNHEALTHY);
        return;
    }
    mlist_free(&l);
    if (!m) { /* ErrIDNotFound / ErrIDRemoved */
        kv_reply_etcd_err(call, KV_ERR_MEMBER_NOT_FOUND);
        return;
    }
    change_ctx *c = ctx_new(call);
    if (!c)
        return;
    c->id = id;
    start_change(call, c, KV_NODE_MEMBER_REMOVE, NULL, 0);
}

static void on_member_promote(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    Etcdserverpb__MemberPromoteRequest *req =
        unpack(call, &etcdserverpb__member_promote_request__descriptor, msg, len);
    if (!req)
        return;
    uint64_t id = req->id;
    etcdserverpb__member_promote_request__free_unpacked(req, NULL);
    mlist l = {0};
    int rc = mlist_load(s, &l);
    if (rc) {
        reply_load_error(call, rc);
        return;
    }
    const Kvdpb__Member *m = mlist_find(&l, id);
    int is_ready = !s->cfg->strict_reconfig_check || ready(&l, READY_PROMOTE, id, s->member_id);
    int learner = m && m->is_learner;
    mlist_free(&l);
    if (!is_ready) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_NOT_ENOUGH_STARTED);
        return;
    }
    if (!m) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_NOT_FOUND);
        return;
    }
    if (!learner) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_NOT_LEARNER);
        return;
    }
    change_ctx *c = ctx_new(call);
    if (!c)
        return;
    c->id = id;
    start_change(call, c, KV_NODE_MEMBER_PROMOTE, NULL, 0);
}

/* ---- MemberUpdate: an ordered member_update request ---- */

static void on_member_update(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    /* MemberUpdateRequest and kvdpb.MemberUpdate have the same fields (id 1, peer URLs 2). */
    Kvdpb__MemberUpdate *u = unpack(call, &kvdpb__member_update__descriptor, msg, len);
    if (!u)
        return;
    change_ctx *c = NULL;
    uint8_t *buf = NULL;
    if (u->n_peer_urls > KV_MEMBER_MAX_URLS) {
        char d[32];
        snprintf(d, sizeof(d), " (limit %d)", KV_MEMBER_MAX_URLS);
        kv_reply_etcd_err_detail(call, KV_ERR_TOO_MANY_PEER_URLS, d);
        goto done;
    }
    /* etcd 3.4 leaves this check to clientv3 (types.NewURLs); kvd also makes it here so that
     * a raw client cannot store peer URLs the transport cannot dial. */
    int rc = kv_member_urls_parse(u->peer_urls, u->n_peer_urls, NULL, 0);
    if (rc < 0) {
        kv_reply_etcd_err(call, KV_ERR_MEMBER_BAD_URLS);
        goto done;
    }
    if (!(c = ctx_new(call)))
        goto done;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_UPDATE;
    ir.member_update = u;
    size_t n = kvdpb__internal_request__get_packed_size(&ir);
    if (!(buf = malloc(n))) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        goto done;
    }
    kvdpb__internal_request__pack(&ir, buf);
    c->call = call;
    c->id = u->id;
    kv_grpc_call_set_data(call, c);
    rc = kv_node_propose(s->node, buf, n, on_change_done, c, NULL);
    buf = NULL; /* the node owns it in every case */
    if (rc < 0) {
        kv_grpc_call_set_data(call, NULL);
        reply_node_error(call, rc);
        goto done;
    }
    c = NULL;
done:
    if (c)
        ctx_free(c);
    free(buf);
    kvdpb__member_update__free_unpacked(u, NULL);
}

const kv_grpc_method kv_service_cluster[] = {
    {"/etcdserverpb.Cluster/MemberList", 0, on_member_list, NULL, NULL},
    {"/etcdserverpb.Cluster/MemberAdd", 0, on_member_add, NULL, on_change_cancel},
    {"/etcdserverpb.Cluster/MemberRemove", 0, on_member_remove, NULL, on_change_cancel},
    {"/etcdserverpb.Cluster/MemberUpdate", 0, on_member_update, NULL, on_change_cancel},
    {"/etcdserverpb.Cluster/MemberPromote", 0, on_member_promote, NULL, on_change_cancel},
};
const size_t kv_service_cluster_len = sizeof(kv_service_cluster) / sizeof(kv_service_cluster[0]);
