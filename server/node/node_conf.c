/*
 * node_conf.c: membership changes and leader transfer through raft (cluster
 * operations).
 *
 * A change (MemberAdd/Remove/Promote) is a normal log entry that any member may propose (a
 * follower forwards it like a write): an add carries the member record (peer URLs), the others
 * op and id. When that entry applies, every member stages the record in its store (in the
 * entry's transaction: mvcc/members.h kv_store_member_stage); the LEADER then
 * proposes the single-server configuration change (raft_change_membership), one at a time,
 * after the checks only it can make (a learner must be in sync to be promoted). The member
 * that took the request answers once the configuration entry for that member id applied on
 * it, with the members table's verdict (mvcc/members.h), or etcd's error if the leader
 * refused (a ForwardResp to a remote proposer), or "request timed out" at its deadline.
 */
#include "node/node_int.h"

#include "peer/peer_net.h"
#include "raft.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int raft_op(int op)
{
    switch (op) {
    case KV_NODE_MEMBER_ADD:
    case KV_NODE_MEMBER_PROMOTE:
        return RAFT_CONF_ADD_VOTER;
    case KV_NODE_MEMBER_ADD_LEARNER:
        return RAFT_CONF_ADD_LEARNER;
    default:
        return RAFT_CONF_REMOVE;
    }
}

/* Our change entry applied: wait for its configuration entry. Returns 1 (r is kept) or 0. */
int kv_node__conf_phase2(kv_node *n, kv_node_req *r, kv_result *res)
{
    if (res && res->err != KV_ERR_NONE)
        return 0; /* refused as an entry: done(arg, res) reports it */
    r->deadline_ms = kv_node__now_ms() + n->request_timeout_ms;
    kv_list_insert_head(&n->conf_waiters, &r->link);
    return 1;
}

/* Fails our waiter for request req_id (the leader refused the change). 1 if found. */
int kv_node__conf_fail_waiter(kv_node *n, uint64_t req_id, kv_etcd_err e, const char *detail)
{
    kv_list *it;
    kv_list_foreach(it, &n->conf_waiters) {
        kv_node_req *r = kv_node__req(it);
        if (r->id != req_id)
            continue;
        kv_list_remove(&r->link);
        r->kind = REQ_WRITE;
        kv_node__fail_req(n, r, e, detail);
        return 1;
    }
    return 0;
}

/* A change entry applied (every member; the leader acts on it). */
void kv_node__conf_change_applied(kv_node *n, int op, uint64_t id, uint64_t proposer,
                                  uint64_t req_id)
{
    if (n->role != RAFT_LEADER || n->n_conf_todo == KV_NODE_MAX_RECORDS)
        return; /* a follower: the leader acts; a full list: the proposer times out */
    n->conf_todo[n->n_conf_todo++] = (struct conf_todo){op, id, proposer, req_id};
    kv_node__kick(n);
}

static void refuse(kv_node *n, const struct conf_todo *t, kv_etcd_err e)
{
    if (t->proposer == n->self) {
        kv_node__conf_fail_waiter(n, t->req_id, e, NULL);
        return;
    }
    if (n->peers == NULL)
        return;
    Kvdraftpb__ForwardResp fr = KVDRAFTPB__FORWARD_RESP__INIT;
    fr.id = t->req_id;
    fr.code = kv_etcd_err_peer_code(e); /* etcd_errors.h: for members of earlier versions */
    fr.msg = (char *)kv_etcd_err_msg(e);
    size_t len = kvdraftpb__forward_resp__get_packed_size(&fr);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return;
    kvdraftpb__forward_resp__pack(&fr, buf);
    (void)kv_peer_net_send(n->peers, t->proposer, KV_PEER_T_FORWARD_RESP, buf, len);
    free(buf);
}

static void pop_todo(kv_node *n)
{
    memmove(&n->conf_todo[0], &n->conf_todo[1], (n->n_conf_todo - 1) * sizeof(n->conf_todo[0]));
    n->n_conf_todo--;
}

/* Leader: proposes the next configuration change (one pending at a time). */
void kv_node__conf_drive(kv_node *n)
{
    if (n->role != RAFT_LEADER) {
        n->n_conf_todo = 0; /* the new leader did not see them: proposers time out */
        n->conf_pending_index = 0;
        return;
    }
    if (n->n_conf_todo == 0 ||
        (n->conf_pending_index && n->conf_pending_index > n->st.applied_index))
        return;
    const struct conf_todo *t = &n->conf_todo[0];
    if (t->op == KV_NODE_MEMBER_PROMOTE) {
        /* etcd isLearnerReady: the learner's match index is at least 90% of ours */
        raft_index match = raft_peer_match(&n->raft, t->id);
        raft_index mine = raft_last_index(&n->raft);
        if (match == 0 || match < mine - mine / 10) {
            refuse(n, t, KV_ERR_LEARNER_NOT_READY);
            pop_todo(n);
            return;
        }
    }
    if (t->op == KV_NODE_MEMBER_ADD || t->op == KV_NODE_MEMBER_ADD_LEARNER)
        kv_node__compact_for_join(n); /* the new member starts from a snapshot */
    raft_index idx = 0;
    int rc = raft_change_membership(&n->raft, raft_op(t->op), t->id, &idx);
    if (rc == RAFT_EAGAIN || rc == RAFT_ECONFPENDING)
        return; /* next turn */
    if (rc != 0)
        refuse(n, t, rc == RAFT_EINVAL ? KV_ERR_MEMBER_NOT_FOUND : KV_ERR_UNHEALTHY);
    else
        n->conf_pending_index = idx;
    pop_todo(n);
}

void kv_node__conf_applied(kv_node *n, const struct raft_entry *e, kv_result *cres)
{
    int op;
    raft_id id;
    if (raft_conf_change_decode(e, &op, &id) != 0)
        return;
    fprintf(stderr, "kvd: raft: configuration change applied at index %llu: %s %016llx\n",
            (unsigned long long)e->index,
            op == RAFT_CONF_REMOVE        ? "remove"
            : op == RAFT_CONF_ADD_LEARNER ? "add learner"
                                          : "add voter",
            (unsigned long long)id);
    if (n->conf_pending_index && e->index >= n->conf_pending_index)
        n->conf_pending_index = 0;
    if (n->conf_fn)
        n->conf_fn(n->conf_arg,
                   op == RAFT_CONF_REMOVE        ? KV_NODE_MEMBER_REMOVE
                   : op == RAFT_CONF_ADD_LEARNER ? KV_NODE_MEMBER_ADD_LEARNER
                                                 : KV_NODE_MEMBER_ADD,
                   id);
    /* Looks on after `at` (the head or the last request kept), re-read after each callback:
     * a request added at the front meanwhile is looked at too. */
    kv_list *at = &n->conf_waiters, *it;
    while ((it = kv_list_next(&n->conf_waiters, at))) {
        kv_node_req *r = kv_node__req(it);
        if (r->conf_id != id) {
            at = it;
            continue;
        }
        kv_list_remove(&r->link);
        r->kind = REQ_WRITE;
        kv_node__finish_req(n, r, cres);
    }
}

void kv_node__conf_track_transfer(kv_node *n, kv_node_req *r)
{
    if (n->transfer_req) { /* one at a time: the older one is superseded */
        kv_node_req *old = n->transfer_req;
        n->transfer_req = NULL;
        kv_node__fail_err(n, old, KV_ERR_NONE);
    }
    r->deadline_ms = kv_node__now_ms() + 2u * n->election_ms + 1000u;
    n->transfer_req = r; /* on no list */
}

void kv_node__conf_check(kv_node *n)
{
    kv_node_req *r = n->transfer_req;
    uint64_t now = kv_node__now_ms();
    if (r && n->leader == r->conf_id) {
        n->transfer_req = NULL;
        kv_node__finish_req(n, r, NULL);
    } else if (r && now >= r->deadline_ms) {
        n->transfer_req = NULL;
        kv_node__fail_err(n, r, KV_ERR_NONE);
    }
    kv_list *at = &n->conf_waiters, *e; /* as in kv_node__conf_applied */
    while ((e = kv_list_next(&n->conf_waiters, at))) {
        r = kv_node__req(e);
        if (r->deadline_ms > now) {
            at = e;
            continue;
        }
        kv_list_remove(&r->link);
        r->kind = REQ_WRITE;
        kv_node__fail_err(n, r, KV_ERR_TIMEOUT);
    }
}

void kv_node_set_conf_hook(kv_node *n, void (*fn)(void *arg, int op, uint64_t id), void *arg)
{
    n->conf_fn = fn;
    n->conf_arg = arg;
}
