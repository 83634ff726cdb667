/*
 * proxy_ns.h - `kvd grpc-proxy start --namespace=<pfx>`: the key rewriting of etcd 3.4's
 * clientv3/namespace (kv.go, watch.go, lease.go, util.go), which etcd's grpc-proxy wraps
 * around its client's KV, Watcher and Lease (etcdmain/grpc_proxy.go). docs/proxy.md,
 * "Namespace".
 *
 * Contract (etcd's rules, mirrored exactly):
 * - Requests (client -> member): every key gets the prefix. A range end is rewritten by
 *   etcd's prefixInterval: empty stays empty (one key); "\0" (every key >= key) becomes the
 *   end of the namespace, the prefix with its last byte incremented, carries propagated
 *   leftwards ("\0" when the prefix is all 0xff bytes); any other end gets the prefix. So
 *   an empty key with range end "\0" is the whole namespace. Txn compares (key, range_end
 *   when non-empty) and the request ops of both branches are rewritten, nested txns
 *   recursively. Range, Put and DeleteRange with an empty key are refused, as etcd's
 *   kvPrefix.Do does (ErrEmptyKey, INVALID_ARGUMENT "etcdserver: key is not provided");
 *   keys inside a txn are not checked (etcd neither). Compact has no key: unchanged.
 * - Responses (member -> client): the prefix is stripped from every returned key (kvs,
 *   prev_kv, prev_kvs, the responses of a txn, nested ones included). A key that does not
 *   start with the prefix (impossible for a range rewritten as above) is left as is.
 *   LeaseTimeToLive keys (keys=true): stripped, and keys outside the namespace dropped
 *   (etcd's leasePrefix.TimeToLive). Errors are not touched (the caller relays them).
 * - Watch: a create request's key and range_end are rewritten as a Range's (an empty key
 *   is allowed, as in etcd's watcherPrefix); the kv and prev_kv keys of events are stripped.
 * - Everything else (Lease grant/revoke/keepalive/leases, Election, Lock, Auth, Cluster,
 *   Maintenance) is not rewritten, as etcd 3.4's proxy.
 *
 * Bounds: a Txn request is pre-scanned (pb/pb_scan.h, without recursion) before it is
 * unpacked: past KV_TXN_MAX_DEPTH levels of nesting it is refused as kvd's members refuse it
 * (INVALID_ARGUMENT "etcdserver: too many operations in txn request"); the op budget itself
 * is left to the members (the proxy does not know their --max-txn-ops). Everything else is
 * bounded by the gRPC server's request size and the member's response.
 *
 * Memory: functions on unpacked protobuf-c messages work in place; a rewritten bytes field
 * gets a malloc'd buffer and the old one is freed, so the message must have been unpacked
 * with the default allocator (NULL), or built with malloc'd (or NULL) bytes; the caller
 * frees it as usual (free_unpacked). Byte-level functions return a malloc'd *out.
 *
 * Pure functions of their arguments: no global state, any thread (the proxy calls them on
 * its loop). Return 0 or a negative errno as documented per function.
 */
#ifndef KV_PROXY_NS_H
#define KV_PROXY_NS_H

#include "rpc.pb-c.h"

#include <stddef.h>
#include <stdint.h>

/* The namespace: the prefix bytes (borrowed; non-empty when used). */
typedef struct kv_proxy_ns {
    const uint8_t *pfx;
    size_t len;
} kv_proxy_ns;

/* etcd's prefixInterval on a key and its range end (end may be NULL: a key alone, as a
 * Put's), in place. 0 or -ENOMEM (then nothing changed). */
int kv_proxy_ns_prefix_range(const kv_proxy_ns *ns, ProtobufCBinaryData *key,
                             ProtobufCBinaryData *end);
/* Removes the prefix from key in place (same buffer). 0, or -ERANGE when key does not start
 * with it (key unchanged). */
int kv_proxy_ns_strip(const kv_proxy_ns *ns, ProtobufCBinaryData *key);

/* A TxnRequest's compares and ops, nested txns included (the caller bounded the depth). */
int kv_proxy_ns_prefix_txn(const kv_proxy_ns *ns, Etcdserverpb__TxnRequest *t);
/* A TxnResponse's responses, nested ones included. */
void kv_proxy_ns_strip_txn(const kv_proxy_ns *ns, Etcdserverpb__TxnResponse *r);

/* A unary request as the member must see it. method is the gRPC path. 0 with *out NULL:
 * the method is not rewritten (send msg as is); 0 with *out (malloc'd, *olen bytes): send
 * that. Errors: -ENODATA empty key (Range/Put/DeleteRange), -E2BIG txn nested too deep,
 * -EBADMSG undecodable, -ENOMEM. */
int kv_proxy_ns_request(const kv_proxy_ns *ns, const char *method, const uint8_t *msg, size_t len,
                        uint8_t **out, size_t *olen);
/* A member's OK response as the client must see it: as kv_proxy_ns_request (0 with *out
 * NULL: unchanged), errors -EBADMSG, -ENOMEM. */
int kv_proxy_ns_response(const kv_proxy_ns *ns, const char *method, const uint8_t *resp, size_t len,
                         uint8_t **out, size_t *olen);

/* A client's WatchCreateRequest before it becomes an upstream watcher. 0 or -ENOMEM. */
int kv_proxy_ns_watch_create(const kv_proxy_ns *ns, Etcdserverpb__WatchCreateRequest *c);
/* An upstream WatchResponse before it is packed for clients: event keys stripped. */
void kv_proxy_ns_watch_response(const kv_proxy_ns *ns, Etcdserverpb__WatchResponse *r);

#endif
