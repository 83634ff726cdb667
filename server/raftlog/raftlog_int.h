/*
 * raftlog_int.h - private to server/raftlog/: the log object and the record codec (the byte
 * layouts are documented in raftlog.h). Records are checked on every read.
 */
#ifndef KV_RAFTLOG_INT_H
#define KV_RAFTLOG_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/byteorder.h" /* records are big-endian */
#include "raftlog/raftlog.h"

/* Spare reset read txns kept for mdb_txn_renew (no allocation per cycle). */
#define KV_RAFTLOG_SPARE 4

struct kv_raftlog {
    MDB_env *env;
    MDB_dbi rlog, rmeta, rconf;
    MDB_txn *cur;      /* read txn of the current commit (NULL until first use) */
    MDB_txn **retired; /* read txns rotated out this cycle, released at end_cycle */
    size_t n_retired, cap_retired;
    MDB_txn *spare[KV_RAFTLOG_SPARE]; /* reset read txns */
    size_t n_spare;
    int err; /* first storage failure seen by the vtable */
    struct raft_storage vt;
};

#define KV_RLOG_HDR 13 /* crc 4 | term 8 | type 1 */

/* LMDB status -> negative errno. */
int kv_raftlog_mdb_err(int rc);

/* Fills the header of an "rlog" value of 13 + e->len bytes at v and copies the data. */
void kv_rl_entry_encode(const struct raft_entry *e, uint8_t *v);
/* Decodes and verifies an "rlog" record (key = 8 BE index); data points into val.
 * -EBADMSG on a bad key, size or CRC. */
int kv_rl_entry_decode(const MDB_val *key, const MDB_val *val, struct raft_entry *e);

/* Reads "hs" / "snap" in txn: 0 and filled, -ENOENT if absent (out zeroed), -EBADMSG. */
int kv_rl_hs_get(kv_raftlog *l, MDB_txn *txn, struct raft_hard_state *hs);
int kv_rl_snap_get(kv_raftlog *l, MDB_txn *txn, struct raft_snapshot_meta *m);
int kv_rl_hs_put(kv_raftlog *l, MDB_txn *txn, const struct raft_hard_state *hs);
int kv_rl_snap_put(kv_raftlog *l, MDB_txn *txn, const struct raft_snapshot_meta *m);

/* Index of the last / first stored entry in txn: 0 and *idx, -ENOENT if the log is empty. */
int kv_rl_last_key(kv_raftlog *l, MDB_txn *txn, raft_index *idx);
int kv_rl_first_key(kv_raftlog *l, MDB_txn *txn, raft_index *idx);

/* The "rmeta" marker record `name` (crc only): 0 if present, -ENOENT, -EBADMSG. */
int kv_rl_mark_get(kv_raftlog *l, MDB_txn *txn, const char *name);
int kv_rl_mark_put(kv_raftlog *l, MDB_txn *txn, const char *name);

/* ---- the index of configuration entries ("rconf", raftlog_conf.c) ---- */
#define KV_RL_CONF_MARK "rconf_v1" /* "rmeta": the index covers the whole log */

/* Opens/creates "rconf" in txn (a write txn). */
int kv_rl_conf_dbi(kv_raftlog *l, MDB_txn *txn);
/* Write txn at open: when the marker is absent (a data dir written before the index, or
 * a restored one), empties "rconf", indexes every stored RAFT_ENTRY_CONF entry and sets
 * the marker; *n receives the count indexed and *scanned the entries read (both -1 when
 * the marker was present). */
int kv_rl_conf_upgrade(kv_raftlog *l, MDB_txn *txn, long *n, long *scanned);
/* Records that entry i is a configuration entry (write txn). */
int kv_rl_conf_add(kv_raftlog *l, MDB_txn *txn, raft_index i);
/* The first indexed configuration entry in [lo, hi] (0 if none). */
int kv_rl_conf_next(kv_raftlog *l, MDB_txn *txn, raft_index lo, raft_index hi, raft_index *idx);

#endif
