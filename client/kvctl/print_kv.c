/* kvctl KV printers: see print_kv.h. */
#include "print_kv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "out.h"
#include "print_fields.h"

int kvctl_print_json(const ProtobufCMessage *m)
{
    struct kvctl_buf b = {0};
    kvctl_json_message(&b, m);
    kvctl_buf_puts(&b, "\n");
    int rc = kvctl_buf_ok(&b) ? kvctl_buf_write(&b, stdout) : -ENOMEM;
    kvctl_buf_free(&b);
    return rc;
}

static void put_bytes(const struct kvctl *k, const ProtobufCBinaryData *d)
{
    if (k->hex) {
        for (size_t i = 0; i < d->len; i++)
            printf("\\x%02x", d->data[i]);
    } else if (d->len) {
        fwrite(d->data, 1, d->len, stdout);
    }
    putchar('\n');
}

/* printKV */
static void print_kv(const struct kvctl *k, const Mvccpb__KeyValue *kv, bool value_only)
{
    if (!value_only)
        put_bytes(k, &kv->key);
    put_bytes(k, &kv->value);
}

int kvctl_print_pb(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return -ENOMEM;
    protobuf_c_message_pack(m, buf);
    int rc = (n && fwrite(buf, 1, n, stdout) != n) ? -EIO : 0;
    free(buf);
    return rc;
}

static int other_format(const struct kvctl *k, const ProtobufCMessage *m)
{
    if (k->format == KVCTL_FMT_JSON)
        return kvctl_print_json(m) < 0 ? KVCTL_EXIT_IO : 0;
    if (k->format == KVCTL_FMT_PROTOBUF)
        return kvctl_print_pb(m) < 0 ? KVCTL_EXIT_IO : 0;
    return kvctl_unsupported_format(k);
}

static int emit_fields(struct kvctl_buf *b)
{
    int rc = kvctl_buf_ok(b) ? kvctl_buf_write(b, stdout) : -ENOMEM;
    kvctl_buf_free(b);
    return rc < 0 ? KVCTL_EXIT_IO : 0;
}

static void simple_put(const struct kvctl *k, const Etcdserverpb__PutResponse *r)
{
    puts("OK");
    if (r->prev_kv)
        print_kv(k, r->prev_kv, false);
}

static void simple_get(const struct kvctl *k, const Etcdserverpb__RangeResponse *r, bool value_only)
{
    for (size_t i = 0; i < r->n_kvs; i++)
        print_kv(k, r->kvs[i], value_only);
}

static void simple_del(const struct kvctl *k, const Etcdserverpb__DeleteRangeResponse *r)
{
    printf("%" PRId64 "\n", r->deleted);
    for (size_t i = 0; i < r->n_prev_kvs; i++)
        print_kv(k, r->prev_kvs[i], false);
}

int kvctl_print_put(const struct kvctl *k, const Etcdserverpb__PutResponse *r)
{
    if (k->format == KVCTL_FMT_FIELDS) {
        struct kvctl_buf b = {0};
        kvctl_fields_put(&b, r);
        return emit_fields(&b);
    }
    if (k->format != KVCTL_FMT_SIMPLE)
        return other_format(k, &r->base);
    simple_put(k, r);
    return 0;
}

int kvctl_print_get(const struct kvctl *k, const Etcdserverpb__RangeResponse *r, bool value_only,
                    bool count_only)
{
    if (k->format == KVCTL_FMT_FIELDS) {
        struct kvctl_buf b = {0};
        kvctl_fields_get(&b, r);
        return emit_fields(&b);
    }
    if (k->format != KVCTL_FMT_SIMPLE)
        return other_format(k, &r->base);
    if (count_only) /* kvctl extension: etcdctl 3.4 has no --count-only */
        printf("%" PRId64 "\n", r->count);
    else
        simple_get(k, r, value_only);
    return 0;
}

int kvctl_print_del(const struct kvctl *k, const Etcdserverpb__DeleteRangeResponse *r)
{
    if (k->format == KVCTL_FMT_FIELDS) {
        struct kvctl_buf b = {0};
        kvctl_fields_del(&b, r);
        return emit_fields(&b);
    }
    if (k->format != KVCTL_FMT_SIMPLE)
        return other_format(k, &r->base);
    simple_del(k, r);
    return 0;
}

int kvctl_print_txn(const struct kvctl *k, const Etcdserverpb__TxnResponse *r)
{
    if (k->format == KVCTL_FMT_FIELDS) {
        struct kvctl_buf b = {0};
        kvctl_fields_txn(&b, r);
        return emit_fields(&b);
    }
    if (k->format != KVCTL_FMT_SIMPLE)
        return other_format(k, &r->base);
    puts(r->succeeded ? "SUCCESS" : "FAILURE");
    for (size_t i = 0; i < r->n_responses; i++) {
        const Etcdserverpb__ResponseOp *op = r->responses[i];
        putchar('\n');
        switch (op->response_case) {
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE:
            simple_del(k, op->response_delete_range);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT:
            simple_put(k, op->response_put);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE:
            simple_get(k, op->response_range, false);
            break;
        default:
            /* etcdctl: fmt.Printf("unexpected response %+v\n", r) for nested txns */
            printf("unexpected response %s\n", "&ResponseOp{Response:<txn>}");
            break;
        }
    }
    return 0;
}
