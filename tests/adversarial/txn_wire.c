#include "txn_wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int kv_tw_nested_txn(size_t depth, const uint8_t *extra, size_t extra_len, const uint8_t *inner,
                     size_t inner_len, uint8_t **out, size_t *out_len)
{
    if (depth == 0)
        return -EINVAL;
    /* txn[i]: size of level i's TxnRequest body; op[i]: size of its RequestOp (i < depth). */
    size_t *txn = calloc(depth + 1, sizeof *txn), *op = calloc(depth + 1, sizeof *op);
    if (!txn || !op) {
        free(txn);
        free(op);
        return -ENOMEM;
    }
    txn[depth] = inner_len;
    for (size_t i = depth - 1; i >= 1; i--) {
        op[i] = 1 + kv_varint_len(txn[i + 1]) + txn[i + 1];
        txn[i] = extra_len + 1 + kv_varint_len(op[i]) + op[i];
    }
    uint8_t *buf = malloc(txn[1] ? txn[1] : 1);
    if (!buf) {
        free(txn);
        free(op);
        return -ENOMEM;
    }
    size_t n = 0;
    for (size_t i = 1; i < depth; i++) {
        if (extra_len)
            memcpy(buf + n, extra, extra_len);
        n += extra_len;
        buf[n++] = (2 << 3) | 2; /* TxnRequest.success */
        n += kv_varint_put(buf + n, op[i]);
        buf[n++] = (4 << 3) | 2; /* RequestOp.request_txn */
        n += kv_varint_put(buf + n, txn[i + 1]);
    }
    if (inner_len)
        memcpy(buf + n, inner, inner_len);
    n += inner_len;
    *out = buf;
    *out_len = n;
    free(txn);
    free(op);
    return 0;
}

void kv_tw_field(uint8_t *buf, size_t *len, uint32_t field, const uint8_t *body, size_t body_len)
{
    size_t n = *len;
    n += kv_varint_put(buf + n, ((uint64_t)field << 3) | 2);
    n += kv_varint_put(buf + n, body_len);
    if (body_len)
        memcpy(buf + n, body, body_len);
    *len = n + body_len;
}

size_t kv_tw_put_op(uint8_t *buf, const char *key, const char *value)
{
    uint8_t put[512];
    size_t pl = 0;
    kv_tw_field(put, &pl, 1, (const uint8_t *)key, strlen(key));
    if (*value)
        kv_tw_field(put, &pl, 2, (const uint8_t *)value, strlen(value));
    size_t n = 0;
    kv_tw_field(buf, &n, 2, put, pl); /* RequestOp.request_put */
    return n;
}
