/*
 * rpc_client: the unary-call interface the durability tests and kvbench use.
 *
 * Contract:
 * - Backed by libkvclient (kvc_open / kvc_call_unary). kv_it_rpc_backend() names it.
 * - One kv_it_rpc per thread; each owns its own connection.
 * - Return 0 on success; a negative errno-style code or KV_IT_GRPC_STATUS otherwise, with
 *   a human-readable reason in errbuf.
 */
#ifndef KV_IT_RPC_CLIENT_H
#define KV_IT_RPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_it_rpc kv_it_rpc;

/* "libkvclient". */
const char *kv_it_rpc_backend(void);

/* endpoint is "127.0.0.1:<port>". *out is owned by the caller (kv_it_rpc_close). */
int kv_it_rpc_open(kv_it_rpc **out, const char *endpoint, uint32_t timeout_ms, char *errbuf,
                   size_t errcap);
void kv_it_rpc_close(kv_it_rpc *c);

/* Many clients, one I/O thread: a kvc_loop_group (each client keeps its own
 * connection). A benchmark with
 * 64 clients then runs 64 caller threads + 1 I/O thread instead of 128 threads. */
typedef struct kv_it_rpc_group kv_it_rpc_group;
int kv_it_rpc_group_new(kv_it_rpc_group **out);
void kv_it_rpc_group_free(kv_it_rpc_group *g);
/* kv_it_rpc_open in group g (NULL = the client's own I/O thread). */
int kv_it_rpc_open_in(kv_it_rpc **out, kv_it_rpc_group *g, const char *endpoint,
                      uint32_t timeout_ms, char *errbuf, size_t errcap);

/* One unary call. On 0, *resp is owned by the caller and freed with kv_it_rpc_free(). */
int kv_it_rpc_call(kv_it_rpc *c, const char *method, const uint8_t *req, size_t req_len,
                   uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, char *errbuf,
                   size_t errcap);
void kv_it_rpc_free(void *p);

/* One unary call without waiting: cb runs once, on the client's I/O thread (the group's
 * when opened in one), with status 0 and the response (owned by cb: kv_it_rpc_free), or a
 * negative code and a reason (resp NULL). Callable from cb itself. Returns 0 when queued,
 * or a negative code with errbuf set and cb never called. */
typedef void (*kv_it_rpc_cb)(void *arg, int status, const char *reason, uint8_t *resp,
                             size_t resp_len);
int kv_it_rpc_call_async(kv_it_rpc *c, const char *method, const uint8_t *req, size_t req_len,
                         uint32_t timeout_ms, kv_it_rpc_cb cb, void *arg, char *errbuf,
                         size_t errcap);

/* Convenience wrappers over the generated etcdserverpb messages. */
int kv_it_rpc_put(kv_it_rpc *c, const void *key, size_t key_len, const void *val, size_t val_len,
                  uint32_t timeout_ms, int64_t *revision, char *errbuf, size_t errcap);

/* Range [key, range_end) with count_only; *count receives the count. */
int kv_it_rpc_count(kv_it_rpc *c, const char *key, const char *range_end, uint32_t timeout_ms,
                    int64_t *count, char *errbuf, size_t errcap);

/* Gets one key's value: *val malloc'd (free()), *found 0/1. */
int kv_it_rpc_get(kv_it_rpc *c, const char *key, uint32_t timeout_ms, int *found, char **val,
                  size_t *val_len, char *errbuf, size_t errcap);

#endif
