/*
 * authbench: legitimate logins during a flood of wrong passwords, kvd vs etcd 3.4 (not a
 * test; docs/ARCHITECTURE.md "Authentication"). For each server: a single member on loopback
 * (tests/integration/harness.h), users root and alice, auth enabled with etcdctl; then
 * --flood connections keep an Authenticate of root with a wrong password in flight while a new
 * connection logs in as root with the right password every --interval ms (--logins times,
 * each given --timeout ms). Prints logins ok / refused / failed and their latency. kvd runs
 * with its defaults (--auth-hash-iterations 100000, --auth-max-pending-hashes 64) unless
 * --kvd-arg is given.
 * Usage: authbench [--flood N] [--logins N] [--interval MS] [--timeout MS] [--warmup MS]
 *                  [--only kvd|etcd] [--kvd-arg ARG]...
 */
#include "auth_flood.h"
#include "harness.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ctl(const kv_it_server *s, const char *a1, const char *a2, const char *a3)
{
    char bin[PATH_MAX];
    if (kv_it_etcdctl_bin(bin, sizeof bin))
        return -1;
    kv_it_cmd_result r;
    int rc = a3 ? kv_it_ctl(s, bin, NULL, 30000, &r, a1, a2, a3, NULL)
                : kv_it_ctl(s, bin, NULL, 30000, &r, a1, a2, NULL);
    if (rc)
        return rc;
    rc = r.timed_out ? -1 : r.exit_code;
    if (rc)
        fprintf(stderr, "etcdctl %s %s: %s%s\n", a1, a2, r.out ? r.out : "", r.err ? r.err : "");
    kv_it_cmd_result_free(&r);
    return rc;
}

static int one(kv_it_kind kind, af_opts *o, const char *const *extra)
{
    kv_it_server s;
    if (kv_it_server_init(&s, kind, extra)) {
        fprintf(stderr, "%s: cannot init\n", kv_it_kind_name(kind));
        return 1;
    }
    int rc = kv_it_server_start(&s, 30000);
    if (rc == 0)
        rc = ctl(&s, "user", "add", "root:rootpw");
    if (rc == 0)
        rc = ctl(&s, "auth", "enable", NULL);
    if (rc) {
        fprintf(stderr, "%s: setup failed (%d)\n", kv_it_kind_name(kind), rc);
        kv_it_server_destroy(&s);
        return 1;
    }
    o->port = s.client_port;
    af_result r;
    rc = af_run(o, &r);
    if (rc == 0)
        printf("%-4s flood %d conns: legitimate logins %d of %d ok (%d too many requests, %d "
               "other/timeout); ok latency avg %llu ms, max %llu ms; flood answers %llu, "
               "wrong-password checks %llu\n",
               kv_it_kind_name(kind), o->n_flood, r.logins_ok, o->n_logins, r.logins_refused,
               r.logins_other,
               (unsigned long long)(r.logins_ok ? r.login_sum_ms / (uint64_t)r.logins_ok : 0),
               (unsigned long long)r.login_max_ms, (unsigned long long)r.flood_answers,
               (unsigned long long)r.flood_failed);
    else
        fprintf(stderr, "%s: flood failed (%d)\n", kv_it_kind_name(kind), rc);
    if (kind == KV_IT_KVD) {
        int hs = 0;
        char *body = NULL;
        double ref = -1, ev = -1;
        if (kv_it_http_get(s.metrics_port, "/metrics", 5000, &hs, &body) == 0) {
            kv_it_metric_value(body, "kvd_auth_hash_refused_total", &ref);
            kv_it_metric_value(body, "kvd_auth_hash_evicted_total", &ev);
            printf("kvd  kvd_auth_hash_refused_total %.0f, kvd_auth_hash_evicted_total %.0f\n", ref,
                   ev);
        }
        free(body);
    }
    fflush(stdout);
    kv_it_server_destroy(&s);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    af_opts o = {.flood_user = "root",
                 .flood_pw = "wrong",
                 .user = "root",
                 .pw = "rootpw",
                 .n_flood = 100,
                 .n_logins = 30,
                 .warmup_ms = 3000,
                 .interval_ms = 1000,
                 .login_timeout_ms = 15000};
    const char *only = NULL;
    const char *extra[8] = {NULL};
    int nextra = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: see the header of bench/auth/authbench.c\n");
            return 2;
        }
        if (!strcmp(argv[i], "--flood"))
            o.n_flood = atoi(v);
        else if (!strcmp(argv[i], "--logins"))
            o.n_logins = atoi(v);
        else if (!strcmp(argv[i], "--interval"))
            o.interval_ms = (uint32_t)atoi(v);
        else if (!strcmp(argv[i], "--timeout"))
            o.login_timeout_ms = (uint32_t)atoi(v);
        else if (!strcmp(argv[i], "--warmup"))
            o.warmup_ms = (uint32_t)atoi(v);
        else if (!strcmp(argv[i], "--only"))
            only = v;
        else if (!strcmp(argv[i], "--kvd-arg") && nextra < 7)
            extra[nextra++] = v;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
        i++;
    }
    int rc = 0;
    if (!only || !strcmp(only, "kvd"))
        rc |= one(KV_IT_KVD, &o, extra);
    char eb[PATH_MAX];
    if ((!only || !strcmp(only, "etcd")) && kv_it_server_bin(KV_IT_ETCD, eb, sizeof eb) == 0)
        rc |= one(KV_IT_ETCD, &o, NULL);
    return rc;
}
