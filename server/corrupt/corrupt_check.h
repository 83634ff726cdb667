/*
 * corrupt_check: the data corruption checks of etcd 3.4 (etcdserver/corrupt.go;
 * docs/corruption.md).
 *
 * - Peers answer HashKV at a given revision: a CorruptHashReq frame (type 18) carries
 *   {seq, revision}; the member hashes its store at that revision on a reader thread
 *   (kv_store_hash_kv_cur: never on the loop) and answers a CorruptHashResp frame (type 19)
 *   {seq, revision, status, hash, compact revision, current revision}. Frames are fixed-size
 *   big-endian records (no protobuf). At most KV_CORRUPT_MAX_SERVING hashes for peers run at
 *   once; more are answered -EBUSY at once (metric kvd_corrupt_hash_refused_total).
 * - Periodic check (--experimental-corrupt-check-time, kvd default 60 s, 0 = off): on the
 *   leader only, every period: hash the local store at its current revision R (compact
 *   revision C), ask every other member for its hash at R, and wait for the answers (at most
 *   the request timeout, 5 s + 2 x election timeout). A member whose hash at R differs with the
 *   same compact revision C is corrupt (etcd's "same compact revision then hashes must
 *   match"): the leader logs a line naming the member, the revision and both hashes and
 *   proposes AlarmRequest{ACTIVATE, CORRUPT, member} through the log, as etcd's leader does.
 *   kvd addition: if more answering members disagree with the leader than agree with it, the
 *   leader blames itself instead (etcd would blame every follower). Members that cannot answer
 *   (behind: future revision; compacted; unreachable) are skipped with a log line.
 * - Initial check (--experimental-initial-corrupt-check, default false as etcd 3.4):
 *   kv_corrupt_initial_check runs before the member serves clients; it hashes the local store
 *   and asks every peer at the same revision (re-sending to peers not connected yet every
 *   100 ms, to every peer that did not answer every second, for at most the request timeout
 *   per peer, as etcd asks them one after the other; it ends as soon as all answered). A
 *   mismatch at the same compact revision fails the start ("<id> found data inconsistency
 *   with peers", as etcd) when more answering peers disagree with this member than agree
 *   with it (etcd: any mismatch; kvd lets a healthy member restart next to a corrupt one,
 *   with a warning).
 *
 * Metrics: kvd_corrupt_checks_total, kvd_corrupt_mismatches_total,
 * kvd_corrupt_hash_served_total, kvd_corrupt_hash_refused_total.
 *
 * Threads: loop thread only (the hashing runs on the reader pool). Ownership: the caller (the
 * server) owns the checker from kv_corrupt_start until kv_corrupt_stop, which closes it (freed
 * once its timer is closed and its reader jobs are done). The module sees the member only
 * through kv_corrupt_deps, never through server.h.
 */
#ifndef KV_CORRUPT_CHECK_H
#define KV_CORRUPT_CHECK_H

#include "metrics/metrics.h"
#include "mvcc/store.h"
#include "node/node.h"

#include <uv.h>

#include <stdint.h>

#include "peer/peer_frames.h" /* KV_CORRUPT_HASH_REQ, KV_CORRUPT_HASH_RESP */
#define KV_CORRUPT_MAX_SERVING 4u
#define KV_CORRUPT_MAX_PEERS 64u

typedef struct kv_corrupt kv_corrupt;

/* One peer's answer, as compared (exposed for the unit test). status: 0, or
 * KV_STORE_ERR_FUTURE_REV / KV_STORE_ERR_COMPACTED / a negative errno; -ETIMEDOUT when it
 * never answered. */
typedef struct kv_corrupt_answer {
    uint64_t id;
    int status;
    uint32_t hash;
    int64_t compact_rev, cur_rev;
} kv_corrupt_answer;

/* The leader's verdict over n answers for its own hash/compact revision: fills bad[] with the
 * ids of the corrupt members (possibly self) and returns their count (0: consistent). Pure. */
size_t kv_corrupt_judge(uint64_t self, uint32_t hash, int64_t compact_rev,
                        const kv_corrupt_answer *a, size_t n, uint64_t *bad, size_t bad_cap);

/* What the checker uses of the member; every pointer is borrowed and must stay valid until
 * kv_corrupt_stop (the store and the reader pool until the jobs it left on the pool are done:
 * the server closes the pool after the checker). */
struct kv_read_pool;
typedef struct kv_corrupt_deps {
    uv_loop_t *loop;
    kv_metrics *metrics; /* optional */
    kv_store *store;
    kv_node *node;
    struct kv_read_pool *read_pool; /* NULL: hashes run inline (tests) */
    uint64_t member_id;
    int has_peers;        /* a cluster: the periodic check asks the peers */
    uint32_t election_ms; /* 0: 1000 */
} kv_corrupt_deps;

/* Creates the checker in *out: registers both peer frame handlers (always: any member answers
 * its peers) and, with a period > 0 and peers, starts the periodic check timer. d is copied.
 * 0 or -ENOMEM. */
int kv_corrupt_start(kv_corrupt **out, const kv_corrupt_deps *d, uint32_t period_ms);
/* Stops the timer, detaches the frame handlers, drops any round; jobs still on the reader
 * pool complete into a closed checker. c may be NULL; the caller forgets c. Must run before
 * the node closes. */
void kv_corrupt_stop(kv_corrupt *c);

/* The initial check. Runs s->loop (uv_run UV_RUN_ONCE) until it ends: must be called from
 * main() before the main uv_run, after kv_server_start_core, on the server's checker. Returns 0 (no
 * mismatch; peers that did not answer are only logged), -EILSEQ on a mismatch (err gets etcd's
 * message), or another negative errno (local hash failed). */
int kv_corrupt_initial_check(kv_corrupt *c, char *err, size_t errlen);

#endif
