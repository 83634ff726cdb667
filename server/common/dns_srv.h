/*
 * dns_srv: DNS SRV discovery of a cluster's client endpoints, as etcd 3.4's pkg/srv GetClient
 * (etcdctl --discovery-srv, etcd grpc-proxy --discovery-srv).
 *
 * The records of _etcd-client-ssl[-<name>]._tcp.<domain> become https:// endpoints, then those
 * of _etcd-client[-<name>]._tcp.<domain> http:// ones; discovery fails only when both lookups
 * fail. Each endpoint is "<scheme>://<target>:<port>" with the target as DNS gives it, its
 * trailing dot kept (Go's net.LookupSRV does the same; the dialer resolves it). Within one
 * lookup the records are ordered by priority, then by weight, heaviest first (Go shuffles equal
 * priorities by weight; this order is deterministic).
 *
 * The lookups use the system resolver (glibc's res_nsearch: /etc/resolv.conf, its search list
 * and timeouts) and block: callers run them at startup, before any loop. Thread-safe (a
 * resolver state per call). No globals.
 */
#ifndef KV_DNS_SRV_H
#define KV_DNS_SRV_H

#include <stddef.h>

/* Discovers the endpoints of domain (service_name: etcd's --discovery-srv-name, NULL or "" for
 * none). On success returns 0 with *eps a malloc'd array of *n malloc'd strings (free each,
 * then the array; *n may be 0 when both names exist without records). On failure returns a
 * negative errno (-ENOENT: neither name resolved, -ENOMEM) and writes etcd's message to err:
 * "dns lookup errors: lookup <name> on <server>: no such host and lookup <name> on ...". */
int kv_srv_client_endpoints(const char *domain, const char *service_name, char ***eps, size_t *n,
                            char *err, size_t errlen);

/* etcd's transport.ValidateSecureEndpoints, as its gateway and grpc-proxy apply it when
 * --insecure-discovery is off: keeps, in order, the https:// endpoints that a TCP connection
 * reaches within timeout_ms (a plain connect, as etcd's: no handshake); frees the others and
 * describes them in why, comma-separated: "\"http://a.:1\" is insecure" or
 * "\"https://b.:2\" failed to dial (dial tcp b.:2: connect: connection refused)" (why[0] = 0:
 * all kept). Blocking. Returns the number kept (eps[0..kept) compacted). */
size_t kv_srv_keep_secure(char **eps, size_t n, unsigned timeout_ms, char *why, size_t cap);

/* A member's own advertised peer URL, for kv_srv_cluster. */
typedef struct kv_srv_self {
    const char *host; /* name or IP literal */
    unsigned port;
    int tls; /* https:// */
} kv_srv_self;

/* The initial cluster from DNS SRV records (etcd's --discovery-srv for members: GetCluster):
 * the records of _etcd-server-ssl[-<name>]._tcp.<domain> as https:// peer URLs, then those of
 * _etcd-server[-<name>]._tcp.<domain> as http:// ones. A record whose target:port resolves
 * to the address one of self[] resolves to is this member, named self_name; the others are
 * named "0", "1", ... in record order, counted per service, as etcd; a URL is the target
 * without its trailing dot. As etcd's documentation (not its 3.4 code, which needs the -ssl
 * records) discovery fails only when neither service yields a member. On success 0 with
 * *out a malloc'd "name=url,name=url,..." (free it); else -ENOENT or -ENOMEM with etcd's
 * message ("error querying DNS SRV records for _etcd-server-ssl lookup ...: no such host; ...")
 * in err. Blocking (startup). */
int kv_srv_cluster(const char *domain, const char *service_name, const char *self_name,
                   const kv_srv_self *self, size_t n_self, char **out, char *err, size_t errlen);

/* Frees what kv_srv_client_endpoints returned. */
void kv_srv_endpoints_free(char **eps, size_t n);

#endif
