/* rpc_client: see rpc_client.h. */
#include "rpc_client.h"
#include "grpc_raw.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvclient.h"

struct kv_it_rpc {
    kvc_client *kc;
};

const char *kv_it_rpc_backend(void)
{
    return "libkvclient";
}

int kv_it_rpc_group_new(kv_it_rpc_group **out)
{
    kvc_error err = {0};
    return kvc_loop_group_new((kvc_loop_group **)out, &err);
}

void kv_it_rpc_group_free(kv_it_rpc_group *g)
{
    kvc_loop_group_free((kvc_loop_group *)g);
}

int kv_it_rpc_open(kv_it_rpc **out, const char *endpoint, uint32_t timeout_ms, char *errbuf,
                   size_t errcap)
{
    return kv_it_rpc_open_in(out, NULL, endpoint, timeout_ms, errbuf, errcap);
}

int kv_it_rpc_open_in(kv_it_rpc **out, kv_it_rpc_group *g, const char *endpoint,
                      uint32_t timeout_ms, char *errbuf, size_t errcap)
{
    kv_it_rpc *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.loop_group = (kvc_loop_group *)g;
    const char *eps[1] = {endpoint};
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.dial_timeout_ms = timeout_ms;
    kvc_error err = {0};
    int rc = kvc_open(&c->kc, &cfg, &err);
    if (rc) {
        snprintf(errbuf, errcap, "kvc_open: %d %s", err.code, err.message);
        free(c);
        return rc < 0 ? rc : -EIO;
    }
    *out = c;
    return 0;
}

void kv_it_rpc_close(kv_it_rpc *c)
{
    if (!c)
        return;
    kvc_close(c->kc);
    free(c);
}

int kv_it_rpc_call(kv_it_rpc *c, const char *method, const uint8_t *req, size_t req_len,
                   uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, char *errbuf,
                   size_t errcap)
{
    kvc_error err = {0};
    int rc = kvc_call_unary(c->kc, method, req, req_len, resp, resp_len, timeout_ms, 0, &err);
    if (rc) {
        snprintf(errbuf, errcap, "%s: code %d: %s", method, err.code, err.message);
        return rc < 0 ? rc : KV_IT_GRPC_STATUS;
    }
    return 0;
}

void kv_it_rpc_free(void *p)
{
    kvc_free(p);
}

typedef struct async_call {
    kv_it_rpc_cb cb;
    void *arg;
} async_call;

static void async_done(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t resp_len)
{
    async_call a = *(async_call *)arg;
    free(arg);
    char reason[300] = "";
    if (status)
        snprintf(reason, sizeof(reason), "code %d: %s", err ? err->code : 0,
                 err ? err->message : "");
    a.cb(a.arg, status < 0 ? status : status ? KV_IT_GRPC_STATUS : 0, reason, resp, resp_len);
}

int kv_it_rpc_call_async(kv_it_rpc *c, const char *method, const uint8_t *req, size_t req_len,
                         uint32_t timeout_ms, kv_it_rpc_cb cb, void *arg, char *errbuf,
                         size_t errcap)
{
    async_call *a = malloc(sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->cb = cb;
    a->arg = arg;
    kvc_error err = {0};
    int rc = kvc_call_unary_async(c->kc, method, req, req_len, timeout_ms, 0, async_done, a, &err);
    if (rc) {
        free(a);
        snprintf(errbuf, errcap, "%s: code %d: %s", method, err.code, err.message);
        return rc < 0 ? rc : KV_IT_GRPC_STATUS;
    }
    return 0;
}

int kv_it_rpc_put(kv_it_rpc *c, const void *key, size_t key_len, const void *val, size_t val_len,
                  uint32_t timeout_ms, int64_t *revision, char *errbuf, size_t errcap)
{
    Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = key_len;
    req.value.data = (uint8_t *)val;
    req.value.len = val_len;
    size_t len = etcdserverpb__put_request__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    etcdserverpb__put_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int rc = kv_it_rpc_call(c, "/etcdserverpb.KV/Put", buf, len, &resp, &resp_len, timeout_ms,
                            errbuf, errcap);
    free(buf);
    if (rc)
        return rc;
    Etcdserverpb__PutResponse *pr = etcdserverpb__put_response__unpack(NULL, resp_len, resp);
    kv_it_rpc_free(resp);
    if (!pr) {
        snprintf(errbuf, errcap, "Put: undecodable response");
        return -EPROTO;
    }
    if (revision)
        *revision = pr->header ? pr->header->revision : 0;
    etcdserverpb__put_response__free_unpacked(pr, NULL);
    return 0;
}

static int do_range(kv_it_rpc *c, Etcdserverpb__RangeRequest *req, uint32_t timeout_ms,
                    Etcdserverpb__RangeResponse **out, char *errbuf, size_t errcap)
{
    size_t len = etcdserverpb__range_request__get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    etcdserverpb__range_request__pack(req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int rc = kv_it_rpc_call(c, "/etcdserverpb.KV/Range", buf, len, &resp, &resp_len, timeout_ms,
                            errbuf, errcap);
    free(buf);
    if (rc)
        return rc;
    *out = etcdserverpb__range_response__unpack(NULL, resp_len, resp);
    kv_it_rpc_free(resp);
    if (!*out) {
        snprintf(errbuf, errcap, "Range: undecodable response");
        return -EPROTO;
    }
    return 0;
}

int kv_it_rpc_count(kv_it_rpc *c, const char *key, const char *range_end, uint32_t timeout_ms,
                    int64_t *count, char *errbuf, size_t errcap)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    if (range_end) {
        req.range_end.data = (uint8_t *)range_end;
        req.range_end.len = range_end[0] ? strlen(range_end) : 1; /* "" means "\0" */
    }
    req.count_only = 1;
    Etcdserverpb__RangeResponse *r = NULL;
    int rc = do_range(c, &req, timeout_ms, &r, errbuf, errcap);
    if (rc)
        return rc;
    *count = r->count;
    etcdserverpb__range_response__free_unpacked(r, NULL);
    return 0;
}

int kv_it_rpc_get(kv_it_rpc *c, const char *key, uint32_t timeout_ms, int *found, char **val,
                  size_t *val_len, char *errbuf, size_t errcap)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    Etcdserverpb__RangeResponse *r = NULL;
    *found = 0;
    *val = NULL;
    *val_len = 0;
    int rc = do_range(c, &req, timeout_ms, &r, errbuf, errcap);
    if (rc)
        return rc;
    if (r->n_kvs == 1) {
        *found = 1;
        *val = malloc(r->kvs[0]->value.len + 1);
        if (!*val) {
            etcdserverpb__range_response__free_unpacked(r, NULL);
            return -ENOMEM;
        }
        memcpy(*val, r->kvs[0]->value.data, r->kvs[0]->value.len);
        (*val)[r->kvs[0]->value.len] = 0;
        *val_len = r->kvs[0]->value.len;
    }
    etcdserverpb__range_response__free_unpacked(r, NULL);
    return 0;
}
