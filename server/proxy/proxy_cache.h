/*
 * proxy_cache.h - the grpc-proxy's range cache: an LRU of RangeResponse bytes keyed by the
 * RangeRequest bytes, with etcd 3.4's invalidation semantics (proxy/grpcproxy/cache/store.go;
 * docs/proxy.md, "Serializable range cache").
 *
 * What it stores: entry = (request key bytes, the range [key, range_end) it reads, the
 * request's revision, the response bytes), all copied. Bounds: at most max_entries entries
 * and max_bytes bytes (entry overhead + key + range + response); adding past either evicts
 * least recently used entries; an entry alone larger than max_bytes is not stored.
 *
 * Invalidation (as etcd's cache):
 * - kv_proxy_cache_invalidate(key, end) drops every entry whose range intersects the point
 *   `key` (end empty) or the range [key, end) (end "\0": to the end of the keyspace), except
 *   entries of requests pinned at a revision (revision > 0): their answer cannot change.
 * - kv_proxy_cache_compact(rev): a get of a request pinned below rev answers
 *   KV_PROXY_CACHE_COMPACTED and drops the entry (etcd's ErrCompacted, lazily).
 * - kv_proxy_cache_clear drops everything.
 * Every invalidate/clear bumps kv_proxy_cache_seq and is remembered (the last 256, keys up
 * to 64 bytes; longer ones count as "everything"): a caller that read the sequence before
 * asking the upstream for a response passes it to kv_proxy_cache_add, which stores the
 * answer only if no invalidation since then met the request's range (a clear, or one too old
 * to be remembered, counts as meeting it), so an answer raced by a write is never stored.
 *
 * Index: a hash table on the request bytes (the LRU), a hash table of point entries on their
 * key, and a list of range entries. A point invalidation costs one bucket + the range entries;
 * a range invalidation scans every entry (at most max_entries).
 *
 * Pure module: no I/O, no libuv; single-threaded (the caller's thread, the proxy loop). All
 * functions return 0 or a negative errno unless stated.
 */
#ifndef KV_PROXY_CACHE_H
#define KV_PROXY_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_proxy_cache kv_proxy_cache;

#define KV_PROXY_CACHE_HIT 1
#define KV_PROXY_CACHE_MISS 0
#define KV_PROXY_CACHE_COMPACTED 2

/* max_entries >= 1, max_bytes >= 1. -EINVAL, -ENOMEM. */
int kv_proxy_cache_new(kv_proxy_cache **out, size_t max_entries, size_t max_bytes);
void kv_proxy_cache_free(kv_proxy_cache *c); /* c may be NULL */

/* Look up the request bytes req[0..rlen). revision is the request's revision (0: latest).
 * KV_PROXY_CACHE_HIT with *resp and *len pointing into the entry (valid until the next call that
 * changes the cache), KV_PROXY_CACHE_MISS, or KV_PROXY_CACHE_COMPACTED. A hit becomes the most
 * recently used entry. */
int kv_proxy_cache_get(kv_proxy_cache *c, const uint8_t *req, size_t rlen, int64_t revision,
                       const uint8_t **resp, size_t *len);

/* Store resp under req (replacing an older entry of req); key/end are the range the request
 * reads (end empty: the single key). Nothing is stored if an invalidation after seq met
 * [key, end) (unless revision > 0: pinned answers cannot change), if
 * revision is below the compacted revision, or if the entry alone exceeds max_bytes: returns
 * 1 when stored, 0 when not, -ENOMEM. */
int kv_proxy_cache_add(kv_proxy_cache *c, uint64_t seq, const uint8_t *req, size_t rlen,
                       const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                       int64_t revision, const uint8_t *resp, size_t len);

/* Drop the entries reading the point key (elen 0) or the range [key, end). Returns how many
 * were dropped. */
size_t kv_proxy_cache_invalidate(kv_proxy_cache *c, const uint8_t *key, size_t klen,
                                 const uint8_t *end, size_t elen);
void kv_proxy_cache_compact(kv_proxy_cache *c, int64_t revision);
void kv_proxy_cache_clear(kv_proxy_cache *c);

uint64_t kv_proxy_cache_seq(const kv_proxy_cache *c);
size_t kv_proxy_cache_entries(const kv_proxy_cache *c);
size_t kv_proxy_cache_bytes(const kv_proxy_cache *c);

#endif
