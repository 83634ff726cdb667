/*
 * lease_fwd: lease renewals and TimeToLive queries from any member.
 *
 * Linearizable (docs/ARCHITECTURE.md "Leases"): the leader answers only once it applied its
 * commit index as of the request's arrival (kv_lease_fwd_current); a local batch, and a
 * follower's frame, wait once for that index (node applied hook), never once per request.
 *
 * Only the leader's lessor knows deadlines. A follower's LeaseKeepAlive / LeaseTimeToLive
 * requests (and a new leader's, while its lessor does not serve yet: they are answered from
 * the local lessor once it does, tests/cluster/test_lease_newleader.c) are queued here and,
 * once per loop turn (a uv_idle handle), everything queued
 * travels to the leader as ONE peer frame (LeaseRenewBatch, type 16) over the one peer
 * connection; the leader answers with one LeaseRenewResp (type 17) carrying each lease's new
 * TTL (0 = unknown lease) or remaining/granted TTL (-1 = unknown), and the follower answers
 * each client call through its done callback. The leader side is lease_fwd_serve.c.
 *
 * Coalescing: at most one pending forward per lease id. A renewal of an id already queued or
 * in flight joins it: every stream waiting on it gets the leader's answer, once per renewal it
 * sent (etcd answers every LeaseKeepAliveRequest); a stream that already waits on that id
 * counts one more renewal in its waiter instead of taking another waiter slot. So a flood of
 * renewals of one lease costs one slot, and the requests pending are at most the distinct
 * leases renewed through this member (kvd_lease_fwd_coalesced_total). Finding a stream's
 * waiter walks the waiters of that lease: one per stream renewing it, usually one. TimeToLive
 * queries are not coalesced.
 *
 * Bounds: at most cfg->max_pending_lease_forwards forwards (distinct renewals plus TimeToLive
 * queries) queued or in flight (--max-pending-lease-forwards), and at most twice that many
 * renewal waiters. Past them kv_lease_fwd_renew/_ttl return -EBUSY (metric
 * kvd_lease_fwd_shed_total): the service drops that one renewal without an answer and keeps
 * the stream open (the client renews again on its TTL/3 schedule); a TimeToLive gets
 * RESOURCE_EXHAUSTED "etcdserver: too many requests". Requests wait for a leader; a batch in
 * flight when the leader changes is re-sent once to the new leader
 * (kvd_lease_fwd_resent_total); a batch that could not be sent (the peer's priority queue
 * full, no connection), or that the leader refused because it does not serve leases yet, is
 * retried every timer period. A batch whose frame or answer the peer layer dropped stays in
 * flight until the time bound. The time bound is etcd's request timeout, 5 s + two election
 * timeouts (an election takes one to two; the rest covers a slow link: a round trip longer
 * than the bound would leave every renewal through this member unanswered), from queueing,
 * renewed once by the re-send: then the batch fails with -EAGAIN
 * ("etcdserver: no leader") if no leader is known, else -ETIMEDOUT (a second leader change
 * counts as one). A timed-out renewal on an open keepalive stream is dropped without an
 * answer (an error would end the stream; the client renews on its TTL/3 schedule); a
 * half-closed stream or a TimeToLive gets "etcdserver: request timed out". A leader answering
 * "unknown lease" for a lease this member's table holds (the leader had not applied the
 * grant yet, or this member not the revoke) is asked again every timer period while the
 * table holds it, at most 20 times (kvd_lease_fwd_retried_total).
 *
 * Calls: a request belongs to a client call, which the forwarder knows only as an opaque
 * pointer (the api passes its gRPC call; this module names no gRPC type and no peer frame).
 * The forwarder keeps a small owner record per call (for keepalive streams in a slot of the
 * call the caller provides, kv_lease_fwd_call_ops); the service must tell it when the call
 * ends other than through a done callback (kv_lease_fwd_call_gone: on_cancel, or before the
 * service itself finishes the stream). A keepalive stream half-closed with renewals in flight
 * is finished (OK, finish_ok) by the forwarder after the last one was answered.
 *
 * Peer frames: the forwarder registers its two frame types (peer/peer_frames.h,
 * LeaseRenewBatch 16 and LeaseRenewResp 17) with the node at start; the leader side is
 * lease_fwd_serve.c.
 *
 * Threads: loop thread only. Ownership: the daemon starts and stops it; the api uses it.
 */
#ifndef KV_LEASE_FWD_H
#define KV_LEASE_FWD_H

#include "lease/lessor.h"
#include "metrics/metrics.h"
#include "node/node.h"

#include <stdint.h>
#include <uv.h>

typedef struct kv_lease_fwd kv_lease_fwd;

/* Result of one forwarded renewal: status 0 and ttl (0 = unknown lease), or -EAGAIN (no
 * leader), -ETIMEDOUT (half-closed streams only), -ECANCELED (server closing); never -EBUSY
 * nor -ETIMEDOUT on an open stream (such renewals are dropped without a callback). Returns 1 if it
 * ended the call (finish or error; the call may be freed by then: an HTTP gateway call is), else
 * 0. Never called for a call that went away; the forwarder does not touch call after a 1. */
typedef int (*kv_lease_fwd_renew_fn)(void *call, int64_t id, int status, int64_t ttl);
/* Result of one forwarded TimeToLive: status 0 and remaining (-1 = unknown lease), granted,
 * or a negative errno as above. The unary call must be ended (or handed on) by fn. */
typedef void (*kv_lease_fwd_ttl_fn)(void *call, int64_t id, int want_keys, int status,
                                    int64_t remaining, int64_t granted);

/* What the forwarder needs of a keepalive stream: one pointer-sized slot it may use (NULL
 * until set), and ending the stream with OK once a half-closed stream's last renewal was
 * answered. Implemented by the api (api/service_lease.c, kv_service_lease_call_ops). */
typedef struct kv_lease_fwd_call_ops {
    void *(*get_owner)(void *call);
    void (*set_owner)(void *call, void *owner);
    void (*finish_ok)(void *call);
} kv_lease_fwd_call_ops;

typedef struct kv_lease_fwd_deps {
    uv_loop_t *loop;
    kv_node *node;
    kv_lessor *lessor;
    kv_metrics *metrics; /* optional */
    const kv_lease_fwd_call_ops *calls;
    uint32_t max_pending;  /* --max-pending-lease-forwards (0: 65536) */
    uint32_t election_ms;  /* --election-timeout (0: 1000): the time bound and re-send period */
    uint32_t heartbeat_ms; /* --heartbeat-interval: the retry timer's period (10..100 ms) */
} kv_lease_fwd_deps;

/* Creates the forwarder, registers both peer frame handlers, the applied hook and the
 * metrics. d->loop, node, lessor and calls are required and must outlive it. 0 or -ENOMEM. */
int kv_lease_fwd_start(kv_lease_fwd **out, const kv_lease_fwd_deps *d);
/* Fails every queued request with -ECANCELED (calls still attached get their done callback),
 * detaches the handlers, closes the handles (freed on the next loop turn). NULL: no-op. */
void kv_lease_fwd_stop(kv_lease_fwd *f);

/* Queues a renewal of lease id for keepalive stream call (a follower; or the leader while
 * kv_lease_fwd_current is 0: then the batch waits once for the applied index and is answered
 * from the local lessor), or joins the pending forward of id. 0 queued or joined (done runs later,
 * never from inside this call), -EBUSY bound reached (shed: drop this renewal, keep the stream),
 * -EAGAIN forwarder stopped, -ENOMEM. */
int kv_lease_fwd_renew(kv_lease_fwd *f, void *call, int64_t id, kv_lease_fwd_renew_fn done);
/* Queues a TimeToLive query of lease id for unary call; same returns. */
int kv_lease_fwd_ttl(kv_lease_fwd *f, void *call, int64_t id, int want_keys,
                     kv_lease_fwd_ttl_fn done);

/* The call went away or the service is about to end it: its pending requests are dropped
 * silently. Returns 1 if the forwarder knew the call. */
int kv_lease_fwd_call_gone(kv_lease_fwd *f, void *call);
/* The unary TimeToLive call went away (its on_cancel): returns 1 if it was waiting here. */
int kv_lease_fwd_ttl_gone(kv_lease_fwd *f, void *call);
/* The client half-closed keepalive stream call: returns 1 if renewals are still pending (the
 * forwarder finishes the call OK after the last answer), 0 if the caller should finish now. */
int kv_lease_fwd_half_close(kv_lease_fwd *f, void *call);

/* The peer connection to member id went down: batches in flight to it lost their frames or
 * their answers, so they are sent again (the timer, to the leader of then). NULL f: no-op. */
void kv_lease_fwd_peer_down(kv_lease_fwd *f, uint64_t id);

/* Forwards (distinct renewals, TimeToLive queries) queued or in flight (tests, metrics). */
size_t kv_lease_fwd_pending(const kv_lease_fwd *f);

/* 1 when lease reads and renewals may be answered from the local lessor now: it serves
 * (primary) and this member applied its raft commit index (etcd's waitAppliedIndex; keys 0:
 * only up to the newest lease entry, kv_node_lease_index, enough for renewals and TTLs, so a
 * KV write flood does not delay them), so the lessor (keys: and the store) reflect every
 * write acknowledged by any member before this call; and a quorum confirmed it as leader
 * recently (kv_node_lease_live): a leader cut off or stalled may have been replaced without
 * knowing it, and no index it knows covers the new leader's writes.
 * Otherwise the service queues the request here (kv_lease_fwd_renew / _ttl), and it is
 * answered once that index is applied, one wait per batch. f NULL: the lessor's primary flag. */
int kv_lease_fwd_current(const kv_lease_fwd *f, const kv_lessor *l, int keys);

/* kvd_lease_renewal_duration_seconds{path=...} (docs/metrics.md "Leases"): one LeaseKeepAlive
 * renewal from its receipt to its answer on this member. path is "local" (answered from this
 * member's lessor) or "forwarded" (through the forwarder: a follower's renewal answered by the
 * leader, or a new leader's held until it may answer). Loop thread. */
struct kv_metric *kv_lease_renewal_histogram(kv_metrics *m, const char *path);

#endif
