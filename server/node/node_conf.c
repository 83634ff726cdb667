/*
 * node_conf.c: membership changes and leader transfer through raft (issue 9, cluster
 * operations).
 *
 * MemberAdd: the member record (peer URLs) is first proposed as a normal entry (the members
 * table gets it on every member); once it applied, the leader proposes the single-server
 * configuration change (raft_change_membership); the request completes when that entry
 * applies. Remove and promote go straight to the configuration change. Changes run on the
 * leader, one at a time (raft's rule); a follower answers "etcdserver: not leader" and
 * clients retry on another endpoint (etcdctl and clientv3 do).
 */
#include "node/node_int.h"

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

static void fail_conf(kv_node *n, kv_node_req *r, int rc)
{
    int code = KV_GRPC_FAILED_PRECONDITION;
    const char *msg = "etcdserver: unhealthy cluster";
    if (rc == RAFT_ENOTLEADER || rc == RAFT_ENOLEADER) {
        code = KV_GRPC_UNAVAILABLE;
        msg = "etcdserver: not leader";
    } else if (rc == RAFT_EINVAL) {
        code = KV_GRPC_NOT_FOUND;
        msg = "etcdserver: member not found";
    }
    r->kind = REQ_WRITE;
    kv_node__fail_req(n, r, code, msg);
}

/* Proposes r's configuration change. Returns 0 (r is tracked or failed), or RAFT_EAGAIN /
 * RAFT_ECONFPENDING: try again later (r untouched). */
int kv_node__conf_start(kv_node *n, kv_node_req *r)
{
    if (n->conf_req)
        return RAFT_ECONFPENDING;
    if (r->conf_op == KV_NODE_MEMBER_PROMOTE) {
        /* etcd isLearnerReady: the learner's match index is at least 90% of ours */
        raft_index match = raft_peer_match(&n->raft, r->conf_id);
        raft_index mine = raft_last_index(&n->raft);
        if (match == 0 || match < mine - mine / 10) {
            r->kind = REQ_WRITE;
            kv_node__fail_req(n, r, KV_GRPC_FAILED_PRECONDITION,
                              "etcdserver: can only promote a learner member which is in sync "
                              "with leader");
            return 0;
        }
    }
    if (r->conf_op == KV_NODE_MEMBER_ADD || r->conf_op == KV_NODE_MEMBER_ADD_LEARNER)
        kv_node__compact_for_join(n); /* the new member starts from a snapshot */
    raft_index idx = 0;
    int rc = raft_change_membership(&n->raft, raft_op(r->conf_op), r->conf_id, &idx);
    if (rc == RAFT_EAGAIN || rc == RAFT_ECONFPENDING)
        return rc;
    if (rc != 0) {
        fail_conf(n, r, rc);
        return 0;
    }
    r->conf_index = idx;
    r->next = NULL;
    n->conf_req = r;
    return 0;
}

/* r's member record applied (res): now the configuration change. Returns 1 if r is kept. */
int kv_node__conf_phase2(kv_node *n, kv_node_req *r, kv_result *res)
{
    if (res && res->code != 0)
        return 0; /* the record was refused: done(arg, res) reports it */
    if (n->role != RAFT_LEADER) {
        fail_conf(n, r, RAFT_ENOTLEADER);
        return 1;
    }
    r->has_record = 0;
    /* Back to the head of the queue: proposed when the previous change (if any) is done. */
    r->next = n->head;
    n->head = r;
    if (n->tail == NULL)
        n->tail = r;
    n->pending++;
    kv_node__kick(n);
    return 1;
}

void kv_node__conf_applied(kv_node *n, const struct raft_entry *e, kv_result *cres)
{
    int op;
    raft_id id;
    if (raft_conf_change_decode(e, &op, &id) != 0)
        return;
    fprintf(stderr, "kvd: raft: configuration change applied at index %llu: %s %016llx\n",
            (unsigned long long)e->index,
            op == RAFT_CONF_REMOVE ? "remove" : op == RAFT_CONF_ADD_LEARNER ? "add learner"
                                                                            : "add voter",
            (unsigned long long)id);
    if (n->conf_fn)
        n->conf_fn(n->conf_arg,
                   op == RAFT_CONF_REMOVE        ? KV_NODE_MEMBER_REMOVE
                   : op == RAFT_CONF_ADD_LEARNER ? KV_NODE_MEMBER_ADD_LEARNER
                                                 : KV_NODE_MEMBER_ADD,
                   id);
    kv_node_req *r = n->conf_req;
    if (r && e->index >= r->conf_index) {
        n->conf_req = NULL;
        r->kind = REQ_WRITE;
        kv_node__finish_req(n, r, cres);
    }
}

void kv_node__conf_track_transfer(kv_node *n, kv_node_req *r)
{
    if (n->transfer_req) { /* one at a time: the older one is superseded */
        kv_node_req *old = n->transfer_req;
        n->transfer_req = NULL;
        kv_node__fail_req(n, old, 0, "");
    }
    r->deadline_ms = kv_node__now_ms() + 2u * n->election_ms + 1000u;
    r->next = NULL;
    n->transfer_req = r;
}

void kv_node__conf_check(kv_node *n)
{
    kv_node_req *r = n->transfer_req;
    if (r && n->leader == r->conf_id) {
        n->transfer_req = NULL;
        kv_node__finish_req(n, r, NULL);
    } else if (r && kv_node__now_ms() >= r->deadline_ms) {
        n->transfer_req = NULL;
        kv_node__fail_req(n, r, 0, "");
    }
    r = n->conf_req;
    if (r && n->role != RAFT_LEADER && kv_node__now_ms() >= r->deadline_ms) {
        n->conf_req = NULL;
        fail_conf(n, r, RAFT_ENOTLEADER);
    }
}

void kv_node_set_conf_hook(kv_node *n, void (*fn)(void *arg, int op, uint64_t id), void *arg)
{
    n->conf_fn = fn;
    n->conf_arg = arg;
}
