#include "api/internal_req.h"

#include "mvcc/pb_scan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

int kv_internal_wrap(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                     uint8_t **out, size_t *out_len)
{
    if ((int)field < KV_IREQ_PUT || (int)field > KV_IREQ_ALARM || (len && msg == NULL))
        return -EINVAL;
    /* id: tag(1, varint) + up to 10 bytes; field: tag (1 byte) + len varint + body. */
    uint8_t *p = malloc(1 + 10 + 1 + 10 + len);
    if (p == NULL)
        return -ENOMEM;
    size_t n = 0;
    if (id) {
        p[n++] = (1 << 3) | 0;
        n += put_varint(p + n, id);
    }
    p[n++] = (uint8_t)(((unsigned)field << 3) | 2);
    n += put_varint(p + n, len);
    if (len)
        memcpy(p + n, msg, len);
    *out = p;
    *out_len = n + len;
    return 0;
}

int kv_internal_check_txn(const uint8_t *msg, size_t len, uint32_t max_txn_ops, int *code,
                          const char **emsg)
{
    kv_txn_limits lim;
    kv_txn_limits_init(&lim, max_txn_ops);
    switch (kv_pb_scan_txn(msg, len, &lim, NULL)) {
    case KV_PB_SCAN_OK:
        return 0;
    case KV_PB_SCAN_TOO_MANY_OPS:
        *code = 3; /* INVALID_ARGUMENT, etcd's ErrGRPCTooManyOps */
        *emsg = KV_TXN_TOO_MANY_OPS_MSG;
        return 1;
    default:
        *code = 13;
        *emsg = "grpc: error unmarshalling request: malformed protobuf";
        return 1;
    }
}
