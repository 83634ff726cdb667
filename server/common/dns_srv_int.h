/*
 * dns_srv_int: what dns_srv.c and dns_srv_cluster.c share (not for other modules).
 */
#ifndef KV_DNS_SRV_INT_H
#define KV_DNS_SRV_INT_H

#include <arpa/nameser.h>
#include <stddef.h>

struct kv_srv_rec {
    char target[NS_MAXDNAME + 2]; /* with the trailing dot, as Go gives it */
    unsigned port, priority, weight;
};

/* name's SRV records through the system resolver (res_nsearch), ordered by priority, then
 * weight (heaviest first), into *recs (malloc'd, *n of them; free it). 0, -ENOENT (err filled
 * with Go's "lookup <name> on <server>: no such host") or -ENOMEM. Blocking. */
int kv_srv__lookup(const char *name, struct kv_srv_rec **recs, size_t *n, char *err, size_t errlen);

#endif
