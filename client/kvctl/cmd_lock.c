/*
 * kvctl lock <name> [cmd args...] (etcdctl 3.4's lock_command.go with clientv3/concurrency's
 * Mutex): a session lease (--ttl, default 10 s), the key <name>/<lease id hex> put with the
 * lease if absent, and a wait for the deletion of every key under <name>/ created before
 * ours, newest first. Holding the lock: prints the key (as `get`), runs the command with
 * ETCD_LOCK_KEY / ETCD_LOCK_REV and unlocks, or waits for SIGINT/SIGTERM and unlocks.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "out.h"
#include "session.h"
#include "spawn.h"

struct mutex {
    char *pfx; /* "<name>/" */
    char *key; /* "<name>/<lease hex>" */
    int64_t rev;
    int64_t hdr_rev;
};

static int unlock(struct kvctl *k, kvc_client *c, struct mutex *m)
{
    kvc_error e;
    char msg[300];
    if (kvc_delete(c, m->key, strlen(m->key), NULL, k->command_timeout_ms, NULL, &e) != 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, msg, sizeof msg));
    return 0;
}

/* Mutex.Lock */
static int lock(struct kvctl *k, struct kvctl_session *s, struct mutex *m)
{
    kvc_client *c = s->c;
    kvc_txn *t = kvc_txn_new();
    if (!t)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    size_t kl = strlen(m->key), pl = strlen(m->pfx);
    kvc_put_opts po = {.lease = s->lease};
    kvc_range_opts owner = {
        .prefix = 1, .sort_order = KVC_SORT_ASCEND, .sort_target = KVC_SORT_CREATE, .limit = 1};
    kvc_txn_cmp_int(t, m->key, kl, KVC_CMP_CREATE, KVC_CMP_EQUAL, 0);
    kvc_txn_put(t, KVC_TXN_SUCCESS, m->key, kl, "", 0, &po);
    kvc_txn_get(t, KVC_TXN_SUCCESS, m->pfx, pl, &owner);
    kvc_txn_get(t, KVC_TXN_FAILURE, m->key, kl, NULL);
    kvc_txn_get(t, KVC_TXN_FAILURE, m->pfx, pl, &owner);
    kvc_txn_result r;
    kvc_error e;
    char msg[300];
    int rc = kvc_txn_commit(c, t, 0, k->command_timeout_ms, &r, &e);
    kvc_txn_free(t);
    if (rc != 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, msg, sizeof msg));
    m->rev = r.header.revision;
    m->hdr_rev = r.header.revision;
    if (!r.succeeded && r.n_responses > 0 && r.responses[0].range.n_kvs > 0)
        m->rev = r.responses[0].range.kvs[0].create_revision;
    int held = r.n_responses < 2 || r.responses[1].range.n_kvs == 0 ||
               r.responses[1].range.kvs[0].create_revision == m->rev;
    kvc_txn_result_free(&r);
    if (held)
        return 0;
    rc = kvctl_wait_deletes(k, s, m->pfx, m->rev - 1, &m->hdr_rev);
    if (rc != KVCTL_WAIT_OK)
        unlock(k, c, m); /* release the key if the wait failed */
    return rc;
}

static int run_cmd(char **args, const struct mutex *m)
{
    char kenv[4200], renv[64];
    snprintf(kenv, sizeof kenv, "ETCD_LOCK_KEY=%s", m->key);
    snprintf(renv, sizeof renv, "ETCD_LOCK_REV=%" PRId64, m->hdr_rev);
    const char *const env[] = {kenv, renv, NULL};
    struct kvctl_buf err = {0};
    int st = kvctl_spawn_wait(args, env, &err);
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) { /* etcdctl: Go's error, exit 1 */
        if (st >= 0)
            kvctl_spawn_status_error(&err, st);
        int rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_buf_str(&err));
        kvctl_buf_free(&err);
        return rc;
    }
    kvctl_buf_free(&err);
    return 0;
}

int kvctl_cmd_lock(struct kvctl *k, int argc, char **argv)
{
    int64_t ttl = 10;
    struct kvctl_flag fl[] = {
        {"ttl", 0, KVCTL_FLAG_INT64, &ttl, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    struct kvctl_session s = {0};
    struct mutex m = {0};
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    if (np < 2) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                        "lock takes a lock name argument and an optional command to execute");
        goto out;
    }
    kvctl_sig_block();
    int code = 0;
    kvc_client *c = kvctl_client(k, &code);
    if (!c) {
        rc = code;
        goto out;
    }
    rc = kvctl_session_open(k, c, ttl, &s);
    if (rc)
        goto out;
    if (asprintf(&m.pfx, "%s/", pos[1]) < 0 ||
        asprintf(&m.key, "%s%" PRIx64, m.pfx, (uint64_t)s.lease) < 0) {
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        goto out;
    }
    rc = lock(k, &s, &m);
    if (rc == KVCTL_WAIT_SIGNAL || rc == KVCTL_WAIT_LOST) {
        rc = rc == KVCTL_WAIT_SIGNAL ? kvctl_fail(KVCTL_EXIT_ERROR, "context canceled")
                                     : kvctl_fail(KVCTL_EXIT_ERROR, "session expired");
        goto out;
    }
    if (rc)
        goto out;
    if (np > 2) {
        /* the positional words after the name (cobra takes flags anywhere as its own) */
        char **args = calloc(np - 1, sizeof(char *));
        if (!args) {
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
            goto out;
        }
        for (size_t i = 2; i < np; i++)
            args[i - 2] = pos[i];
        int st = run_cmd(args, &m); /* 0, or the error it printed */
        free(args);
        int urc = unlock(k, c, &m);
        rc = st ? st : urc;
        goto out;
    }
    if (kvctl_print_key(k, m.key) < 0) {
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "lock lost on init");
        goto out;
    }
    for (;;) {
        if (kvctl_sig_wait(100)) {
            rc = unlock(k, c, &m);
            break;
        }
        if (atomic_load(&s.lost)) {
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "session expired");
            break;
        }
    }
out:
    kvctl_session_close(&s);
    free(m.pfx);
    free(m.key);
    free(pos);
    return rc;
}
