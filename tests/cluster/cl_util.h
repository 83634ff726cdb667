/*
 * cl_util: helpers shared by the cluster tests (tests/cluster/test_*.c) on top of kvt_cluster:
 * start a cluster or fail the test with the member logs, etcdctl endpoint status parsing,
 * "wait until member i serves key=value", acknowledged-write bookkeeping.
 * Threads: test thread only. Every wait is bounded.
 */
#ifndef CL_UTIL_H
#define CL_UTIL_H

#include "kvt_cluster.h"

#include <stdint.h>

/* Election timeout used by every cluster test (ms) and the bound margin on it. */
#define CL_ELECTION_MS 500u
#define CL_HEARTBEAT_MS 50u

/* Inits and starts n members (snapshot_count 0: default), 60 s to a writable leader.
 * Returns 0 or the failing code (logs printed). */
int cl_start(kvt_cluster *c, int n, uint64_t snapshot_count);

/* One member's line of `etcdctl endpoint status -w json`. */
typedef struct cl_ep_status {
    char endpoint[64];
    uint64_t member_id, leader, raft_term, raft_index;
} cl_ep_status;

/* Runs `etcdctl endpoint status -w json` over every running member; fills up to cap entries,
 * *n receives the count. */
int cl_endpoint_status(kvt_cluster *c, cl_ep_status *st, int cap, int *n);

/* Polls (serializable if serializable, else linearizable) Range of key through member i until
 * it returns want; returns ms waited or -ETIMEDOUT. */
int cl_wait_value(kvt_cluster *c, int i, const char *key, const char *want, int serializable,
                  uint32_t timeout_ms);

/* Metric `series` (exact name and labels, e.g. `kvd_x{peer="..."}`) of member i, -1 if
 * absent. Fails the test when the metrics cannot be fetched. */
double cl_metric(kvt_cluster *c, int i, const char *series);
/* Sum of every sample of metric `name` (any labels) of member i. */
double cl_metric_sum(kvt_cluster *c, int i, const char *name);

/* Some running, non-partitioned member other than `not` (-1: any), -1 if none. */
int cl_other(kvt_cluster *c, int not1, int not2);

/* Acknowledged writes, verified at the end of a test. Bounded by CL_ACK_MAX. */
#define CL_ACK_MAX 8192
typedef struct cl_acks {
    int n;
    char key[CL_ACK_MAX][32];
    char val[CL_ACK_MAX][32];
} cl_acks;

/* Puts key=val through member i; on success records it in a (a may be NULL). */
int cl_put_ack(kvt_cluster *c, cl_acks *a, int i, const char *key, const char *val,
               uint32_t timeout_ms, char *err, size_t err_cap);
/* Every acknowledged key has (at least) its last acknowledged value, read linearizably
 * through member i; returns the number of mismatches (printed). */
int cl_verify_acks(kvt_cluster *c, const cl_acks *a, int i);

/* Asserts HashKV of every running member is equal at one revision (read via member via). */
void cl_assert_hash_equal(kvt_cluster *c, int via);

/* 1 if member i's log (its last 4 MiB) contains needle, 0 if not or unreadable. */
int cl_log_has(const kvt_cluster *c, int i, const char *needle);
/* Waits until member i's process exited: ms waited, or -1 after timeout_ms. */
int cl_wait_exit(kvt_cluster *c, int i, uint32_t timeout_ms);

/* Prints the last 16 KiB of member i's log on stderr (where a crash report would be), for a
 * test about to fail on how the member ended. */
void cl_print_log_tail(const kvt_cluster *c, int i);

/* LeaseGrant of ttl seconds through g (tests/lib/grpc_raw.h); the new lease id. Fails the test
 * on any error. */
struct kv_it_grpc;
int64_t cl_lease_grant(struct kv_it_grpc *g, int64_t ttl);

#endif
