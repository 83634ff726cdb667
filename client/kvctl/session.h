/*
 * kvctl concurrency helpers: clientv3/concurrency's Session (a lease kept alive), and the
 * waits its Mutex and Election are built on (waitDelete, waitDeletes), with the same key
 * layout (<prefix>/<lease id in hex>) so kvctl and etcdctl / Go clients interoperate.
 *
 * Signals: kvctl_sig_block() must run before the client is opened (the I/O thread inherits
 * the mask); kvctl_sig_pending() then reports SIGINT/SIGTERM without a handler.
 */
#ifndef KVCTL_SESSION_H
#define KVCTL_SESSION_H

#include <stdatomic.h>

#include "kvctl.h"

struct kvctl_session {
    kvc_client *c;
    int64_t lease;
    kvc_keepalive *ka;
    atomic_int lost;
};

/* Grant a lease of ttl seconds and keep it alive. 0, or an exit status after "Error: ...". */
int kvctl_session_open(struct kvctl *k, kvc_client *c, int64_t ttl, struct kvctl_session *s);
/* Stop the keepalive (the lease is left to expire, as etcdctl does). */
void kvctl_session_close(struct kvctl_session *s);

void kvctl_sig_block(void);
/* Waits up to ms for SIGINT/SIGTERM; returns the signal or 0. */
int kvctl_sig_wait(unsigned ms);

/* Result of a wait: 0 done, 1 interrupted by a signal, 2 session lost, or an exit status
 * after printing "Error: ..." (>= 3 never clashes: exit statuses used here are 1). */
enum { KVCTL_WAIT_OK = 0, KVCTL_WAIT_SIGNAL = -1, KVCTL_WAIT_LOST = -2 };

/* waitDeletes: until no key under pfx has create_revision <= max_rev, wait for the deletion
 * of the newest such key. *hdr_rev receives the revision of the last Get. */
int kvctl_wait_deletes(struct kvctl *k, struct kvctl_session *s, const char *pfx, int64_t max_rev,
                       int64_t *hdr_rev);

/* Prints the Range result for key as `get` would (display.Get). */
int kvctl_print_key(struct kvctl *k, const char *key);

/* Copy of a key as a C string (keys here are ASCII "<name>/<hex>"). */
char *kvctl_strndup_bytes(const uint8_t *p, size_t n);

#endif
