/*
 * lease_table: the persistent half of leases, stored in LMDB beside the keyspace.
 *
 * Two named databases in the store's environment:
 *   "lease"      id (8 bytes, big-endian) -> kvdpb.LeaseRecord (id, granted TTL,
 *                checkpointed remaining TTL)
 *   "lease_keys" id (8 bytes, big-endian) -> user key (MDB_DUPSORT: one dup per attached key)
 *
 * Every function runs inside a transaction the caller owns (the apply path's write
 * transaction, or a read transaction), so a lease change commits atomically with the
 * keyspace change that caused it. Nothing here allocates beyond LMDB itself; nothing
 * here keeps expiry state (that is the lessor's, on the leader only).
 *
 * Revoking touches only the lease's own keys ("lease_keys" dups), never a keyspace scan.
 */
#ifndef KV_LEASE_TABLE_H
#define KV_LEASE_TABLE_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv_lease_table {
    MDB_dbi leases; /* "lease" */
    MDB_dbi keys;   /* "lease_keys" */
} kv_lease_table;

typedef struct kv_lease_rec {
    int64_t id;
    int64_t ttl;           /* granted TTL, seconds */
    int64_t remaining_ttl; /* checkpointed remaining TTL, seconds; 0 = none */
} kv_lease_rec;

/* Opens (creating if needed) both databases. txn must be a write transaction the caller
 * commits; the environment needs maxdbs room for two more databases. */
int kv_lease_table_open(kv_lease_table *t, MDB_txn *txn);

/* 0 and *out filled, -ENOENT if absent, other negative on storage error. */
int kv_lease_table_get(const kv_lease_table *t, MDB_txn *txn, int64_t id, kv_lease_rec *out);
/* Inserts or replaces the record. */
int kv_lease_table_put(const kv_lease_table *t, MDB_txn *txn, const kv_lease_rec *rec);
/* Deletes the record and all its attachments. -ENOENT if absent. The caller deletes the
 * attached keys from the keyspace first (kv_lease_table_keys). */
int kv_lease_table_del(const kv_lease_table *t, MDB_txn *txn, int64_t id);

/* Attach/detach one key. Attaching an attached key is a no-op; detaching an unattached
 * key is a no-op. Keys longer than the LMDB dup limit (511 bytes) give -ENAMETOOLONG. */
int kv_lease_table_attach(const kv_lease_table *t, MDB_txn *txn, int64_t id, const uint8_t *key,
                          size_t klen);
int kv_lease_table_detach(const kv_lease_table *t, MDB_txn *txn, int64_t id, const uint8_t *key,
                          size_t klen);
/* Number of keys attached to id (0 if none). */
int kv_lease_table_key_count(const kv_lease_table *t, MDB_txn *txn, int64_t id, size_t *out);

/* Calls fn for every key attached to id, in key order. key is valid only during the call and
 * must not be used to modify "lease_keys" inside fn (collect, then modify). A non-zero
 * return from fn stops the walk and is returned. */
int kv_lease_table_keys(const kv_lease_table *t, MDB_txn *txn, int64_t id,
                        int (*fn)(void *arg, const uint8_t *key, size_t klen), void *arg);

/* Calls fn for every lease record, in id order (used by the lessor's promote()). */
int kv_lease_table_each(const kv_lease_table *t, MDB_txn *txn,
                        int (*fn)(void *arg, const kv_lease_rec *rec), void *arg);

#endif
