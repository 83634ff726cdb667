/*
 * conc_client: the in-process client the election and lock services (service_election.c,
 * service_lock.c) use for their key-value steps, as etcd 3.4's v3election/v3lock servers use
 * clientv3 over their own member (docs/ARCHITECTURE.md "Election and lock").
 *
 * - kv_conc_propose(): a Txn, LeaseGrant or DeleteRange travels the ordered write path
 *   (node.h kv_node_propose) as an InternalRequest carrying the caller's auth identity, like a
 *   client's write (api/auth_gate.c): the applier refuses it if auth changed since the check.
 * - kv_conc_range(): a linearizable Range, the path of the KV service's Range
 *   (service_kv.c): a ReadIndex barrier in a cluster, then the read on a reader thread.
 *
 * Both complete with done(arg, res) on the loop thread, exactly once, also when the member
 * stops (then res->err is set).
 * Codes: etcd's election and lock servers get the errors of these steps from clientv3 as
 * plain errors (rpctypes.EtcdError), which gRPC answers with code UNKNOWN and the same
 * message ("etcdserver: requested lease not found", "etcdserver: permission denied", ...);
 * the services answer a step's error that way too (services.h kv_reply_step_err), whatever
 * status res->err has. res->resp (packed response, when res->err == 0) is owned by the caller of
 * done only during the call. There is no detach: the caller keeps its state until done ran (a
 * cancelled Campaign must still learn whether its key was created). Loop thread only.
 */
#ifndef KV_API_CONC_CLIENT_H
#define KV_API_CONC_CLIENT_H

#include "api/auth_srv.h"
#include "apply/internal_req.h"
#include "apply/apply.h"
#include "mvcc/store.h"

#include <protobuf-c/protobuf-c.h>

#include <stdint.h>

struct kv_api;

/* The caller's identity proposals carry (auth_revision 0: none, auth disabled). */
typedef struct kv_conc_ident {
    char user[KV_AUTH_MAX_NAME + 1];
    uint64_t auth_revision;
} kv_conc_ident;

typedef void (*kv_conc_done_fn)(void *arg, kv_result *res);

/* Packs m (the message of InternalRequest field `field`) and proposes it. Returns 0 (done
 * will run) or a negative errno (done will not run): -EBUSY (queue full), -ESHUTDOWN,
 * -ENOMEM, -E2BIG (larger than --max-request-bytes). */
int kv_conc_propose(struct kv_api *s, const kv_conc_ident *id, enum kv_ireq_field field,
                    const ProtobufCMessage *m, kv_conc_done_fn done, void *arg);

/* A linearizable Range of r. Returns 0 (done will run) or -ENOMEM / -EBUSY / -ESHUTDOWN. */
int kv_conc_range(struct kv_api *s, const ProtobufCMessage *r, kv_conc_done_fn done, void *arg);

/* Sets res->err to the error a negative errno of the two functions above maps to. */
void kv_conc_errno_result(int rc, kv_result *res);

#endif
