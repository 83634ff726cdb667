/*
 * range: the Range read of the store in plain C (etcd 3.4 apply.go Range + mvcc rangeKeys;
 * semantics in store.h). The request/response layer (server/apply/apply_range.c) decodes
 * etcdserverpb.RangeRequest into kv_range_opts and packs the RangeResponse. The key-values
 * are returned as unpacked mvccpb.KeyValue, the store's storage format (store.h), so the
 * response takes them over without a copy.
 *
 * Return values: 0, KV_STORE_ERR_FUTURE_REV (revision > current), KV_STORE_ERR_COMPACTED
 * (0 < revision < compacted revision), -EBADMSG (a record failed its checksum), or another
 * negative errno (storage, -ENOMEM).
 */
#ifndef KV_MVCC_RANGE_H
#define KV_MVCC_RANGE_H

#include <stddef.h>
#include <stdint.h>

#include "kv.pb-c.h"
#include "mvcc/store.h"

/* Sort order and target: the values of etcdserverpb.RangeRequest.SortOrder / SortTarget. */
enum { KV_RANGE_SORT_NONE = 0, KV_RANGE_SORT_ASCEND = 1, KV_RANGE_SORT_DESCEND = 2 };
enum {
    KV_RANGE_TARGET_KEY = 0,
    KV_RANGE_TARGET_VERSION = 1,
    KV_RANGE_TARGET_CREATE = 2,
    KV_RANGE_TARGET_MOD = 3,
    KV_RANGE_TARGET_VALUE = 4
};

/* [key, end) as etcd: end len 0 = key only, "\0" = every key >= key. The pointers are only
 * read during the call. Validation (non-empty key, sort values in range) is the caller's. */
typedef struct kv_range_opts {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *end;
    size_t end_len;
    int64_t revision; /* 0 = current */
    int64_t limit;    /* 0 = none */
    int sort_order, sort_target;
    int count_only, keys_only;
    int64_t min_mod_revision, max_mod_revision, min_create_revision, max_create_revision;
} kv_range_opts;

typedef struct kv_range_result {
    Mvccpb__KeyValue **kvs; /* malloc'd array of n malloc'd key-values (NULL when n == 0) */
    size_t n;
    int64_t count;    /* keys in the range (before limit) */
    int more;         /* the limit cut the result */
    int64_t revision; /* the current revision (etcd's header revision, also for old reads);
                       * set as soon as it is known, also with an error result */
} kv_range_result;

/* Frees r's key-values (r itself is the caller's); r may be zeroed. */
void kv_range_result_free(kv_range_result *r);

/* Committed state, own read transaction (any thread, as store.h's readers). */
int kv_store_range_read(kv_store *s, const kv_range_opts *o, kv_range_result *out);

struct kv_ks;
/* Inside a request (a Txn's Range op), at its read revision (keyspace.h). */
int kv_ks_range(struct kv_ks *ks, const kv_range_opts *o, kv_range_result *out);

#endif
