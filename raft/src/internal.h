/*
 * internal.h - functions shared between the modules of the raft core.
 *
 * Contract: nothing here is public API.  All functions take the instance
 * explicitly; allocation failures set r->poisoned (see raft.h) and are
 * reported by the public entry point.  RAFT_MUTATION (compile-time, default
 * 0) injects known bugs for tests/raft/mutation.sh; 0 builds the real thing.
 */
#ifndef RAFT_INTERNAL_H
#define RAFT_INTERNAL_H

#include "raft/raft.h"

#ifndef RAFT_MUTATION
#define RAFT_MUTATION 0
#endif
/* Mutations (see docs/raft.md). */
#define MUT_COMMIT_OLD_TERM 1   /* commit previous-term entries by counting */
#define MUT_SKIP_VOTE_PERSIST 2 /* hard state handed out without the vote */
#define MUT_NO_UPTODATE_CHECK 3 /* grant votes regardless of log */
#define MUT_NO_TRUNCATE 4       /* follower keeps conflicting suffix */
#define MUT_READ_NO_QUORUM 5    /* read index served without heartbeat round */
#define MUT_NO_CONF_WAIT 6      /* allow concurrent config changes */

/* alloc helpers (raft.c) */
void *raft__realloc(struct raft *r, void *p, size_t n);
/* Grow vec (of elements of size sz) to hold at least want; 0 or RAFT_ENOMEM. */
int raft__grow(struct raft *r, void **v, size_t *cap, size_t want, size_t sz);
#define VEC_RESERVE(r, vec, want)                                                                  \
    raft__grow((r), (void **)&(vec).v, &(vec).cap, (want), sizeof(*(vec).v))

/* prng.c */
void raft__prng_seed(uint64_t s[4], uint64_t seed);
uint64_t raft__prng_next(uint64_t s[4]);

/* log.c */
void raft__log_init(struct raft *r);
raft_index raft__log_first(const struct raft *r);
raft_index raft__log_last(const struct raft *r);
int raft__log_term(const struct raft *r, raft_index i, raft_term *t);
raft_term raft__log_last_term(const struct raft *r);
bool raft__log_match_term(const struct raft *r, raft_index i, raft_term t);
bool raft__log_up_to_date(const struct raft *r, raft_index idx, raft_term term);
int raft__log_append(struct raft *r, const struct raft_entry *e, size_t n);
int raft__log_maybe_append(struct raft *r, raft_index prev, raft_term prev_term, raft_index commit,
                           const struct raft_entry *e, size_t n, raft_index *last_new);
void raft__log_commit_to(struct raft *r, raft_index c);
/* Append entries [lo, hi) to r->pool, limited by max_bytes (at least 1). */
int raft__log_slice(struct raft *r, raft_index lo, raft_index hi, size_t max_bytes, size_t *n);
raft_index raft__log_find_conflict_by_term(const struct raft *r, raft_index idx, raft_term term,
                                           raft_term *found_term);
void raft__log_restore(struct raft *r, const struct raft_snapshot *s);
void raft__log_stable(struct raft *r);

/* progress.c */
void raft__pr_reset(struct raft_progress *p, raft_id id, raft_index next, bool learner);
void raft__pr_become_probe(struct raft_progress *p);
void raft__pr_become_replicate(struct raft_progress *p);
void raft__pr_become_snapshot(struct raft_progress *p, raft_index snap);
bool raft__pr_maybe_update(struct raft_progress *p, raft_index n);
bool raft__pr_maybe_decr(struct raft_progress *p, raft_index rejected, raft_index next);
bool raft__pr_paused(const struct raft_progress *p, unsigned max_inflight);
void raft__pr_infl_add(struct raft_progress *p, raft_index last);
void raft__pr_infl_free_to(struct raft_progress *p, raft_index idx);
struct raft_progress *raft__pr_get(struct raft *r, raft_id id);
int raft__pr_slot(const struct raft *r, raft_id id);

/* membership.c */
bool raft__is_voter(const struct raft_conf *c, raft_id id);
bool raft__is_learner(const struct raft_conf *c, raft_id id);
/* At most RAFT_MAX_NODES members in all, no id 0, no id twice (a voter is no learner). */
bool raft__conf_valid(const struct raft_conf *c);
unsigned raft__quorum(const struct raft *r);
void raft__conf_reset_progress(struct raft *r);
void raft__conf_set(struct raft *r, const struct raft_conf *c, raft_index at);
int raft__conf_apply_entry(struct raft *r, const struct raft_entry *e);

/* election.c */
void raft__become_follower(struct raft *r, raft_term term, raft_id lead);
int raft__become_leader(struct raft *r);
int raft__campaign(struct raft *r, bool pre, bool transfer);
void raft__reset_randomized_timeout(struct raft *r);
int raft__handle_vote_req(struct raft *r, const struct raft_msg *m);
int raft__handle_vote_resp(struct raft *r, const struct raft_msg *m);
int raft__tick_election(struct raft *r);
int raft__tick_leader(struct raft *r);

/* replication.c */
struct raft_msg *raft__msg(struct raft *r, int type, raft_id to, bool after);
int raft__send_append(struct raft *r, struct raft_progress *p, bool allow_empty);
int raft__bcast_append(struct raft *r);
int raft__bcast_heartbeat(struct raft *r, uint64_t ctx);
bool raft__maybe_commit(struct raft *r);
int raft__handle_append(struct raft *r, const struct raft_msg *m);
int raft__handle_heartbeat(struct raft *r, const struct raft_msg *m);
int raft__handle_snapshot(struct raft *r, const struct raft_msg *m);
int raft__handle_append_resp(struct raft *r, const struct raft_msg *m);
int raft__handle_heartbeat_resp(struct raft *r, const struct raft_msg *m);
int raft__append_local(struct raft *r, int type, const void *data, size_t len, raft_index *index);

/* read_only.c */
int raft__read_ack(struct raft *r);
void raft__reads_reset(struct raft *r);
int raft__read_state_push(struct raft *r, uint64_t ctx, raft_index index);

#endif
