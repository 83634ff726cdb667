/* loader: see loader.h. */
#include "loader.h"
#include "rpc_client.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_it_loader_value(uint32_t seed, uint32_t i, char *buf, size_t value_size)
{
    uint64_t x = ((uint64_t)seed << 32) ^ (i * 0x9E3779B97F4A7C15ull) ^ 0xD1B54A32D192ED03ull;
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (size_t k = 0; k < value_size; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[k] = alphabet[x % 36];
    }
}

typedef struct worker {
    const kv_it_load_opts *o;
    uint32_t first, end; /* key index range */
    uint32_t acked;
    int rc;
    char err[256];
} worker;

static void key_of(const kv_it_load_opts *o, uint32_t i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%08u", o->prefix, i);
}

static void *load_worker(void *arg)
{
    worker *w = arg;
    const kv_it_load_opts *o = w->o;
    kv_it_rpc *c = NULL;
    uint32_t batch = o->batch ? o->batch : 1;
    char *vals = malloc((size_t)batch * o->value_size);
    char(*keys)[128] = malloc((size_t)batch * 128);
    Etcdserverpb__RequestOp *ops = calloc(batch, sizeof(*ops));
    Etcdserverpb__PutRequest *puts = calloc(batch, sizeof(*puts));
    Etcdserverpb__RequestOp **opp = calloc(batch, sizeof(*opp));
    if (!vals || !keys || !ops || !puts || !opp) {
        w->rc = -ENOMEM;
        goto out;
    }
    w->rc = kv_it_rpc_open(&c, o->endpoint, o->timeout_ms, w->err, sizeof(w->err));
    if (w->rc)
        goto out;
    for (uint32_t i = w->first; i < w->end;) {
        uint32_t n = w->end - i < batch ? w->end - i : batch;
        for (uint32_t j = 0; j < n; j++) {
            key_of(o, i + j, keys[j], sizeof(keys[j]));
            kv_it_loader_value(o->seed, i + j, vals + (size_t)j * o->value_size, o->value_size);
        }
        if (batch == 1) {
            w->rc = kv_it_rpc_put(c, keys[0], strlen(keys[0]), vals, o->value_size, o->timeout_ms,
                                  NULL, w->err, sizeof(w->err));
        } else {
            for (uint32_t j = 0; j < n; j++) {
                etcdserverpb__request_op__init(&ops[j]);
                etcdserverpb__put_request__init(&puts[j]);
                puts[j].key = (ProtobufCBinaryData){strlen(keys[j]), (uint8_t *)keys[j]};
                puts[j].value = (ProtobufCBinaryData){o->value_size,
                                                      (uint8_t *)vals + (size_t)j * o->value_size};
                ops[j].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
                ops[j].request_put = &puts[j];
                opp[j] = &ops[j];
            }
            Etcdserverpb__TxnRequest req = ETCDSERVERPB__TXN_REQUEST__INIT;
            req.n_success = n;
            req.success = opp;
            size_t len = etcdserverpb__txn_request__get_packed_size(&req);
            uint8_t *buf = malloc(len);
            if (!buf) {
                w->rc = -ENOMEM;
                goto out;
            }
            etcdserverpb__txn_request__pack(&req, buf);
            uint8_t *resp = NULL;
            size_t rl = 0;
            w->rc = kv_it_rpc_call(c, "/etcdserverpb.KV/Txn", buf, len, &resp, &rl, o->timeout_ms,
                                   w->err, sizeof(w->err));
            free(buf);
            if (resp)
                kv_it_rpc_free(resp);
        }
        if (w->rc)
            goto out;
        for (uint32_t j = 0; j < n; j++)
            if (o->acked)
                o->acked[i + j] = 1;
        w->acked += n;
        i += n;
    }
out:
    kv_it_rpc_close(c);
    free(vals);
    free(keys);
    free(ops);
    free(puts);
    free(opp);
    return NULL;
}

int kv_it_load(const kv_it_load_opts *o, uint32_t *n_acked, char *errbuf, size_t errcap)
{
    uint32_t nt = o->threads ? o->threads : 1;
    worker *ws = calloc(nt, sizeof(*ws));
    pthread_t *th = calloc(nt, sizeof(*th));
    int rc = 0;
    if (!ws || !th) {
        free(ws);
        free(th);
        return -ENOMEM;
    }
    uint32_t started = 0;
    for (uint32_t t = 0; t < nt; t++) {
        ws[t].o = o;
        ws[t].first = (uint32_t)((uint64_t)o->n_keys * t / nt);
        ws[t].end = (uint32_t)((uint64_t)o->n_keys * (t + 1) / nt);
        if (pthread_create(&th[t], NULL, load_worker, &ws[t]) != 0) {
            rc = -EAGAIN;
            snprintf(errbuf, errcap, "pthread_create failed");
            break;
        }
        started++;
    }
    uint32_t acked = 0;
    for (uint32_t t = 0; t < started; t++) {
        pthread_join(th[t], NULL);
        acked += ws[t].acked;
        if (ws[t].rc && !rc) {
            rc = ws[t].rc;
            snprintf(errbuf, errcap, "%s", ws[t].err);
        }
    }
    if (n_acked)
        *n_acked = acked;
    free(ws);
    free(th);
    return rc;
}

static int prefix_end(const char *prefix, char *end, size_t cap)
{
    size_t n = strlen(prefix);
    if (n == 0 || n >= cap)
        return -EINVAL;
    memcpy(end, prefix, n + 1);
    while (n > 0 && (unsigned char)end[n - 1] == 0xff)
        end[--n] = 0;
    if (n == 0)
        return -EINVAL;
    end[n - 1]++;
    return 0;
}

int kv_it_verify(const kv_it_load_opts *o, uint32_t *present, uint32_t *missing, uint32_t *wrong,
                 char *errbuf, size_t errcap)
{
    kv_it_rpc *c = NULL;
    char end[128], from[160];
    int rc;
    uint8_t *seen = calloc(o->n_keys ? o->n_keys : 1, 1);
    char *expect = malloc(o->value_size);
    *present = *missing = *wrong = 0;
    if (!seen || !expect) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = prefix_end(o->prefix, end, sizeof(end))))
        goto out;
    if ((rc = kv_it_rpc_open(&c, o->endpoint, o->timeout_ms, errbuf, errcap)))
        goto out;
    snprintf(from, sizeof(from), "%s", o->prefix);
    size_t from_len = strlen(from);
    for (;;) {
        Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
        req.key = (ProtobufCBinaryData){from_len, (uint8_t *)from};
        req.range_end = (ProtobufCBinaryData){strlen(end), (uint8_t *)end};
        req.limit = 5000;
        size_t len = etcdserverpb__range_request__get_packed_size(&req);
        uint8_t buf[512];
        if (len > sizeof(buf)) {
            rc = -E2BIG;
            goto out;
        }
        etcdserverpb__range_request__pack(&req, buf);
        uint8_t *resp = NULL;
        size_t rl = 0;
        rc = kv_it_rpc_call(c, "/etcdserverpb.KV/Range", buf, len, &resp, &rl, o->timeout_ms,
                            errbuf, errcap);
        if (rc)
            goto out;
        Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, rl, resp);
        kv_it_rpc_free(resp);
        if (!r) {
            snprintf(errbuf, errcap, "undecodable RangeResponse");
            rc = -EPROTO;
            goto out;
        }
        size_t plen = strlen(o->prefix);
        for (size_t k = 0; k < r->n_kvs; k++) {
            Mvccpb__KeyValue *kv = r->kvs[k];
            (*present)++;
            if (kv->key.len != plen + 8)
                continue;
            char idx[9];
            memcpy(idx, kv->key.data + plen, 8);
            idx[8] = 0;
            uint32_t i = (uint32_t)strtoul(idx, NULL, 10);
            if (i >= o->n_keys)
                continue;
            seen[i] = 1;
            kv_it_loader_value(o->seed, i, expect, o->value_size);
            if (kv->value.len != o->value_size || memcmp(kv->value.data, expect, o->value_size))
                (*wrong)++;
        }
        int more = r->more && r->n_kvs > 0;
        if (more) {
            Mvccpb__KeyValue *last = r->kvs[r->n_kvs - 1];
            if (last->key.len + 1 >= sizeof(from)) {
                etcdserverpb__range_response__free_unpacked(r, NULL);
                rc = -E2BIG;
                goto out;
            }
            memcpy(from, last->key.data, last->key.len);
            from[last->key.len] = 0; /* next key: append \0 */
            from_len = last->key.len + 1;
        }
        etcdserverpb__range_response__free_unpacked(r, NULL);
        if (!more)
            break;
    }
    for (uint32_t i = 0; i < o->n_keys; i++)
        if ((!o->acked || o->acked[i]) && !seen[i])
            (*missing)++;
out:
    kv_it_rpc_close(c);
    free(seen);
    free(expect);
    return rc;
}
