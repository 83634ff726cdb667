/*
 * proxy_naming.h - the record a grpc-proxy registers under --resolver-prefix, as etcd 3.4
 * writes and reads it (clientv3/naming: the JSON of grpc's naming.Update; proxy/grpcproxy/
 * register.go: its Metadata, the JSON of {"name": hostname} as a string). docs/proxy.md,
 * "Registration".
 *
 * Wire: {"Op":0,"Addr":"<addr>","Metadata":"{\"name\":\"<hostname>\"}"}, strings escaped as
 * Go's encoding/json does (HTML-safe: <, >, & as \u003c...; invalid UTF-8 as \ufffd).
 *
 * A pure module: no I/O, no state. Results are malloc'd, owned by the caller (free).
 * Functions return 0 or a negative errno (-EINVAL: the input is not what etcd would decode,
 * -ENOMEM).
 */
#ifndef KV_PROXY_NAMING_H
#define KV_PROXY_NAMING_H

#include <stddef.h>
#include <stdint.h>

/* The value etcd's Register puts at <prefix>/<addr>: *out (NUL-terminated), *len. */
int kv_proxy_naming_encode(const char *addr, const char *hostname, char **out, size_t *len);

/* A registered value, as etcd's resolver reads it (json.Unmarshal into naming.Update):
 * -EINVAL when etcd would skip the record (not JSON, Addr not a string, Op not a uint8...).
 * *addr: the Addr ("" when absent). *meta: the Metadata when it is a JSON string, else NULL
 * (absent, null, a number...: etcd's clusterProxy then fails MemberList, as it decodes
 * fmt.Sprint of it). */
int kv_proxy_naming_decode(const uint8_t *v, size_t len, char **addr, char **meta);

/* The proxy's name in a Metadata string (etcd's decodeMeta: JSON {"name": ...}, matched
 * case-insensitively; null or absent: ""). -EINVAL when etcd's decodeMeta fails. */
int kv_proxy_naming_meta_name(const char *meta, char **name);

#endif
