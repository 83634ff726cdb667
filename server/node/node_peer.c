/*
 * node_peer.c: the node's side of the peer transport (server/peer/peer_net.h).
 *
 * Out: raft messages (rd.msgs / rd.msgs_after), proposals forwarded to the leader, read-index
 * requests and answers. In: the same, from kv_node_on_peer_message. Nothing here blocks or
 * grows without bound: the transport drops when a peer's queue is full (raft retransmits), the
 * inbox of raft messages is bounded in messages and bytes (--max-raft-inbox-messages,
 * --max-raft-inbox-bytes; drops are counted and logged), linearizable reads waiting here and
 * followers' read-index requests on the leader are each bounded by --max-pending-read-index
 * ("etcdserver: too many requests"), proposals forwarded and not yet applied by
 * --max-forwarded-proposals (node_ready.c take_requests).
 *
 * ReadIndex (reads): linearizable reads of this member gather in reads_new; one round
 * at a time asks for a read index (the leader: raft_read_index, confirmed by one heartbeat
 * quorum for the whole round; a follower: a READ_REQ to the leader, which batches the
 * followers' requests into its own rounds). When the index is known the round's reads wait
 * until this member applied it, then proceed.
 */
#include "node/node_int.h"

#include "peer/peer_net.h"
#include "raft.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kv_node__send_snapshot(kv_node *n, const struct raft_msg *m);
int kv_node__propose_forwarded(kv_node *n, const uint8_t *data, size_t len);

void kv_node__send_msgs(kv_node *n, const struct raft_msg *m, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (n->peers == NULL || m[i].to == n->self)
            continue;
        if (m[i].type == RAFT_MSG_SNAPSHOT) {
            kv_node__send_snapshot(n, &m[i]);
            continue;
        }
        uint8_t *buf = NULL;
        size_t len = 0;
        if (kv_raft_msg_encode(&m[i], &buf, &len) != 0)
            continue; /* out of memory: raft retransmits */
        /* Heartbeats and their answers go ahead of appends (the peer's priority queue, as
         * etcd's separate message stream): leadership is confirmed by them
         * (kv_node_lease_live), and a write flood must not delay that by its queue. Raft
         * allows the reordering: a heartbeat's commit is capped at the follower's match. */
        int hb = m[i].type == RAFT_MSG_HEARTBEAT || m[i].type == RAFT_MSG_HEARTBEAT_RESP;
        int rc = hb ? kv_peer_net_send_prio(n->peers, m[i].to, KV_PEER_T_RAFT, buf, len)
                    : kv_peer_net_send(n->peers, m[i].to, KV_PEER_T_RAFT, buf, len);
        free(buf);
        if (rc == -EAGAIN || rc == -ENOTCONN)
            n->unreachable[n->n_unreachable < 16 ? n->n_unreachable++ : 15] = m[i].to;
        if (rc < 0 && m[i].type == RAFT_MSG_HEARTBEAT)
            kv_metric_inc(n->m_heartbeat_failures);
    }
}

static int send_pb(kv_node *n, uint64_t to, uint32_t type, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return -ENOMEM;
    protobuf_c_message_pack(msg, buf);
    int rc = kv_peer_net_send(n->peers, to, type, buf, len);
    free(buf);
    return rc;
}

int kv_node__forward(kv_node *n, kv_node_req *r)
{
    Kvdraftpb__Forward f = KVDRAFTPB__FORWARD__INIT;
    f.id = r->id;
    f.data.data = r->data;
    f.data.len = r->len;
    int rc = send_pb(n, n->leader, KV_PEER_T_FORWARD, &f.base);
    if (rc == 0)
        kv_metric_inc(n->m_forwarded);
    return rc;
}

/* Sends the proposer of forward id the refusal e. */
static void send_forward_resp(kv_node *n, uint64_t to, uint64_t id, kv_etcd_err e)
{
    Kvdraftpb__ForwardResp fr = KVDRAFTPB__FORWARD_RESP__INIT;
    fr.id = id;
    fr.code = kv_etcd_err_peer_code(e); /* etcd_errors.h: for members of earlier versions */
    fr.msg = (char *)kv_etcd_err_msg(e);
    (void)send_pb(n, to, KV_PEER_T_FORWARD_RESP, &fr.base);
}

void kv_node__forward_refused(kv_node *n, const kv_node_req *r, kv_etcd_err e)
{
    uint64_t id, proposer;
    kv_node__entry_origin(r->data, r->len, &id, &proposer);
    if (id == 0 || proposer == 0 || proposer == n->self)
        return;
    send_forward_resp(n, proposer, id, e == KV_ERR_NONE ? KV_ERR_LEADER_CHANGED : e);
}

static void on_forward(kv_node *n, uint64_t from, const uint8_t *buf, size_t len)
{
    Kvdraftpb__Forward *f = kvdraftpb__forward__unpack(NULL, len, buf);
    if (f == NULL)
        return;
    int rc = -EAGAIN;
    if (n->role == RAFT_LEADER)
        rc = kv_node__propose_forwarded(n, f->data.data, f->data.len);
    if (rc < 0)
        send_forward_resp(n, from, f->id,
                          rc == -EBUSY ? KV_ERR_TOO_MANY_REQUESTS : KV_ERR_LEADER_CHANGED);
    kvdraftpb__forward__free_unpacked(f, NULL);
}

/* The leader refused a forwarded proposal: fail its waiter now. */
static void on_forward_resp(kv_node *n, const uint8_t *buf, size_t len)
{
    Kvdraftpb__ForwardResp *fr = kvdraftpb__forward_resp__unpack(NULL, len, buf);
    if (fr == NULL)
        return;
    /* the error travels as its text (etcd_errors.h kv_etcd_err_peer_code); a text this
     * version does not know (none is sent today) fails the request as a lost proposal */
    const char *detail = NULL;
    kv_etcd_err e = kv_etcd_err_parse(fr->msg, &detail);
    if (e == KV_ERR_NONE) {
        e = KV_ERR_LEADER_CHANGED;
        detail = NULL;
    }
    kv_list *it;
    kv_list_foreach(it, &n->wait) {
        kv_node_req *r = kv_node__req(it);
        if (r->id != fr->id)
            continue;
        kv_list_remove(&r->link);
        kv_node__unwait(n, r);
        kv_node__fail_req(n, r, e, detail);
        break;
    }
    kv_node__conf_fail_waiter(n, fr->id, e, detail);
    kvdraftpb__forward_resp__free_unpacked(fr, NULL);
}

/* ---- reads ---- */

int kv_node_read_index(kv_node *n, void (*done)(void *arg, int status), void *arg)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (n->reads_waiting >= n->max_reads) {
        kv_metric_inc(n->m_reads_refused);
        return -EBUSY;
    }
    read_waiter *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->done = done;
    w->arg = arg;
    w->deadline_ms = kv_node__now_ms() + n->request_timeout_ms;
    kv_list_insert_head(&n->reads_new, &w->link);
    n->reads_waiting++;
    kv_node__kick(n);
    return 0;
}

/* Each waiter in turn goes to the front of `to` (the order the lists have always had). */
static void move_all(kv_list *from, kv_list *to, uint64_t ctx)
{
    kv_list *e;
    while ((e = kv_list_head(from))) {
        kv_list_remove(e);
        kv_list_data(e, read_waiter, link)->ctx = ctx;
        kv_list_insert_head(to, e);
    }
}

/* The round `ctx` got read index `index`. */
static void round_done(kv_node *n, uint64_t ctx, raft_index index)
{
    if (ctx == 0 || ctx != n->round_ctx)
        return;
    kv_list *e;
    kv_list_foreach(e, &n->reads_round)
        kv_list_data(e, read_waiter, link)->index = index;
    move_all(&n->reads_round, &n->reads_apply, ctx);
    n->round_ctx = 0;
}

/* Leader: remembers round ctx, started now, for the confirmation (kv_node_lease_live). */
static void confirm_push(kv_node *n, uint64_t ctx, uint64_t now)
{
    unsigned k = n->confirm_next++ % (sizeof(n->confirm) / sizeof(n->confirm[0]));
    n->confirm[k].ctx = ctx;
    n->confirm[k].started_ms = now;
    n->confirm[k].term = raft_current_term(&n->raft);
    n->confirm_last_ms = now;
    n->confirm_last_term = n->confirm[k].term;
}

void kv_node__reads_drive(kv_node *n)
{
    uint64_t now = kv_node__now_ms();
    kv_list *e;
    if (n->confirm_wanted && n->role == RAFT_LEADER) {
        /* its own round, beside the reads' one (which waits for the one in flight): on a slow
         * link a request waits for one round trip after its arrival, not for two */
        uint64_t ctx = ++n->next_ctx;
        if (raft_read_index(&n->raft, ctx) == 0) {
            n->confirm_wanted = 0;
            confirm_push(n, ctx, now);
            kv_list_foreach(e, &n->rreads) {
                remote_read *rr = kv_list_data(e, remote_read, link);
                if (rr->our_ctx == 0)
                    rr->our_ctx = ctx;
            }
        } /* else RAFT_EAGAIN (no entry of our term committed yet) or EBUSY: next turn */
    }
    if (n->round_ctx && now - n->round_started_ms > n->election_ms) {
        move_all(&n->reads_round, &n->reads_new, 0); /* lost (leader change): ask again */
        n->round_ctx = 0;
    }
    int remote = 0;
    kv_list_foreach(e, &n->rreads)
        remote |= kv_list_data(e, remote_read, link)->our_ctx == 0;
    if (n->round_ctx || (kv_list_empty(&n->reads_new) && !remote))
        return;
    uint64_t ctx = ++n->next_ctx;
    if (n->role == RAFT_LEADER) {
        int rc = raft_read_index(&n->raft, ctx);
        if (rc != 0)
            return; /* RAFT_EAGAIN: no entry of our term committed yet; retried next turn */
        kv_list_foreach(e, &n->rreads) {
            remote_read *rr = kv_list_data(e, remote_read, link);
            if (rr->our_ctx == 0)
                rr->our_ctx = ctx;
        }
        confirm_push(n, ctx, now);
        if (kv_list_empty(&n->reads_new))
            return; /* a round for followers only */
    } else if (n->leader && n->peers) {
        Kvdraftpb__ReadIndexReq q = KVDRAFTPB__READ_INDEX_REQ__INIT;
        q.ctx = ctx;
        if (send_pb(n, n->leader, KV_PEER_T_READ_REQ, &q.base) != 0)
            return;
    } else {
        return;
    }
    n->round_ctx = ctx;
    n->round_started_ms = now;
    move_all(&n->reads_new, &n->reads_round, ctx);
}

/* Raft released our round ctx: a quorum acknowledged this leader after the round started
 * (kv_node_lease_live). Batches waiting for that are served now, not a timer period later. */
static void confirmed(kv_node *n, uint64_t ctx)
{
    uint64_t term = raft_current_term(&n->raft);
    int newer = 0;
    for (size_t k = 0; k < sizeof(n->confirm) / sizeof(n->confirm[0]); k++) {
        if (n->confirm[k].ctx == 0 || n->confirm[k].ctx > ctx)
            continue;
        /* raft releases rounds in order: this one covers every earlier one */
        if (n->role == RAFT_LEADER && n->confirm[k].term == term &&
            (n->confirm_term != term || n->confirm[k].started_ms > n->confirm_ms)) {
            n->confirm_ms = n->confirm[k].started_ms;
            n->confirm_term = term;
            newer = 1;
        }
        n->confirm[k].ctx = 0;
    }
    if (newer && n->applied_fn)
        n->applied_fn(n->applied_arg, n->st.applied_index);
}

void kv_node__reads_ready(kv_node *n, const struct raft_read_state *rs, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        confirmed(n, rs[i].ctx);
        round_done(n, rs[i].ctx, rs[i].index);
        kv_list *e, *tmp;
        kv_list_foreach_safe(e, tmp, &n->rreads) {
            remote_read *rr = kv_list_data(e, remote_read, link);
            if (rr->our_ctx != rs[i].ctx)
                continue;
            Kvdraftpb__ReadIndexResp a = KVDRAFTPB__READ_INDEX_RESP__INIT;
            a.ctx = rr->their_ctx;
            a.index = rs[i].index;
            (void)send_pb(n, rr->from, KV_PEER_T_READ_RESP, &a.base);
            kv_list_remove(&rr->link);
            n->rreads_n--;
            free(rr);
        }
    }
}

void kv_node__reads_applied(kv_node *n)
{
    /* Looks on after `at` (the head or the last waiter kept), re-read after each callback: a
     * waiter added at the front meanwhile is looked at too. */
    kv_list *at = &n->reads_apply, *e;
    while ((e = kv_list_next(&n->reads_apply, at))) {
        read_waiter *w = kv_list_data(e, read_waiter, link);
        if (w->index > n->st.applied_index) {
            at = e;
            continue;
        }
        kv_list_remove(e);
        n->reads_waiting--;
        kv_metric_inc(n->m_reads);
        w->done(w->arg, 0);
        free(w);
    }
}

static void expire_list(kv_node *n, kv_list *l, uint64_t now, int all, int status)
{
    kv_list *at = l, *e; /* as in kv_node__reads_applied */
    while ((e = kv_list_next(l, at))) {
        read_waiter *w = kv_list_data(e, read_waiter, link);
        if (!all && w->deadline_ms > now) {
            at = e;
            continue;
        }
        kv_list_remove(e);
        n->reads_waiting--;
        w->done(w->arg, status);
        free(w);
    }
}

void kv_node__reads_expire(kv_node *n, uint64_t now)
{
    int st = n->leader ? -ETIMEDOUT : -EAGAIN;
    size_t before = n->reads_waiting;
    expire_list(n, &n->reads_new, now, 0, st);
    expire_list(n, &n->reads_round, now, 0, st);
    expire_list(n, &n->reads_apply, now, 0, -ETIMEDOUT);
    /* etcd_server_slow_read_indexes_total: read-index requests that timed out */
    kv_metric_add(n->m_slow_read_indexes, (int64_t)(before - n->reads_waiting));
    kv_list *e, *tmp;
    kv_list_foreach_safe(e, tmp, &n->rreads) {
        remote_read *rr = kv_list_data(e, remote_read, link);
        if (rr->deadline_ms > now)
            continue;
        kv_list_remove(&rr->link);
        n->rreads_n--;
        free(rr);
    }
}

void kv_node__reads_fail_all(kv_node *n, int status)
{
    expire_list(n, &n->reads_new, 0, 1, status);
    expire_list(n, &n->reads_round, 0, 1, status);
    expire_list(n, &n->reads_apply, 0, 1, status);
    n->round_ctx = 0;
    kv_list *e;
    while ((e = kv_list_head(&n->rreads))) {
        kv_list_remove(e);
        free(kv_list_data(e, remote_read, link));
    }
    n->rreads_n = 0;
}

static void on_read_req(kv_node *n, uint64_t from, const uint8_t *buf, size_t len)
{
    Kvdraftpb__ReadIndexReq *q = kvdraftpb__read_index_req__unpack(NULL, len, buf);
    if (q == NULL)
        return;
    if (n->role != RAFT_LEADER || n->rreads_n >= n->max_reads) {
        if (n->role == RAFT_LEADER)
            kv_metric_inc(n->m_rreads_refused);
        Kvdraftpb__ReadIndexResp a = KVDRAFTPB__READ_INDEX_RESP__INIT;
        a.ctx = q->ctx;
        kv_etcd_err e = n->role != RAFT_LEADER ? KV_ERR_NOT_LEADER : KV_ERR_TOO_MANY_REQUESTS;
        a.code = kv_etcd_err_peer_code(e); /* etcd_errors.h: for members of earlier versions */
        a.msg = (char *)kv_etcd_err_msg(e);
        (void)send_pb(n, from, KV_PEER_T_READ_RESP, &a.base);
    } else {
        remote_read *rr = calloc(1, sizeof(*rr));
        if (rr) {
            rr->from = from;
            rr->their_ctx = q->ctx;
            rr->deadline_ms = kv_node__now_ms() + n->election_ms;
            kv_list_insert_head(&n->rreads, &rr->link);
            n->rreads_n++;
            kv_node__kick(n);
        }
    }
    kvdraftpb__read_index_req__free_unpacked(q, NULL);
}

static void on_read_resp(kv_node *n, const uint8_t *buf, size_t len)
{
    Kvdraftpb__ReadIndexResp *a = kvdraftpb__read_index_resp__unpack(NULL, len, buf);
    if (a == NULL)
        return;
    if (a->ctx == n->round_ctx) {
        if (a->code == 0) {
            round_done(n, a->ctx, a->index);
            kv_node__reads_applied(n);
        } else if (kv_etcd_err_parse(a->msg, NULL) == KV_ERR_TOO_MANY_REQUESTS) {
            /* the leader's bound (--max-pending-read-index): "etcdserver: too many requests" */
            expire_list(n, &n->reads_round, 0, 1, -EBUSY);
            n->round_ctx = 0;
        } else {
            move_all(&n->reads_round, &n->reads_new, 0); /* ask again (new leader) */
            n->round_ctx = 0;
        }
    }
    kvdraftpb__read_index_resp__free_unpacked(a, NULL);
    kv_node__kick(n);
}

/* ---- in ---- */

/* Inbox bounds (--max-raft-inbox-messages, --max-raft-inbox-bytes). A dropped message is
 * lost as on a lossy network: raft retransmits (heartbeats carry the commit, a follower's
 * rejection or the leader's probe resends entries, a snapshot is re-sent after its timeout). */
static void inbox_drop(kv_node *n, int bytes, size_t len)
{
    n->inbox_dropped++;
    kv_metric_inc(n->m_inbox_dropped);
    kv_metric_inc(bytes ? n->m_inbox_dropped_bytes : n->m_inbox_dropped_msgs);
    uint64_t now = kv_node__now_ms();
    if (n->inbox_logged_ms != 0 && now - n->inbox_logged_ms < 10000)
        return; /* at most one line per 10 s */
    fprintf(stderr,
            "kvd: warning: raft inbox full (%zu messages, %zu bytes held; "
            "--max-raft-inbox-messages %zu, "
            "--max-raft-inbox-bytes %zu): dropped a %zu-byte raft message; %llu dropped since "
            "the previous such line, %llu in all (raft retransmits)\n",
            n->inbox_n, n->inbox_bytes, n->inbox_cap, n->max_inbox_bytes, len,
            (unsigned long long)(n->inbox_dropped - n->inbox_logged_drops),
            (unsigned long long)n->inbox_dropped);
    n->inbox_logged_ms = now;
    n->inbox_logged_drops = n->inbox_dropped;
}

/* A follower whose ready is in flight steps nothing until it completes (raft.h: nothing
 * between raft_ready and raft_advance), so its answer to the leader's heartbeat, which
 * confirms the leader's read-index rounds and lease answers (node.h kv_node_lease_live),
 * would wait for this member's fsync of unrelated entries. It is sent now when raft's answer
 * is already certain and the follower's promise already holds: the heartbeat (the inbox's
 * newest message) is from the leader raft follows, in raft's current term, every message
 * ahead of it is from that leader in that term, and the ticks that will be taken before it is
 * stepped do not reach an election (raft_ticks_to_election). When it is stepped,
 * election_elapsed restarts, after those ticks only (step_inbox), so this member votes for
 * no one for an election timeout less a tick after the heartbeat arrived. Raft answers again
 * when it steps it; the leader takes the duplicate as a no-op. */
static void early_heartbeat_ack(kv_node *n)
{
    const struct raft_msg *h = &n->inbox[n->inbox_n - 1].msg;
    if (n->inflight == NULL || h->type != RAFT_MSG_HEARTBEAT || n->peers == NULL)
        return;
    raft_term term = raft_current_term(&n->raft);
    raft_id lead = raft_leader(&n->raft);
    if (raft_role(&n->raft) != RAFT_FOLLOWER || lead == RAFT_NONE || h->from != lead ||
        h->term != term || n->ticks_due > raft_ticks_to_election(&n->raft))
        return;
    for (size_t i = 0; i + 1 < n->inbox_n; i++)
        if (n->inbox[i].msg.from != lead || n->inbox[i].msg.term != term)
            return;
    struct raft_msg a;
    memset(&a, 0, sizeof(a));
    a.type = RAFT_MSG_HEARTBEAT_RESP;
    a.from = n->self;
    a.to = lead;
    a.term = term;
    a.ctx = h->ctx;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (kv_raft_msg_encode(&a, &buf, &len) != 0)
        return; /* raft answers when it steps it */
    if (kv_peer_net_send_prio(n->peers, lead, KV_PEER_T_RAFT, buf, len) == 0)
        kv_metric_inc(n->m_early_hb_acks);
    free(buf);
}

/* Makes room for one more message (slots grow by doubling up to inbox_cap). */
static int inbox_reserve(kv_node *n)
{
    if (n->inbox_n < n->inbox_alloc)
        return 0;
    size_t cap = n->inbox_alloc ? n->inbox_alloc * 2 : 64;
    if (cap > n->inbox_cap)
        cap = n->inbox_cap;
    kv_raft_msg_owned *in = realloc(n->inbox, cap * sizeof(*in));
    if (in == NULL)
        return -ENOMEM;
    n->inbox = in;
    char **snaps = realloc(n->inbox_snap, cap * sizeof(*snaps));
    if (snaps == NULL)
        return -ENOMEM;
    n->inbox_snap = snaps;
    unsigned *ticks = realloc(n->inbox_tick, cap * sizeof(*ticks));
    if (ticks == NULL)
        return -ENOMEM;
    n->inbox_tick = ticks;
    n->inbox_alloc = cap;
    return 0;
}

static void on_raft(kv_node *n, const uint8_t *buf, size_t len, char *snap_path)
{
    /* One message is always taken when the inbox is empty, whatever its size (each is bounded
     * by the peer frame size): a bound below one message must not stop replication. */
    if (n->inbox_n >= n->inbox_cap) {
        inbox_drop(n, 0, len);
        goto drop;
    }
    if (n->inbox_n > 0 && n->inbox_bytes + len > n->max_inbox_bytes) {
        inbox_drop(n, 1, len);
        goto drop;
    }
    if (inbox_reserve(n) != 0) {
        inbox_drop(n, 0, len);
        goto drop;
    }
    kv_raft_msg_owned *m = &n->inbox[n->inbox_n];
    if (kv_raft_msg_decode(buf, len, 1u << 20, m) != 0) {
        fprintf(stderr, "kvd: warning: peer: malformed raft message dropped\n");
        goto drop;
    }
    if (m->msg.to != n->self) {
        kv_raft_msg_free(m);
        goto drop;
    }
    n->inbox_snap[n->inbox_n] = snap_path;
    n->inbox_tick[n->inbox_n] = n->ticks_due;
    n->inbox_n++;
    early_heartbeat_ack(n);
    n->inbox_bytes += len; /* wire bytes: the decoded message holds about as much */
    if (n->inbox_bytes > n->inbox_peak_bytes)
        n->inbox_peak_bytes = n->inbox_bytes;
    if (n->inbox_n > n->inbox_peak_n)
        n->inbox_peak_n = n->inbox_n;
    kv_node__kick(n);
    return;
drop:
    if (snap_path) {
        unlink(snap_path);
        free(snap_path);
    }
}

void kv_node_on_peer_message(kv_node *n, uint64_t from, uint32_t type, const uint8_t *buf,
                             size_t len)
{
    if (n->closing || !n->raft_ok)
        return;
    switch (type) {
    case KV_PEER_T_RAFT:
        on_raft(n, buf, len, NULL);
        break;
    case KV_PEER_T_FORWARD:
        on_forward(n, from, buf, len);
        break;
    case KV_PEER_T_FORWARD_RESP:
        on_forward_resp(n, buf, len);
        break;
    case KV_PEER_T_READ_REQ:
        on_read_req(n, from, buf, len);
        break;
    case KV_PEER_T_READ_RESP:
        on_read_resp(n, buf, len);
        break;
    default:
        for (size_t i = 0; i < n->n_peer_handlers; i++)
            if (n->peer_handlers[i].type == type)
                n->peer_handlers[i].fn(n->peer_handlers[i].arg, from, buf, len);
        break;
    }
}

int kv_node_set_peer_handler(kv_node *n, uint32_t type,
                             void (*fn)(void *arg, uint64_t from, const uint8_t *buf, size_t len),
                             void *arg)
{
    if (type < KV_NODE_PEER_TYPE_MIN)
        return -EINVAL;
    for (size_t i = 0; i < n->n_peer_handlers; i++)
        if (n->peer_handlers[i].type == type) {
            n->peer_handlers[i].fn = fn;
            n->peer_handlers[i].arg = arg;
            return 0;
        }
    if (n->n_peer_handlers == sizeof(n->peer_handlers) / sizeof(n->peer_handlers[0]))
        return -ENOSPC;
    n->peer_handlers[n->n_peer_handlers].type = type;
    n->peer_handlers[n->n_peer_handlers].fn = fn;
    n->peer_handlers[n->n_peer_handlers].arg = arg;
    n->n_peer_handlers++;
    return 0;
}

int kv_node_peer_send(kv_node *n, uint64_t to, uint32_t type, const uint8_t *buf, size_t len)
{
    if (n->peers == NULL)
        return -ENODEV;
    return kv_peer_net_send(n->peers, to, type, buf, len);
}

int kv_node_peer_send_prio(kv_node *n, uint64_t to, uint32_t type, const uint8_t *buf, size_t len)
{
    if (n->peers == NULL)
        return -ENODEV;
    return kv_peer_net_send_prio(n->peers, to, type, buf, len);
}

uint64_t kv_node_leader(const kv_node *n)
{
    return n->leader;
}

int kv_node_is_leader(const kv_node *n)
{
    return n->role == RAFT_LEADER;
}

uint64_t kv_node_self(const kv_node *n)
{
    return n->self;
}

void kv_node_on_peer_snapshot(kv_node *n, uint64_t from, const uint8_t *hdr, size_t hdr_len,
                              const char *path)
{
    (void)from;
    char *p = strdup(path);
    if (n->closing || !n->raft_ok || p == NULL) {
        unlink(path);
        free(p);
        return;
    }
    on_raft(n, hdr, hdr_len, p); /* the header is the SNAPSHOT raft message itself */
}
