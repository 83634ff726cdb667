/*
 * kvt_dnsns: DNS records for one test, seen only by the processes the test starts: the
 * responder tests/lib/kvt_dns serves them on 127.53.x.y:53 and writes a resolv.conf naming it;
 * a process started under kvt_dnsns_wrap's argv prefix (`unshare --mount` + a bind mount)
 * sees that file as its /etc/resolv.conf. glibc's resolver only talks to port 53, hence root
 * (the mount and the port); kvt_dnsns_missing says why a machine cannot.
 *
 * Ownership: a kvt_dnsns is caller-owned; kvt_dnsns_stop kills the responder. One test
 * thread. Functions return 0 or a negative errno.
 */
#ifndef KVT_DNSNS_H
#define KVT_DNSNS_H

#include "kvt_proc.h"

#include <limits.h>
#include <stdint.h>

typedef struct kvt_dnsns {
    kvt_proc proc;
    char addr[32];              /* the responder's address, 127.53.x.y */
    char resolv[PATH_MAX + 32]; /* the resolv.conf naming it */
    const char *wrap[7];        /* the argv prefix: unshare ... <resolv> */
} kvt_dnsns;

/* NULL when this machine can run it, else why not (not root, no unshare, no kvt_dns). */
const char *kvt_dnsns_missing(void);

/* Starts the responder with its record flags (kvt_dns.c: "--srv", "name=target:port", "--a",
 * "name=ipv4", ...; NULL-terminated) on 127.53.<seed >> 8>.<seed & 255> (a test passes one
 * of its free ports, so that parallel tests differ and a run's address is reproducible),
 * keeping its files in dir; waits (5 s) for the resolv.conf. */
int kvt_dnsns_start(kvt_dnsns *d, const char *dir, uint16_t seed, const char *const *records);

void kvt_dnsns_stop(kvt_dnsns *d);

#endif
