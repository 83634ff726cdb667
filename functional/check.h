/*
 * check: the functional suite's checkers, pure functions over recorded histories (no I/O,
 * no threads), so they are unit-tested with hand-made histories (test_checkers.c) and can be
 * re-run offline on a history file kept from a failed case (kvfunctional --check-history).
 *
 * - Linearizability of single-key registers (put / linearizable get with unique values):
 *   Wing-Gong / Lowe search with memoisation of (linearized set, state), per key
 *   (P-compositionality, as Porcupine does). A put whose outcome is unknown (timeout, lost
 *   connection) may or may not have taken effect: it is given an infinite completion time.
 *   Bounded: the search gives up after budget_ms (verdict KV_FN_UNKNOWN, never "pass").
 * - Lease model: a key on a lease renewed in time is never observed missing; a key on an
 *   abandoned lease is observed gone by deadline (see kv_fn_lease_check); a key that was
 *   observed gone never comes back.
 * - Hash: all members report the same HashKV at the same revision.
 *
 * Times are microseconds on one monotonic clock. Functions return a kv_fn_verdict and write
 * a human-readable report (NUL-terminated, truncated to cap) naming the offending operations.
 * Threads: none; callers own all memory passed in.
 */
#ifndef KV_FN_CHECK_H
#define KV_FN_CHECK_H

#include <stddef.h>
#include <stdint.h>

typedef enum { KV_FN_PASS = 0, KV_FN_FAIL = 1, KV_FN_UNKNOWN = 2 } kv_fn_verdict;

const char *kv_fn_verdict_name(kv_fn_verdict v);

#define KV_FN_INF INT64_MAX

typedef enum {
    KV_FN_OP_PUT = 0,
    KV_FN_OP_GET = 1,
    /* Txn CAS "if mod_revision(key) == mod_rev then put value" (check_watch.c / lin.c):
     * CAS_OK succeeded (rev = its revision), CAS_FAIL the compare failed; a CAS whose outcome
     * is unknown is CAS_OK with ret_us == KV_FN_INF (it may have applied, or failed its
     * compare). The compared value is the value some get returned with that mod_rev. */
    KV_FN_OP_CAS_OK = 2,
    KV_FN_OP_CAS_FAIL = 3,
    /* Delete of the key (register model: writes "absent"). mod_rev holds the response's
     * deleted count (0: the key did not exist, no revision, no watch event). */
    KV_FN_OP_DEL = 4,
    /* Serializable get (may be stale): not checked for linearizability; check_watch.c
     * checks its value and mod_revision against the write at that revision. */
    KV_FN_OP_SGET = 5,
} kv_fn_op_type;

/* One register operation. value: for a put the value written, for a get the value read
 * (NULL or "" = key absent). ret_us == KV_FN_INF: a put whose outcome is unknown. */
typedef struct kv_fn_op {
    int key;    /* register index (ops of different keys are checked independently) */
    int type;   /* kv_fn_op_type */
    int client; /* for reports */
    int64_t call_us, ret_us;
    int64_t rev;     /* put: revision of the write (0 unknown); get: header revision */
    int64_t mod_rev; /* get: mod_revision of the value read (0 absent / not recorded) */
    char value[48];
} kv_fn_op;

/* Checks ops[0..n) (any order, any keys). Returns the worst verdict over all keys. */
kv_fn_verdict kv_fn_lin_check(const kv_fn_op *ops, size_t n, uint32_t budget_ms, char *report,
                              size_t cap);

/* Revision model (all keys together; ops with rev 0 are ignored):
 *  V1 unique: two acknowledged puts never share a revision.
 *  V2 real-time order: a put acknowledged before another put was invoked has a smaller
 *     revision.
 *  V3 value/revision agree: a get returning the value of an acknowledged put returns that
 *     put's revision as mod_revision, and its header revision is not below it.
 *  V4 no stale snapshot: a get's header revision is at least the revision of every put
 *     acknowledged before the get was invoked (on any key).
 */
kv_fn_verdict kv_fn_rev_check(const kv_fn_op *ops, size_t n, char *report, size_t cap);

/* ---- lease model ---- */

typedef enum {
    KV_FN_LEV_RENEW = 0, /* a renewal sent at call_us was acknowledged (ttl > 0) at ret_us;
                            the grant counts as the first renewal */
    KV_FN_LEV_READ = 1   /* a linearizable read of the lease's key in [call_us, ret_us]:
                            present = 1 if the key existed */
} kv_fn_lev_type;

typedef struct kv_fn_lease_ev {
    int lease; /* index of the lease in this history */
    int type;  /* kv_fn_lev_type */
    int present;
    int64_t call_us, ret_us;
} kv_fn_lease_ev;

typedef struct kv_fn_lease_info {
    int64_t ttl_us; /* granted TTL */
    int abandoned;  /* 1: never renewed after the grant */
} kv_fn_lease_info;

/* A window during which the cluster had a fault injected, [start_us, heal_us]: heal_us is
 * when the cluster served a write again after the fault was removed. A lease's expiry clock
 * may restart at heal_us (a restarted or newly elected leader re-arms every lease with its
 * full TTL, as etcd does), so abandoned-lease deadlines are taken from max(last renewal,
 * last heal) and no deadline applies to reads inside a window. */
typedef struct kv_fn_window {
    int64_t start_us, heal_us;
} kv_fn_window;

/* Rules (per lease):
 *  R1 renewed-never-missing: a read with present == 0 whose ret_us is earlier than
 *     (call_us of the latest renewal acknowledged before the read's call_us) + ttl.
 *     (The server re-arms the lease at some time after the renewal was sent, so the lease
 *     is alive at least until send time + ttl.)
 *  R2 abandoned-vanishes: for an abandoned lease, a read with present == 1 whose call_us is
 *     later than max(last acknowledged renewal ret_us, heal_us of the last window that
 *     ended before the read) + ttl + slack_us, unless the read started inside a window.
 *  R3 never-comes-back: a read with present == 1 whose call_us is after the ret_us of a
 *     read with present == 0 of the same lease's key (the key is written once, at grant).
 */
kv_fn_verdict kv_fn_lease_check(const kv_fn_lease_info *leases, size_t n_leases,
                                const kv_fn_lease_ev *evs, size_t n_evs, const kv_fn_window *wins,
                                size_t n_wins, int64_t slack_us, char *report, size_t cap);

/* ---- lease linearizability (lease_lin.c) ---- */

typedef enum {
    KV_FN_LL_GRANT = 0,  /* the lease's grant (ok: acknowledged) */
    KV_FN_LL_REVOKE = 1, /* not_found: answered "requested lease not found" */
    KV_FN_LL_RENEW = 2,  /* KeepAliveOnce: ttl (0 = lease gone) */
    KV_FN_LL_PUT = 3,    /* Put of key `key` with the lease (each key put once) */
    KV_FN_LL_DETACH = 4, /* Delete of key `key`, or its overwrite without the lease */
    KV_FN_LL_TTL = 5,    /* TimeToLive with keys: ttl (-1 = unknown lease), keys listed */
} kv_fn_ll_type;

/* One lease operation of the lease-linearizability stresser. ok 0: failed (the outcome of a
 * write is unknown: it may apply at any time after call_us; a failed read is no evidence). */
typedef struct kv_fn_ll_op {
    int lease;  /* lease index (one grant per lease) */
    int type;   /* kv_fn_ll_type */
    int member; /* member the client is pinned to, -1: balanced over every member */
    int key;    /* PUT / DETACH: key index (0-31) */
    int ok;
    int not_found; /* REVOKE: "requested lease not found" */
    int restarted; /* REVOKE at the end of the case through a pinned member (restarted by the
                    * case's fault when it targets that member) of a lease granted before it */
    int64_t ttl;   /* RENEW: TTL answered; TTL: remaining (-1 unknown lease) */
    uint32_t keys; /* TTL: bitmask of the lease's keys listed */
    int64_t call_us, ret_us;
} kv_fn_ll_op;

/* Rules (per lease; "after" = invoked after the acknowledgement of; lease TTLs outlive the
 * history, so nothing expires):
 *  G1 revoke after grant: a revoke after the grant answers "lease not found" while no other
 *     revoke of the lease was invoked before it returned (a revoke whose call overlaps a
 *     fault window is excused: the client library retries it, and a retry of an applied
 *     revoke answers "not found"). Also "revoke through a restarted member" (restarted).
 *  G2 renewal after revoke: a renewal after a successful revoke answers TTL > 0.
 *  G3 renewal after grant: a renewal after the grant answers TTL 0 while no revoke was
 *     invoked before it returned.
 *  T1 TimeToLive after grant answers -1 while no revoke was invoked before it returned, or
 *     TimeToLive after a successful revoke answers a TTL >= 0.
 *  K1 read your writes: TimeToLive(keys) after the put of key k with the lease misses k while
 *     no detach of k and no revoke was invoked before it returned; or lists k after the
 *     detach of k was acknowledged.
 *  K2 monotonic reads: of two TimeToLive(keys) A and B, B invoked after A returned: A lists k
 *     and B misses it while no detach of k and no revoke was invoked before B returned; or A
 *     reflects the detach of k (misses k, the put acknowledged before A, a detach invoked
 *     before A returned) and B lists k; or (outside fault windows, no renewal overlapping
 *     [A.call, B.ret]) B's remaining TTL exceeds A's by more than 1 s. */
kv_fn_verdict kv_fn_lease_lin_check(const kv_fn_ll_op *ops, size_t n, const kv_fn_window *wins,
                                    size_t n_wins, char *report, size_t cap);

/* ---- hash ---- */

typedef struct kv_fn_hash_obs {
    int member;
    int ok;           /* 0: the member did not answer (reported, counts as a failure) */
    int64_t revision; /* revision the hash was computed at (response header) */
    uint32_t hash;
    int64_t compact_revision;
} kv_fn_hash_obs;

/* PASS when every member answered with the same revision and hash. */
kv_fn_verdict kv_fn_hash_check(const kv_fn_hash_obs *obs, size_t n, char *report, size_t cap);

/* ---- watch (check_watch.c) ---- */

typedef enum {
    KV_FN_WEV_PUT = 0,       /* event: key, rev (mod_revision), value */
    KV_FN_WEV_DELETE = 1,    /* event: key, rev */
    KV_FN_WEV_START = 2,     /* watcher (re)created on `member` from revision rev */
    KV_FN_WEV_COMPACTED = 3, /* canceled: rev = compact_revision (events below it are gone) */
    KV_FN_WEV_CANCELED = 4,  /* canceled by the server or given up (value: reason) */
    KV_FN_WEV_PROGRESS = 5,  /* progress notification: every event up to rev was delivered */
} kv_fn_wev_type;

/* One record of a watcher's log, in the order the watcher received it. */
typedef struct kv_fn_watch_ev {
    int watcher;
    int type; /* kv_fn_wev_type */
    int key;  /* register index (events) */
    int member;
    int64_t rev;
    int64_t at_us;
    char value[48];
} kv_fn_watch_ev;

/* Watch rules, per watcher (events of the watched register keys; a watcher covers the
 * revisions from its first START to the last revision it confirmed: PROGRESS or its last
 * event; a COMPACTED excuses the revisions below compact_revision it had not seen):
 *  W1 order: event revisions strictly increase (a repeated (revision, key) is a duplicate,
 *     a smaller revision is out of order).
 *  W2 every event is a write that happened: an acknowledged write (put, CAS_OK, delete
 *     that deleted) with that key and revision and, for a put, the same value; or an
 *     unknown-outcome write of that key (and value). No event at a revision no such write
 *     got.
 *  W3 no drop: every acknowledged write whose revision the watcher covers appears, and every
 *     event another watcher received (an unknown-outcome write that did apply) appears too.
 *  W4 a watcher that did not confirm `final_rev` (the revision after the stressers stopped;
 *     0: not checked) is reported (it stalled).
 *  S1 a serializable get (KV_FN_OP_SGET) returning a value returns the mod_revision of the
 *     write of that value (when that write's revision is known).
 * ops: the KV history (all kinds); evs: every watcher's records (any interleaving of
 * watchers, each watcher's own records in receive order). */
kv_fn_verdict kv_fn_watch_check(const kv_fn_op *ops, size_t n_ops, const kv_fn_watch_ev *evs,
                                size_t n_evs, int64_t final_rev, char *report, size_t cap);

#endif
