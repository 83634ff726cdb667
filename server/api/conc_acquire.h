/*
 * conc_acquire: Campaign (v3electionpb) and Lock (v3lockpb), one state machine: etcd 3.4's
 * electionServer.Campaign / lockServer.Lock over clientv3/concurrency's Election.Campaign,
 * Mutex.Lock and waitDeletes (docs/ARCHITECTURE.md "Election and lock").
 *
 *   session  lease 0: a LeaseGrant of a new id with TTL 60 s (not kept alive, as etcd's
 *            orphaned session); key = name + "/" + lowercase hex lease
 *   txn      If(CreateRevision(key) == 0) Then(Put key value lease [, Get first-created])
 *            Else(Get key [, Get first-created]); rev = the key's creation revision
 *   proclaim (Campaign, the key existed with another value) If(CreateRevision(key) == rev)
 *            Then(Put key value lease); failed -> "election: not leader"
 *   wait     (Lock: unless it is the first-created key) repeat: the newest key under the
 *            prefix created before rev (a linearizable Range); none -> done; else wait for its
 *            DELETE (conc_watch.h) from the Range's revision
 *   reply    Campaign: header of the txn + LeaderKey{name, key, rev, lease};
 *            Lock: header (of the last Range if it waited) + key
 * The call cancelled (client gone, deadline) or any error after the key was created: the key
 * is deleted (If(CreateRevision(key) == rev) Then(Delete key)), so a waiter leaves nothing.
 *
 * Admission, before any of that (kv_conc_acquire): the quota (a Txn's), then the new session
 * lease's id, then auth (READ on the prefix "<name>/", WRITE on the key), then the bounds
 * (kv_conc_admit_lease for a new session, kv_conc_admit); the state gives the place back when it
 * ends. Loop thread only.
 */
#ifndef KV_API_CONC_ACQUIRE_H
#define KV_API_CONC_ACQUIRE_H

#include "api/conc_client.h"
#include "grpc/grpc_server.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { KV_CONC_CAMPAIGN = 0, KV_CONC_LOCK = 1 } kv_conc_kind;

/* Admits and starts the call's acquisition (Campaign's or Lock's on_message, after the unpack):
 * name/value are copied (value: Campaign only); lease is the request's (0: a new session lease,
 * granted first with TTL 60 s); req_len is the request's size (the quota's log budget).
 * Answers the call in every case (errors included) and, once admitted, sets the call's data;
 * kv_conc_acquire_cancel is the method's on_cancel. */
void kv_conc_acquire(kv_grpc_call *call, kv_conc_kind kind, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, int64_t lease, size_t req_len);
void kv_conc_acquire_cancel(kv_grpc_call *call);

#endif
