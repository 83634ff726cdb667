#include "apply/internal_req.h"

#include "common/etcd_errors.h"
#include "common/varint.h"

#include "pb/pb_scan.h"
#include "pb/pb_strip.h"
#include "internal.pb-c.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The message type of each InternalRequest field. */
static const ProtobufCMessageDescriptor *field_desc(enum kv_ireq_field field)
{
    switch (field) {
    case KV_IREQ_PUT:
        return &etcdserverpb__put_request__descriptor;
    case KV_IREQ_DELETE_RANGE:
        return &etcdserverpb__delete_range_request__descriptor;
    case KV_IREQ_TXN:
        return &etcdserverpb__txn_request__descriptor;
    case KV_IREQ_COMPACTION:
        return &etcdserverpb__compaction_request__descriptor;
    case KV_IREQ_LEASE_GRANT:
        return &etcdserverpb__lease_grant_request__descriptor;
    case KV_IREQ_LEASE_REVOKE:
        return &etcdserverpb__lease_revoke_request__descriptor;
    case KV_IREQ_LEASE_CHECKPOINT:
        return &etcdserverpb__lease_checkpoint_request__descriptor;
    case KV_IREQ_ALARM:
        return &etcdserverpb__alarm_request__descriptor;
    default: /* auth requests: built by the server itself (service_auth.c), no stripping */
        break;
    }
    return NULL;
}

static int wrap(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                uint8_t **out, size_t *out_len);

int kv_internal_wrap(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                     uint8_t **out, size_t *out_len)
{
    int known =
        ((int)field >= KV_IREQ_PUT && (int)field <= KV_IREQ_ALARM) ||
        ((int)field >= KV_IREQ_AUTH_ENABLE && (int)field <= KV_IREQ_AUTH_ROLE_REVOKE_PERMISSION);
    if (!known || (len && msg == NULL))
        return -EINVAL;
    /* A client's unknown fields are dropped here (etcd ignores them), so the apply thread does
     * not pay protobuf-c's per-field cost for them (pb/pb_strip.h). */
    const ProtobufCMessageDescriptor *d = field_desc(field);
    if (d && kv_pb_count_unknown(d, msg, len) > KV_PB_UNKNOWN_KEEP) {
        uint8_t *tmp = malloc(len);
        if (tmp == NULL)
            return -ENOMEM;
        size_t n = kv_pb_strip_unknown(d, msg, len, tmp);
        int rc = wrap(field, id, tmp, n, out, out_len);
        free(tmp);
        return rc;
    }
    return wrap(field, id, msg, len, out, out_len);
}

static int wrap(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                uint8_t **out, size_t *out_len)
{
    /* id: tag(1, varint) + up to 10 bytes; field: tag (1-2 bytes) + len varint + body. */
    uint8_t *p = malloc(1 + 10 + 2 + 10 + len);
    if (p == NULL)
        return -ENOMEM;
    size_t n = 0;
    if (id) {
        p[n++] = (1 << 3) | 0;
        n += kv_varint_put(p + n, id);
    }
    n += kv_varint_put(p + n, ((uint64_t)field << 3) | 2); /* 2 bytes from field 16 on */
    n += kv_varint_put(p + n, len);
    if (len)
        memcpy(p + n, msg, len);
    *out = p;
    *out_len = n + len;
    return 0;
}

int kv_internal_wrap_auth(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                          const char *user, uint64_t auth_revision, uint8_t **out, size_t *out_len)
{
    int rc = kv_internal_wrap(field, id, msg, len, out, out_len);
    if (rc || auth_revision == 0)
        return rc;
    size_t ulen = user ? strlen(user) : 0;
    uint8_t *p = realloc(*out, *out_len + 2 + 10 + ulen + 2 + 10);
    if (p == NULL) {
        free(*out);
        *out = NULL;
        return -ENOMEM;
    }
    size_t n = *out_len;
    n += kv_varint_put(p + n, (71u << 3) | 2);
    n += kv_varint_put(p + n, ulen);
    if (ulen)
        memcpy(p + n, user, ulen);
    n += ulen;
    n += kv_varint_put(p + n, (72u << 3) | 0);
    n += kv_varint_put(p + n, auth_revision);
    *out = p;
    *out_len = n;
    return 0;
}

kv_etcd_err kv_internal_check_txn(const uint8_t *msg, size_t len, uint32_t max_txn_ops)
{
    kv_txn_limits lim;
    kv_txn_limits_init(&lim, max_txn_ops);
    switch (kv_pb_scan_txn(msg, len, &lim, NULL)) {
    case KV_PB_SCAN_OK:
        return KV_ERR_NONE;
    case KV_PB_SCAN_TOO_MANY_OPS:
        return KV_ERR_TOO_MANY_OPS;
    default:
        return KV_ERR_GRPC_UNMARSHAL;
    }
}
