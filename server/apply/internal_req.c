#include "apply/internal_req.h"

#include "common/etcd_errors.h"
#include "common/varint.h"

#include "pb/pb_scan.h"
#include "pb/pb_strip.h"
#include "pb/pb_wire.h"
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

static int wrap(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len, size_t extra,
                uint8_t **out, size_t *out_len);

/* kv_internal_wrap with extra bytes of room after the message, for the fields its caller
 * appends without a second allocation. */
static int wrap_room(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                     size_t extra, uint8_t **out, size_t *out_len)
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
        int rc = wrap(field, id, tmp, n, extra, out, out_len);
        free(tmp);
        return rc;
    }
    return wrap(field, id, msg, len, extra, out, out_len);
}

int kv_internal_wrap(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                     uint8_t **out, size_t *out_len)
{
    return wrap_room(field, id, msg, len, 0, out, out_len);
}

static int wrap(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len, size_t extra,
                uint8_t **out, size_t *out_len)
{
    /* id: tag(1, varint) + up to 10 bytes; field: tag (1-2 bytes) + len varint + body. */
    uint8_t *p = malloc(1 + 10 + 2 + 10 + len + extra);
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

/* The appended fields: each writes at p + *n, where the caller made room (the _ROOM sizes). */
#define AUTH_ROOM(ulen) (2 + KV_VARINT_MAX + (ulen) + 2 + KV_VARINT_MAX)
static void put_auth(uint8_t *p, size_t *n, const char *user, size_t ulen, uint64_t revision)
{
    *n += kv_varint_put(p + *n, (71u << 3) | 2);
    *n += kv_varint_put(p + *n, ulen);
    if (ulen)
        memcpy(p + *n, user, ulen);
    *n += ulen;
    *n += kv_varint_put(p + *n, (72u << 3) | 0);
    *n += kv_varint_put(p + *n, revision);
}

#define BY_LEADER_ROOM 3
static void put_by_leader(uint8_t *p, size_t *n)
{
    *n += kv_varint_put(p + *n, (uint64_t)KV_IREQ_LEASE_ID_BY_LEADER << 3); /* 2 bytes */
    p[(*n)++] = 1;
}

#define KEY_LIMIT_ROOM (2 + KV_VARINT_MAX)
static void put_key_limit(uint8_t *p, size_t *n, uint32_t max)
{
    *n += kv_varint_put(p + *n, (uint64_t)KV_IREQ_LEASE_KEY_LIMIT << 3); /* 2 bytes */
    *n += kv_varint_put(p + *n, max ? max : KV_LEASE_KEYS_UNLIMITED);
}

int kv_internal_wrap_client(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                            const kv_ireq_origin *o, uint8_t **out, size_t *out_len)
{
    size_t ulen = o->auth_revision && o->user ? strlen(o->user) : 0;
    int limit = field == KV_IREQ_PUT || field == KV_IREQ_TXN;
    size_t room = (o->auth_revision ? AUTH_ROOM(ulen) : 0) +
                  (o->lease_id_by_leader ? BY_LEADER_ROOM : 0) + (limit ? KEY_LIMIT_ROOM : 0);
    int rc = wrap_room(field, id, msg, len, room, out, out_len);
    if (rc)
        return rc;
    size_t n = *out_len;
    if (o->auth_revision)
        put_auth(*out, &n, o->user, ulen, o->auth_revision);
    if (o->lease_id_by_leader)
        put_by_leader(*out, &n);
    if (limit)
        put_key_limit(*out, &n, o->max_keys_per_lease);
    *out_len = n;
    return 0;
}

int kv_internal_mark_lease_id_by_leader(uint8_t **req, size_t *len)
{
    uint8_t *p = realloc(*req, *len + BY_LEADER_ROOM);
    if (p == NULL)
        return -ENOMEM;
    size_t n = *len;
    put_by_leader(p, &n);
    *req = p;
    *len = n;
    return 0;
}

int kv_internal_lease_id_by_leader(const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    int on = 0;
    while (p < end) {
        kv_pb_field f;
        size_t used = kv_pb_read_field(p, end, &f);
        if (used == 0)
            return 0;
        if (f.tag == KV_IREQ_LEASE_ID_BY_LEADER && f.wt == KV_PB_WT_VARINT) {
            uint64_t v = 0;
            kv_varint_get(f.val, end, &v);
            on = v != 0;
        }
        p += used;
    }
    return on;
}

/* Writes v as a varint of exactly n bytes (n >= kv_varint_len(v), n <= KV_VARINT_MAX): the
 * high groups are zero with the continuation bit set, which protobuf readers accept. */
static void varint_put_padded(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(v & 0x7f) | (i + 1 < n ? 0x80 : 0);
        v >>= 7;
    }
}

/* The last field `tag` of wire type wt in [p, end): its value and length (kv_pb_field). */
static int last_field(const uint8_t *p, const uint8_t *end, uint32_t tag, uint8_t wt,
                      kv_pb_field *out)
{
    int found = 0;
    while (p < end) {
        kv_pb_field f;
        size_t used = kv_pb_read_field(p, end, &f);
        if (used == 0)
            return -EINVAL;
        if (f.tag == tag && f.wt == wt) {
            *out = f;
            if (wt == KV_PB_WT_VARINT)
                out->vlen = used - (size_t)(f.val - p);
            found = 1;
        }
        p += used;
    }
    return found ? 0 : -ENOENT;
}

int kv_internal_name_lease(uint8_t **entry, size_t *len, int64_t id)
{
    uint8_t *p = *entry, *end = p + *len;
    kv_pb_field g = {0}, flag = {0}, gid = {0}, gttl = {0};
    uint64_t marked = 0;
    if (last_field(p, end, KV_IREQ_LEASE_ID_BY_LEADER, KV_PB_WT_VARINT, &flag) != 0 ||
        last_field(p, end, KV_IREQ_LEASE_GRANT, KV_PB_WT_LEN, &g) != 0)
        return -EINVAL;
    kv_varint_get(flag.val, end, &marked);
    if (!marked)
        return -EINVAL;
    const uint8_t *gend = g.val + g.vlen;
    int has_id = last_field(g.val, gend, 2, KV_PB_WT_VARINT, &gid);
    if (has_id == -EINVAL)
        return -EINVAL;
    if (has_id == 0 && kv_varint_len((uint64_t)id) <= gid.vlen && flag.vlen == 1) {
        /* In place: the entry keeps its size (server-chosen ids all have 9-byte varints). */
        varint_put_padded((uint8_t *)gid.val, (uint64_t)id, gid.vlen);
        *(uint8_t *)flag.val = 0;
        return 0;
    }
    uint64_t ttl = 0;
    int has_ttl = last_field(g.val, gend, 1, KV_PB_WT_VARINT, &gttl);
    if (has_ttl == -EINVAL)
        return -EINVAL;
    if (has_ttl == 0)
        kv_varint_get(gttl.val, gend, &ttl);
    /* Appended: lease_grant {TTL, ID} again (at most 22 bytes: one length byte), then 74 = 0. */
    uint8_t *q = realloc(p, *len + 2 + 22 + 3);
    if (q == NULL)
        return -ENOMEM;
    size_t n = *len, glen_at;
    q[n++] = (KV_IREQ_LEASE_GRANT << 3) | KV_PB_WT_LEN;
    glen_at = n++;
    if (ttl) {
        q[n++] = (1 << 3) | KV_PB_WT_VARINT;
        n += kv_varint_put(q + n, ttl);
    }
    q[n++] = (2 << 3) | KV_PB_WT_VARINT;
    n += kv_varint_put(q + n, (uint64_t)id);
    q[glen_at] = (uint8_t)(n - glen_at - 1);
    n += kv_varint_put(q + n, (uint64_t)KV_IREQ_LEASE_ID_BY_LEADER << 3);
    q[n++] = 0;
    *entry = q;
    *len = n;
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
