/* kvctl concurrency helpers: see session.h. */
#include "session.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "print_kv.h"

static void on_ka(void *arg, const kvc_ka_event *ev)
{
    struct kvctl_session *s = arg;
    if (ev->type == KVC_KA_LOST)
        atomic_store(&s->lost, 1);
}

int kvctl_session_open(struct kvctl *k, kvc_client *c, int64_t ttl, struct kvctl_session *s)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    kvc_lease_grant_result g;
    kvc_error e;
    char m[300];
    if (kvc_lease_grant(c, ttl, 0, 0, k->command_timeout_ms, &g, &e) != 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
    s->lease = g.id;
    if (kvc_lease_keepalive(c, g.id, g.ttl, on_ka, s, &s->ka, &e) != 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
    return 0;
}

void kvctl_session_close(struct kvctl_session *s)
{
    if (s->ka)
        kvc_keepalive_stop(s->ka);
    s->ka = NULL;
}

void kvctl_sig_block(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* a shell's background job starts with SIGINT ignored; etcdctl (Go) un-ignores it */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

int kvctl_sig_wait(unsigned ms)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    int sig = sigtimedwait(&set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

char *kvctl_strndup_bytes(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

struct delwait {
    atomic_int deleted, canceled;
    char reason[256];
    int status;
};

static void on_del(void *arg, const kvc_watch_response *r)
{
    struct delwait *d = arg;
    for (size_t i = 0; i < r->n_events; i++)
        if (r->events[i].type == KVC_EVENT_DELETE)
            atomic_store(&d->deleted, 1);
    if (r->canceled) {
        snprintf(d->reason, sizeof d->reason, "%s", r->cancel_reason);
        d->status = r->status;
        atomic_store(&d->canceled, 1);
    }
}

/* waitDelete: watch key from rev until a DELETE event. */
static int wait_delete(struct kvctl *k, struct kvctl_session *s, const char *key, int64_t rev)
{
    struct delwait d;
    memset(&d, 0, sizeof d);
    kvc_watch_opts o = {.start_revision = rev};
    kvc_watch *w = NULL;
    kvc_error e;
    char m[300];
    if (kvc_watch_create(s->c, key, strlen(key), &o, k->dial_timeout_ms + k->command_timeout_ms,
                         on_del, &d, &w, NULL, &e) != 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
    int rc = KVCTL_WAIT_OK;
    for (;;) {
        if (atomic_load(&d.deleted))
            break;
        if (atomic_load(&d.canceled)) {
            kvc_error ce = {.code = -d.status};
            snprintf(ce.message, sizeof ce.message, "%s", d.reason);
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&ce, m, sizeof m));
            break;
        }
        if (atomic_load(&s->lost)) {
            rc = KVCTL_WAIT_LOST;
            break;
        }
        if (kvctl_sig_wait(50)) {
            rc = KVCTL_WAIT_SIGNAL;
            break;
        }
    }
    kvc_watch_cancel(w);
    return rc;
}

int kvctl_wait_deletes(struct kvctl *k, struct kvctl_session *s, const char *pfx, int64_t max_rev,
                       int64_t *hdr_rev)
{
    for (;;) {
        /* WithLastCreate + WithMaxCreateRev */
        kvc_range_opts ro = {.prefix = 1,
                             .sort_order = KVC_SORT_DESCEND,
                             .sort_target = KVC_SORT_CREATE,
                             .limit = 1,
                             .max_create_revision = max_rev};
        kvc_range_result r;
        kvc_error e;
        char m[300];
        if (kvc_get(s->c, pfx, strlen(pfx), &ro, k->command_timeout_ms, &r, &e) != 0)
            return kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
        if (hdr_rev)
            *hdr_rev = r.header.revision;
        if (r.n_kvs == 0) {
            kvc_range_result_free(&r);
            return KVCTL_WAIT_OK;
        }
        char *last = kvctl_strndup_bytes(r.kvs[0].key, r.kvs[0].key_len);
        int64_t rev = r.header.revision;
        kvc_range_result_free(&r);
        if (!last)
            return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        int rc = wait_delete(k, s, last, rev);
        free(last);
        if (rc != KVCTL_WAIT_OK)
            return rc;
    }
}

int kvctl_print_key(struct kvctl *k, const char *key)
{
    Etcdserverpb__RangeRequest req;
    etcdserverpb__range_request__init(&req);
    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    ProtobufCMessage *resp = NULL;
    int rc = kvctl_call(k, "/etcdserverpb.KV/Range", &req.base,
                        &etcdserverpb__range_response__descriptor, &resp, k->command_timeout_ms,
                        KVC_IDEMPOTENT, KVCTL_EXIT_ERROR, NULL);
    if (rc)
        return rc;
    Etcdserverpb__RangeResponse *rr = (Etcdserverpb__RangeResponse *)resp;
    if (rr->n_kvs == 0)
        rc = -1;
    else
        rc = kvctl_print_get(k, rr, false, false);
    fflush(stdout);
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}
