/*
 * kvctl elect <name> [proposal] / elect -l <name> (etcdctl 3.4's elect_command.go with
 * clientv3/concurrency's Election): campaign puts <name>/<lease id hex> = proposal with a
 * session lease (60 s), waits for the deletion of older candidates, prints the leader key
 * and value, and resigns (deletes the key) on SIGINT/SIGTERM. -l observes: prints the
 * current leader and every change (Election.Observe).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "print_kv.h"
#include "session.h"

#define SESSION_TTL 60

/* display.Get of a one-kv response */
static void print_leader(struct kvctl *k, const kvc_header *h, const kvc_kv *kv)
{
    Etcdserverpb__ResponseHeader ph;
    etcdserverpb__response_header__init(&ph);
    ph.cluster_id = h->cluster_id;
    ph.member_id = h->member_id;
    ph.revision = h->revision;
    ph.raft_term = h->raft_term;
    Mvccpb__KeyValue pk;
    mvccpb__key_value__init(&pk);
    pk.key.data = (uint8_t *)kv->key;
    pk.key.len = kv->key_len;
    pk.value.data = (uint8_t *)kv->value;
    pk.value.len = kv->value_len;
    pk.create_revision = kv->create_revision;
    pk.mod_revision = kv->mod_revision;
    pk.version = kv->version;
    pk.lease = kv->lease;
    Mvccpb__KeyValue *kvs[1] = {&pk};
    Etcdserverpb__RangeResponse r;
    etcdserverpb__range_response__init(&r);
    r.header = &ph;
    r.kvs = kvs;
    r.n_kvs = 1;
    kvctl_print_get(k, &r, false, false);
    fflush(stdout);
}

/* Observe's watch: the first PUT (or DELETE) seen, copied out of the callback. */
struct obs {
    pthread_mutex_t mu;
    int have, deleted, canceled;
    kvc_header h;
    kvc_kv kv;
    uint8_t *key, *val;
    int mode; /* 0: wait for the first PUT; 1: report PUTs until DELETE */
    struct kvctl *k;
};

static void on_obs(void *arg, const kvc_watch_response *r)
{
    struct obs *o = arg;
    pthread_mutex_lock(&o->mu);
    if (r->canceled)
        o->canceled = 1;
    for (size_t i = 0; i < r->n_events && !o->deleted; i++) {
        const kvc_event *e = &r->events[i];
        if (o->mode == 0) {
            if (e->type == KVC_EVENT_PUT && !o->have) {
                o->have = 1;
                o->h = r->header;
                o->h.revision = e->kv.mod_revision;
                o->kv = e->kv;
                o->key = (uint8_t *)kvctl_strndup_bytes(e->kv.key, e->kv.key_len);
                o->val = (uint8_t *)kvctl_strndup_bytes(e->kv.value, e->kv.value_len);
                o->kv.key = o->key;
                o->kv.value = o->val;
            }
        } else if (e->type == KVC_EVENT_DELETE) {
            o->deleted = 1;
        } else {
            print_leader(o->k, &r->header, &e->kv);
        }
    }
    pthread_mutex_unlock(&o->mu);
}

/* Waits until cond(o) or a signal/cancel; returns 0, KVCTL_WAIT_SIGNAL or -3 (lost). */
static int obs_wait(struct obs *o, int want_have)
{
    for (;;) {
        pthread_mutex_lock(&o->mu);
        int done = want_have ? o->have : o->deleted;
        int canceled = o->canceled;
        pthread_mutex_unlock(&o->mu);
        if (done)
            return 0;
        if (canceled)
            return -3;
        if (kvctl_sig_wait(50))
            return KVCTL_WAIT_SIGNAL;
    }
}

static int observe(struct kvctl *k, kvc_client *c, const char *name)
{
    char *pfx = NULL;
    char m[300];
    if (asprintf(&pfx, "%s/", name) < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = 0;
    for (;;) {
        kvc_range_opts ro = {
            .prefix = 1, .sort_order = KVC_SORT_ASCEND, .sort_target = KVC_SORT_CREATE, .limit = 1};
        kvc_range_result r;
        kvc_error e;
        if (kvc_get(c, pfx, strlen(pfx), &ro, k->command_timeout_ms, &r, &e) != 0) {
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "elect: observer lost");
            break;
        }
        struct obs o;
        memset(&o, 0, sizeof o);
        pthread_mutex_init(&o.mu, NULL);
        o.k = k;
        kvc_watch *w = NULL;
        int wrc = 0;
        if (r.n_kvs == 0) {
            kvc_watch_opts wo = {.prefix = 1, .start_revision = r.header.revision};
            if (kvc_watch_create(c, pfx, strlen(pfx), &wo, 0, on_obs, &o, &w, NULL, &e) != 0) {
                kvc_range_result_free(&r);
                rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
                break;
            }
            wrc = obs_wait(&o, 1);
            kvc_watch_cancel(w);
            if (wrc == 0)
                print_leader(k, &o.h, &o.kv);
        } else {
            o.h = r.header;
            o.kv = r.kvs[0];
            o.key = (uint8_t *)kvctl_strndup_bytes(r.kvs[0].key, r.kvs[0].key_len);
            o.kv.key = o.key;
            o.kv.value = o.val = (uint8_t *)kvctl_strndup_bytes(r.kvs[0].value, r.kvs[0].value_len);
            print_leader(k, &o.h, &o.kv);
        }
        kvc_range_result_free(&r);
        if (wrc == 0) {
            o.mode = 1;
            kvc_watch_opts wo = {.start_revision = o.h.revision + 1};
            if (kvc_watch_create(c, o.kv.key, o.kv.key_len, &wo, 0, on_obs, &o, &w, NULL, &e) !=
                0) {
                wrc = -3;
            } else {
                wrc = obs_wait(&o, 0);
                kvc_watch_cancel(w);
            }
        }
        free(o.key);
        free(o.val);
        pthread_mutex_destroy(&o.mu);
        if (wrc == KVCTL_WAIT_SIGNAL) {
            rc = 0;
            break;
        }
        if (wrc != 0) {
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "elect: observer lost");
            break;
        }
    }
    free(pfx);
    return rc;
}

/* Election.Campaign, then print the key and wait for a signal; Resign. */
static int campaign(struct kvctl *k, kvc_client *c, const char *name, const char *val)
{
    struct kvctl_session s;
    int rc = kvctl_session_open(k, c, SESSION_TTL, &s);
    if (rc)
        return rc;
    char *pfx = NULL, *key = NULL;
    char m[300];
    if (asprintf(&pfx, "%s/", name) < 0 ||
        asprintf(&key, "%s%" PRIx64, pfx, (uint64_t)s.lease) < 0) {
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        goto out;
    }
    size_t kl = strlen(key), vl = strlen(val);
    kvc_txn *t = kvc_txn_new();
    kvc_put_opts po = {.lease = s.lease};
    kvc_txn_cmp_int(t, key, kl, KVC_CMP_CREATE, KVC_CMP_EQUAL, 0);
    kvc_txn_put(t, KVC_TXN_SUCCESS, key, kl, val, vl, &po);
    kvc_txn_get(t, KVC_TXN_FAILURE, key, kl, NULL);
    kvc_txn_result r;
    kvc_error e;
    int trc = kvc_txn_commit(c, t, 0, k->command_timeout_ms, &r, &e);
    kvc_txn_free(t);
    if (trc != 0) {
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
        goto out;
    }
    int64_t leader_rev = r.header.revision;
    int proclaim = 0;
    if (!r.succeeded && r.n_responses > 0 && r.responses[0].range.n_kvs > 0) {
        const kvc_kv *kv = &r.responses[0].range.kvs[0];
        leader_rev = kv->create_revision;
        proclaim = kv->value_len != vl || memcmp(kv->value, val, vl) != 0;
    }
    kvc_txn_result_free(&r);
    if (proclaim) { /* Proclaim: overwrite our value while we still own the key */
        t = kvc_txn_new();
        kvc_txn_cmp_int(t, key, kl, KVC_CMP_CREATE, KVC_CMP_EQUAL, leader_rev);
        kvc_txn_put(t, KVC_TXN_SUCCESS, key, kl, val, vl, &po);
        trc = kvc_txn_commit(c, t, 0, k->command_timeout_ms, &r, &e);
        kvc_txn_free(t);
        if (trc != 0) {
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
            goto out;
        }
        int ok = r.succeeded;
        kvc_txn_result_free(&r);
        if (!ok) {
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "election: not leader");
            goto out;
        }
    }
    rc = kvctl_wait_deletes(k, &s, pfx, leader_rev - 1, NULL);
    if (rc == KVCTL_WAIT_SIGNAL || rc == KVCTL_WAIT_LOST) {
        rc = rc == KVCTL_WAIT_SIGNAL ? kvctl_fail(KVCTL_EXIT_ERROR, "context canceled")
                                     : kvctl_fail(KVCTL_EXIT_ERROR, "elect: session expired");
        goto out;
    }
    if (rc)
        goto out;
    if (kvctl_print_key(k, key) > 0) {
        rc = KVCTL_EXIT_ERROR;
        goto out;
    }
    for (;;) {
        if (kvctl_sig_wait(100))
            break;
        if (atomic_load(&s.lost)) {
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "elect: session expired");
            goto out;
        }
    }
    /* Resign */
    t = kvc_txn_new();
    kvc_txn_cmp_int(t, key, kl, KVC_CMP_CREATE, KVC_CMP_EQUAL, leader_rev);
    kvc_txn_delete(t, KVC_TXN_SUCCESS, key, kl, NULL);
    trc = kvc_txn_commit(c, t, 0, k->command_timeout_ms, &r, &e);
    kvc_txn_free(t);
    if (trc != 0)
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
    else
        kvc_txn_result_free(&r);
out:
    kvctl_session_close(&s);
    free(pfx);
    free(key);
    return rc;
}

int kvctl_cmd_elect(struct kvctl *k, int argc, char **argv)
{
    bool listen = false;
    struct kvctl_flag fl[] = {
        {"listen", 'l', KVCTL_FLAG_BOOL, &listen, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    if (np != 2 && np != 3) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "elect takes one election name argument and an "
                                             "optional proposal argument");
        goto out;
    }
    if (np == 2 && !listen) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "no proposal argument but -l not set");
        goto out;
    }
    if (np == 3 && listen) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "proposal given but -l is set");
        goto out;
    }
    kvctl_sig_block();
    int code = 0;
    kvc_client *c = kvctl_client(k, &code);
    if (!c) {
        rc = code;
        goto out;
    }
    rc = np == 2 ? observe(k, c, pos[1]) : campaign(k, c, pos[1], pos[2]);
out:
    free(pos);
    return rc;
}
