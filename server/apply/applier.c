/* applier: the ordered apply function (etcd 3.4 etcdserver/apply.go) for kvdpb.InternalRequest
 * log entries. It decodes the entry, applies the alarm gates, dispatches to the handler of
 * its kind (apply_kv.c, apply_lease.c, apply_cluster.c), which runs keyspace operations
 * (mvcc/keyspace.h) in one child transaction of the batch, and packs the etcdserverpb
 * response only when a local waiter wants it (the batch is not quiet). It maps the
 * keyspace's errno results to etcd's errors (common/etcd_errors.h values in kv_result.err; the
 * api edge makes them gRPC statuses). Contract: kv_store_apply in apply/apply.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply/apply_int.h"
#include "apply/internal_req.h"
#include "pb/pb_scan.h"

void kv_result_set_err(kv_result *res, kv_etcd_err e)
{
    res->err = e;
    res->detail[0] = '\0';
}

char *kv_result_text(const kv_result *res, char *buf, size_t n)
{
    if (res->err == KV_ERR_NONE) {
        if (n > 0)
            buf[0] = '\0';
        return buf;
    }
    return kv_etcd_err_format(buf, n, res->err, res->detail);
}

void kv_apply_err(kv_result *res, kv_etcd_err e)
{
    kv_result_set_err(res, e);
}

void kv_apply_err_detail(kv_result *res, kv_etcd_err e, const char *fmt, ...)
{
    va_list ap;
    res->err = e;
    va_start(ap, fmt);
    vsnprintf(res->detail, sizeof res->detail, fmt, ap);
    va_end(ap);
}

Etcdserverpb__ResponseHeader *kv_apply_header(int64_t rev)
{
    Etcdserverpb__ResponseHeader *h = malloc(sizeof *h);
    if (!h)
        return NULL;
    etcdserverpb__response_header__init(h);
    h->revision = rev;
    return h;
}

static int dispatch(kv_actx *a, const Kvdpb__InternalRequest *ir, ProtobufCMessage **msg,
                    Etcdserverpb__ResponseHeader **hdr)
{
    switch (ir->request_case) {
    case KVDPB__INTERNAL_REQUEST__REQUEST_PUT:
        return kv_apply_put(a, ir->put, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE:
        return kv_apply_delete(a, ir->delete_range, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_TXN:
        return kv_apply_txn(a, ir->txn, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_COMPACTION:
        return kv_apply_compact(a, ir->compaction, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT:
        return kv_apply_lease_grant(a, ir->lease_grant, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE:
        return kv_apply_lease_revoke(a, ir->lease_revoke, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_CHECKPOINT:
        return kv_apply_lease_checkpoint(a, ir->lease_checkpoint, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_ALARM:
        return kv_apply_alarm(a, ir->alarm, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_PUBLISH:
    case KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_UPDATE:
        return kv_apply_members(a, ir, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ENABLE:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_DISABLE:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_ADD:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_DELETE:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_CHANGE_PASSWORD:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_GRANT_ROLE:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_REVOKE_ROLE:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_ADD:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_DELETE:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_GRANT_PERMISSION:
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_REVOKE_PERMISSION:
        return kv_apply_auth(a, ir, msg, hdr);
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_AUTHENTICATE:
        return kv_apply_authenticate(a, ir->auth_authenticate, a->index, msg, hdr);
    default:
        kv_apply_err(a->res, KV_ERR_EMPTY_INTERNAL_REQ);
        return 1;
    }
}

/* What a write that hit a corrupt record was doing, for the log. */
static void describe(char *what, size_t cap, const Kvdpb__InternalRequest *ir)
{
    const ProtobufCBinaryData *k = NULL;
    if (ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_PUT)
        k = &ir->put->key;
    else if (ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE)
        k = &ir->delete_range->key;
    if (k)
        kv_describe_key(what, cap, "a write to key", k->data, k->len);
    else
        snprintf(what, cap, "a write (request kind %d)", (int)ir->request_case);
}

/* Packs the response into res (the header gets h's ids). */
static int pack(ProtobufCMessage *msg, Etcdserverpb__ResponseHeader *hdr, const kv_header_info *h,
                kv_result *res)
{
    if (h) {
        hdr->cluster_id = h->cluster_id;
        hdr->member_id = h->member_id;
        hdr->raft_term = h->raft_term;
    }
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (!(res->resp = malloc(n ? n : 1)))
        return -ENOMEM;
    res->resp_len = protobuf_c_message_pack(msg, res->resp);
    return 0;
}

int kv_store_apply(kv_store *s, kv_store_batch *b, uint64_t index, const uint8_t *req, size_t len,
                   const kv_header_info *h, kv_result *res)
{
    memset(res, 0, sizeof *res);
    kv_ks_batch_info bi;
    int rc = kv_ks_batch_info_get(s, b, &bi);
    if (rc)
        return rc;
    if (index <= bi.applied) {
        res->skipped = 1;
        res->revision = bi.rev;
        return 0;
    }
    /* Bound txn nesting before the recursive unpack: requests also arrive here
     * from paths that did not pre-scan them (replay, later raft). */
    kv_txn_limits lim;
    kv_txn_limits_init(&lim, KV_TXN_MAX_OPS_LIMIT); /* never a member's flag: see pb_scan.h */
    int scan = kv_pb_scan_internal(req, len, &lim, NULL);
    Kvdpb__InternalRequest *ir =
        scan == KV_PB_SCAN_OK ? kvdpb__internal_request__unpack(NULL, len, req) : NULL;
    if (!ir) {
        kv_apply_err(res, scan == KV_PB_SCAN_TOO_MANY_OPS ? KV_ERR_TOO_MANY_OPS
                                                          : KV_ERR_DECODE_INTERNAL_REQ);
        kv_ks_batch_mark_applied(b, index, 0);
        res->revision = bi.rev;
        return 0;
    }
    kv_ks *ks = NULL;
    if ((rc = kv_ks_begin(s, b, &ks))) {
        kvdpb__internal_request__free_unpacked(ir, NULL);
        return rc;
    }
    if (ir->lease_key_limit) /* the proposer's limit (0: an older kvd's entry, cfg's decides) */
        kv_ks_set_max_keys_per_lease(
            ks, ir->lease_key_limit == KV_LEASE_KEYS_UNLIMITED ? 0 : ir->lease_key_limit);
    kv_actx a = {ks, res, bi.quiet != 0, KV_TXN_MAX_OPS_LIMIT, bi.max_key, index, 0, 0, 0};
    ProtobufCMessage *msg = NULL;
    Etcdserverpb__ResponseHeader *hdr = NULL;
    kv_apply_failpoint(ir);
    rc = kv_apply_gate(bi.alarms, ir, res);
    int grow = rc == 0 && kv_apply_is_growth(ir);
    if (grow && bi.growth_over) {
        /* One batch of requests admitted under the quota must not eat the headroom that
         * deletes and compaction need: refuse growth past half of it (kvd-specific). */
        kv_apply_err(res, KV_ERR_NO_SPACE);
        kv_store_request_alarm(s, KV_ALARM_NOSPACE);
        rc = 1;
    }
    if (rc == 0)
        rc = kv_apply_auth_check(&a, ir); /* etcd authApplierV3 (apply_auth.c) */
    if (rc == 0) {
        kv_ks_mark_writing(ks); /* the checks above only read */
        rc = dispatch(&a, ir, &msg, &hdr);
    }
    if (rc == 0 && msg) /* a local waiter: pack its response (never when quiet) */
        rc = pack(msg, hdr, h, res);
    if (rc == 0) {
        /* pages of the rev record, the index entry and copied branches */
        rc = kv_ks_commit(ks, grow ? 2 * (int64_t)len + 256 : 0);
        ks = NULL;
        if (rc == 0)
            kv_ks_batch_count_ops(b, a.ranges, a.puts, a.deletes);
    }
    if (msg)
        protobuf_c_message_free_unpacked(msg, NULL);
    int disable = ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_DISABLE;
    char what[128] = "apply";
    if (rc == -EBADMSG)
        describe(what, sizeof what, ir);
    kvdpb__internal_request__free_unpacked(ir, NULL);
    kv_ks_abort(ks);
    if (rc != 0 && kv_ks_batch_info_get(s, b, &bi) == -EAGAIN) {
        /* a shared batch took part of a failed request: the caller applies again, with a
         * child transaction per request (store.h kv_store_batch_set_shared) */
        free(res->resp);
        memset(res, 0, sizeof *res);
        return -EAGAIN;
    }
    if (bi.deterministic && (rc == -ENOSPC || rc == -E2BIG)) {
        /* a per-member limit must not become a per-member result: fail the batch */
        fprintf(stderr, "kvd: error: apply at index %llu: %s; this member cannot apply the log\n",
                (unsigned long long)index,
                rc == -ENOSPC ? "the LMDB map is full" : "too many pages for one transaction");
        free(res->resp);
        res->resp = NULL;
        res->resp_len = 0;
        return rc;
    }
    if (rc == -ENOSPC) {
        kv_apply_err(res, KV_ERR_NO_SPACE);
        kv_store_request_alarm(s, KV_ALARM_NOSPACE); /* past the headroom: raise NOSPACE */
        rc = 1;
    } else if (rc == -EBADMSG) {
        /* Corruption fails this request only; the member stops serving (CORRUPT). */
        kv_apply_err(res, KV_ERR_RECORD_CHECKSUM);
        kv_store_note_corrupt(s, what);
        rc = 1;
    } else if (rc == -E2BIG) {
        kv_apply_err(res, KV_ERR_TXN_TOO_MANY_PAGES);
        rc = 1;
    }
    if (rc != 0) {
        free(res->resp);
        res->resp = NULL;
        res->resp_len = 0;
        res->auth_tokens = KV_RESULT_AUTH_NONE; /* the token of a failed entry is not assigned */
    } else if (disable) {
        res->auth_tokens = KV_RESULT_AUTH_CLEAR; /* etcd AuthDisable: every member drops its
                                                    tokens (node hook, api/auth_srv.h) */
    }
    if (rc < 0)
        return rc;
    /* rc 0 (the batch took the request's changes) or 1 (a request error: nothing kept) */
    kv_ks_batch_mark_applied(b, index, 1);
    kv_ks_batch_info_get(s, b, &bi);
    res->revision = bi.rev;
    return 0;
}
