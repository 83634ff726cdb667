/*
 * l4_gateway: `kvd gateway start`, etcd's L4 gateway (etcd gateway start, op-guide/gateway.md):
 * a TCP proxy in front of a cluster's client URLs. Each accepted connection is spliced to one
 * endpoint, chosen round robin; an endpoint that refuses the connection is skipped for
 * --retry-delay and the next one is tried, as etcd's gateway does. Bytes are copied as they
 * come: TLS and HTTP/2 pass through untouched.
 *
 * Flags (etcd's): --listen-addr (127.0.0.1:23790), --endpoints (127.0.0.1:2379; host:port or
 * http(s)://host:port, comma-separated), --retry-delay (1m). kvd's bounds: --max-connections
 * (10000) and, per direction, at most 1 MiB written but not yet sent before the other side's
 * reading pauses. --discovery-srv (--discovery-srv-name, --insecure-discovery,
 * --trusted-ca-file) takes the endpoints from DNS SRV records as etcd's gateway does
 * (common/dns_srv.h); host names, given or discovered, are resolved once at start. Prints
 * "ready to proxy client requests" once listening.
 *
 * Threads: one libuv loop, the caller's thread. Memory per connection: two TCP handles and
 * the bytes in flight (bounded above); a connection is freed in its handles' close callbacks.
 */
#ifndef KV_L4_GATEWAY_H
#define KV_L4_GATEWAY_H

/* argv[0] is "gateway". Returns the process exit code (runs until SIGINT/SIGTERM). */
int kv_gateway_main(int argc, char **argv);

#endif
