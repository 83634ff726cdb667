/*
 * listen: binding a libuv TCP listener to host:port, shared by the gRPC and HTTP servers.
 * Host is an IPv4/IPv6 literal, or a name resolved once with blocking getaddrinfo, so call
 * it at startup only, never from a running loop's hot path.
 */
#ifndef KV_NET_LISTEN_H
#define KV_NET_LISTEN_H

#include <uv.h>

/* Binds tcp (initialised by the caller) to host:port and starts listening with backlog.
 * Returns 0, -EINVAL (bad port or unresolvable host) or a libuv error. */
int kv_net_listen(uv_tcp_t *tcp, const char *host, int port, int backlog, uv_connection_cb cb);

/* The locally bound port of tcp, or a negative libuv error. */
int kv_net_bound_port(uv_tcp_t *tcp);
/* The connected peer's address: its IP as text into ip (ip_cap bytes, "?" for a family other
 * than IPv4/IPv6) and its port into *port. Returns 0, or a negative libuv error (ip and *port
 * untouched) when the peer address is unknown. */
int kv_net_peer_addr(uv_tcp_t *tcp, char *ip, size_t ip_cap, int *port);
/* Writes the connected peer's "ip:port" into buf (cap bytes). Returns 0, or a negative libuv
 * error (buf untouched) when the peer address is unknown. */
int kv_net_peer_name(uv_tcp_t *tcp, char *buf, size_t cap);

#endif
