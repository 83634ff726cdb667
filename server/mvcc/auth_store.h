/*
 * auth_store: the "auth" LMDB database (etcd 3.4's auth, authUsers and authRoles buckets in
 * one database). Records, keyed by a kind byte and a name:
 *   'M' "enabled"  -> 1 byte (0/1)          'M' "revision" -> 8 bytes big-endian
 *   'U' <user>     -> packed authpb.User    'R' <role>     -> packed authpb.Role
 *   'u' / 'r' <first 446 bytes> <SHA-256 of the name>: a user / role whose name does not fit
 *   LMDB's 511-byte key; the name is read back from the record (authpb field 1).
 * Every value is stored as crc32c(key || payload) (4 bytes, big-endian) || payload, verified on
 * every read (-EBADMSG on a mismatch). This file knows nothing of users or roles: the etcd
 * rules are in server/apply/apply_auth.c (writes, on the apply worker, in the request's child
 * transaction, so they commit with the applied index) and server/api/auth_*.c (reads).
 *
 * Threads: a write handle (kv_ks_auth_tx) is used on the apply worker inside the request;
 * a read handle (kv_store_auth_read_begin) may be opened on any thread (MDB_NOTLS) and must
 * be ended on the thread that opened it, soon (it holds the defragment swap lock shared).
 */
#ifndef KV_MVCC_AUTH_STORE_H
#define KV_MVCC_AUTH_STORE_H

#include <stddef.h>
#include <stdint.h>

struct kv_store;
struct kv_ks;

#define KV_AUTH_META 'M'
#define KV_AUTH_USER 'U'
#define KV_AUTH_ROLE 'R'
#define KV_AUTH_MAX_NAME                                                                           \
    4096 /* longest user/role name stored; a name over LMDB's key limit                            \
            is keyed by a prefix and its SHA-256 (auth_store.c) */

typedef struct kv_auth_tx {
    struct kv_store *s;
    void *txn; /* MDB_txn * */
    int read;  /* 1: opened by kv_store_auth_read_begin */
} kv_auth_tx;

/* The write transaction of the request being applied. */
void kv_ks_auth_tx(struct kv_ks *ks, kv_auth_tx *out);
/* A read-only view of the committed state. 0 or negative errno. */
int kv_store_auth_read_begin(struct kv_store *s, kv_auth_tx *out);
void kv_store_auth_read_end(kv_auth_tx *tx);

/* *val is malloc'd (caller frees), the verified payload. 0, -ENOENT, -EBADMSG, -EINVAL
 * (name too long or empty), other negative errno. */
int kv_auth_get(const kv_auth_tx *tx, char kind, const void *name, size_t nlen, uint8_t **val,
                size_t *vlen);
/* Write handles only. 0 or negative errno (-ENOENT for a delete of a missing record). */
int kv_auth_put(const kv_auth_tx *tx, char kind, const void *name, size_t nlen, const uint8_t *val,
                size_t vlen);
int kv_auth_del(const kv_auth_tx *tx, char kind, const void *name, size_t nlen);
/* Calls fn for every record of kind in name order (bytewise; long names that share their
 * first 446 bytes come in hash order among themselves); fn returns 0 to go on, non-zero to
 * stop (returned). fn may write records of the database. Payloads are valid during the call
 * only. */
int kv_auth_walk(const kv_auth_tx *tx, char kind,
                 int (*fn)(void *arg, const uint8_t *name, size_t nlen, const uint8_t *val,
                           size_t vlen),
                 void *arg);

/* Helpers over the 'M' records: enabled flag (0 if absent) and revision (0 if absent). */
int kv_auth_get_enabled(const kv_auth_tx *tx, int *enabled);
int kv_auth_get_revision(const kv_auth_tx *tx, uint64_t *rev);
int kv_auth_set_enabled(const kv_auth_tx *tx, int enabled);
/* revision + 1, stored; *rev (may be NULL) gets the new value (etcd commitRevision). */
int kv_auth_bump_revision(const kv_auth_tx *tx, uint64_t *rev);

#endif
