/* apply_range: Range and HashKV as etcdserverpb requests and responses, on the store's plain
 * reads (mvcc/range.h, kv_store_hash_kv_cur): kv_store_range and kv_store_hash_kv_request
 * (read path: reader threads, apply.h), and the Range ops of a Txn (kv_apply_range_op). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "apply/apply_int.h"
#include "pb/pb_strip.h"
#include "mvcc/range.h"

int kv_range_check(const Etcdserverpb__RangeRequest *r, kv_result *res)
{
    if (r->key.len == 0) {
        kv_apply_err(res, KV_ERR_EMPTY_KEY);
        return 1;
    }
    if ((unsigned)r->sort_order > 2u || (unsigned)r->sort_target > 4u) {
        kv_apply_err(res, KV_ERR_INVALID_SORT);
        return 1;
    }
    return 0;
}

/* The request's fields as range options (the sort enums have the same values). */
static void opts_of(const Etcdserverpb__RangeRequest *r, kv_range_opts *o)
{
    *o = (kv_range_opts){.key = r->key.data,
                         .key_len = r->key.len,
                         .end = r->range_end.data,
                         .end_len = r->range_end.len,
                         .revision = r->revision,
                         .limit = r->limit,
                         .sort_order = (int)r->sort_order,
                         .sort_target = (int)r->sort_target,
                         .count_only = r->count_only,
                         .keys_only = r->keys_only,
                         .min_mod_revision = r->min_mod_revision,
                         .max_mod_revision = r->max_mod_revision,
                         .min_create_revision = r->min_create_revision,
                         .max_create_revision = r->max_create_revision};
}

/* Request errors of a range result: 1 with res set, else rc. */
static int range_err(int rc, kv_result *res)
{
    if (rc == KV_STORE_ERR_FUTURE_REV) {
        kv_apply_err(res, KV_ERR_FUTURE_REV);
        return 1;
    }
    if (rc == KV_STORE_ERR_COMPACTED) {
        kv_apply_err(res, KV_ERR_COMPACTED);
        return 1;
    }
    return rc;
}

/* A RangeResponse taking over rr's key-values (rr is left empty). */
static int range_response(kv_range_result *rr, Etcdserverpb__RangeResponse **out)
{
    Etcdserverpb__RangeResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__range_response__init(resp);
    if (!(resp->header = kv_apply_header(rr->revision))) {
        free(resp);
        return -ENOMEM;
    }
    resp->kvs = rr->kvs;
    resp->n_kvs = rr->n;
    resp->count = rr->count;
    resp->more = rr->more;
    rr->kvs = NULL;
    rr->n = 0;
    *out = resp;
    return 0;
}

int kv_apply_range_op(kv_actx *a, const Etcdserverpb__RangeRequest *r,
                      Etcdserverpb__RangeResponse **out)
{
    kv_range_opts o;
    kv_range_result rr;
    opts_of(r, &o);
    int rc = range_err(kv_ks_range(a->ks, &o, &rr), a->res);
    if (rc == 0)
        a->ranges++;
    if (rc == 0 && out)
        rc = range_response(&rr, out);
    kv_range_result_free(&rr);
    return rc;
}

int kv_store_range(kv_store *s, const uint8_t *req, size_t len, const kv_header_info *h,
                   kv_result *res)
{
    memset(res, 0, sizeof *res);
    /* unknown fields dropped first (pb_strip.h: 786,000 of them cost 200 ms to unpack) */
    Etcdserverpb__RangeRequest *r = (Etcdserverpb__RangeRequest *)kv_pb_unpack(
        &etcdserverpb__range_request__descriptor, req, len);
    if (!r) {
        kv_apply_err(res, KV_ERR_DECODE_RANGE);
        return 0;
    }
    int rc = kv_range_check(r, res);
    if (rc) {
        etcdserverpb__range_request__free_unpacked(r, NULL);
        return 0;
    }
    if (kv_store_alarms(s) & (1u << KV_ALARM_CORRUPT)) {
        etcdserverpb__range_request__free_unpacked(r, NULL);
        kv_apply_err(res, KV_ERR_CORRUPT);
        return 0;
    }
    kv_range_opts o;
    kv_range_result rr;
    opts_of(r, &o);
    rc = range_err(kv_store_range_read(s, &o, &rr), res);
    res->revision = rr.revision;
    if (rc == 0)
        kv_store_count_ops(s, 1, 0, 0);
    char what[128] = "range";
    if (rc == -EBADMSG)
        kv_describe_key(what, sizeof what, "a range from key", r->key.data, r->key.len);
    etcdserverpb__range_request__free_unpacked(r, NULL);
    Etcdserverpb__RangeResponse *resp = NULL;
    if (rc == 0)
        rc = range_response(&rr, &resp);
    kv_range_result_free(&rr);
    if (rc == 0) {
        if (h) {
            resp->header->cluster_id = h->cluster_id;
            resp->header->member_id = h->member_id;
            resp->header->raft_term = h->raft_term;
        }
        size_t n = etcdserverpb__range_response__get_packed_size(resp);
        res->resp = malloc(n ? n : 1);
        if (res->resp)
            res->resp_len = etcdserverpb__range_response__pack(resp, res->resp);
        else
            rc = -ENOMEM;
        etcdserverpb__range_response__free_unpacked(resp, NULL);
    }
    if (rc == 1)
        return 0;
    if (rc == -EBADMSG) {
        kv_apply_err(res, KV_ERR_RECORD_CHECKSUM);
        kv_store_note_corrupt(s, what);
        return 0;
    }
    return rc;
}

int kv_store_hash_kv_request(kv_store *s, const uint8_t *req, size_t len, const kv_header_info *h,
                             kv_result *res)
{
    memset(res, 0, sizeof *res);
    Etcdserverpb__HashKVRequest *r = etcdserverpb__hash_kvrequest__unpack(NULL, len, req);
    if (!r) {
        kv_apply_err(res, KV_ERR_GRPC_UNMARSHAL);
        return 0;
    }
    int64_t rev = r->revision, cur = 0, compact_rev = 0;
    etcdserverpb__hash_kvrequest__free_unpacked(r, NULL);
    uint32_t hash = 0;
    int rc = kv_store_hash_kv_cur(s, rev, &hash, &compact_rev, &cur);
    if (range_err(rc, res) == 1)
        return 0;
    if (rc == -EBADMSG)
        kv_apply_err(res, KV_ERR_RECORD_CHECKSUM);
    if (rc < 0)
        return rc;
    Etcdserverpb__HashKVResponse resp = ETCDSERVERPB__HASH_KVRESPONSE__INIT;
    Etcdserverpb__ResponseHeader hdr = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    if (h) {
        hdr.cluster_id = h->cluster_id;
        hdr.member_id = h->member_id;
        hdr.raft_term = h->raft_term;
    }
    hdr.revision = cur;
    resp.header = &hdr;
    resp.hash = hash;
    resp.compact_revision = compact_rev;
    size_t n = etcdserverpb__hash_kvresponse__get_packed_size(&resp);
    res->resp = malloc(n ? n : 1);
    if (!res->resp)
        return -ENOMEM;
    res->resp_len = etcdserverpb__hash_kvresponse__pack(&resp, res->resp);
    res->revision = cur;
    return 0;
}
