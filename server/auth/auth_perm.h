/*
 * auth_perm: etcd 3.4's key-range permission check (auth/range_perm_cache.go), as a pure
 * function over a user's permissions (no storage, no threads, no allocation).
 *
 * A permission {type, key, range_end} grants:
 *   range_end empty  -> the single key `key`
 *   range_end "\0"   -> every key >= key
 *   otherwise        -> [key, range_end)
 * READWRITE counts as both READ and WRITE. A request on a single key (end empty) is permitted
 * if one granted interval holds the key; a request on [key, end) (end "\0": to the end of the
 * keyspace) is permitted only if the UNION of the granted intervals of that type covers the
 * whole range (etcd's IntervalTree.Contains). An empty `key` in a permission is the start of
 * the keyspace.
 */
#ifndef KV_AUTH_PERM_H
#define KV_AUTH_PERM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { KV_PERM_READ = 0, KV_PERM_WRITE = 1, KV_PERM_READWRITE = 2 };

typedef struct kv_auth_perm {
    int type; /* KV_PERM_* (authpb.Permission.Type) */
    const uint8_t *key;
    size_t klen;
    const uint8_t *end;
    size_t elen;
} kv_auth_perm;

/* want: KV_PERM_READ or KV_PERM_WRITE. */
bool kv_auth_perm_allows(const kv_auth_perm *perms, size_t n, int want, const uint8_t *key,
                         size_t klen, const uint8_t *end, size_t elen);

#endif
