/* cl_util: see cl_util.h. */
#include "cl_util.h"

#include "grpc_raw.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cl_start(kvt_cluster *c, int n, uint64_t snapshot_count)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, n);
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = CL_ELECTION_MS;
    o.snapshot_count = snapshot_count;
    int r = kvt_cluster_init(c, &o);
    if (r) {
        fprintf(stderr, "cluster init (%s): %s\n", kvt_target_name(o.target), strerror(-r));
        return r;
    }
    uint64_t t0 = kvt_now_ms();
    r = kvt_cluster_start(c, 60000);
    fprintf(stderr, "[%s] start of %d members: rc %d after %" PRIu64 " ms, dir %s\n",
            kvt_target_name(o.target), n, r, kvt_now_ms() - t0, c->root.path);
    return r;
}

/* Value of the first `"key":<number>` after p (numbers may be quoted or not). */
static int json_u64(const char *p, const char *end, const char *key, uint64_t *out)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *q = strstr(p, pat);
    if (!q || (end && q >= end))
        return -ENOENT;
    q += strlen(pat);
    if (*q == '"')
        q++;
    *out = strtoull(q, NULL, 10);
    return 0;
}

int cl_endpoint_status(kvt_cluster *c, cl_ep_status *st, int cap, int *n)
{
    kvt_cmd_result res;
    int r = kvt_ctl(c, -1, 15000, &res, "endpoint", "status", "-w", "json", NULL);
    if (r)
        return r;
    *n = 0;
    if (res.exit_code != 0) {
        fprintf(stderr, "endpoint status: exit %d: %s%s\n", res.exit_code, res.out, res.err);
        kvt_cmd_result_free(&res);
        return -EIO;
    }
    const char *p = res.out;
    while ((p = strstr(p, "\"Endpoint\":\"")) != NULL && *n < cap) {
        p += strlen("\"Endpoint\":\"");
        const char *next = strstr(p, "\"Endpoint\":\"");
        cl_ep_status *s = &st[*n];
        memset(s, 0, sizeof(*s));
        size_t l = strcspn(p, "\"");
        snprintf(s->endpoint, sizeof(s->endpoint), "%.*s", (int)(l < 63 ? l : 63), p);
        if (json_u64(p, next, "member_id", &s->member_id) ||
            json_u64(p, next, "leader", &s->leader) ||
            json_u64(p, next, "raftTerm", &s->raft_term) ||
            json_u64(p, next, "raftIndex", &s->raft_index)) {
            fprintf(stderr, "endpoint status: cannot parse: %s\n", res.out);
            kvt_cmd_result_free(&res);
            return -EPROTO;
        }
        (*n)++;
    }
    kvt_cmd_result_free(&res);
    return 0;
}

int cl_wait_value(kvt_cluster *c, int i, const char *key, const char *want, int serializable,
                  uint32_t timeout_ms)
{
    uint64_t t0 = kvt_now_ms();
    for (;;) {
        char val[128];
        int found = 0;
        if (kvt_get(c, i, key, serializable, 2000, val, sizeof(val), &found, NULL, NULL, 0) == 0 &&
            found && strcmp(val, want) == 0)
            return (int)(kvt_now_ms() - t0);
        if (kvt_now_ms() - t0 >= timeout_ms)
            return -ETIMEDOUT;
        kvt_sleep_ms(20);
    }
}

int cl_other(kvt_cluster *c, int not1, int not2)
{
    for (int i = 0; i < c->n; i++)
        if (i != not1 && i != not2 && c->m[i].in_config && kvt_member_running(c, i) &&
            !c->m[i].partitioned && !c->m[i].proc.stopped)
            return i;
    return -1;
}

int cl_put_ack(kvt_cluster *c, cl_acks *a, int i, const char *key, const char *val,
               uint32_t timeout_ms, char *err, size_t err_cap)
{
    int r = kvt_put(c, i, key, val, timeout_ms, NULL, err, err_cap);
    if (r == 0 && a && a->n < CL_ACK_MAX) {
        snprintf(a->key[a->n], sizeof(a->key[a->n]), "%s", key);
        snprintf(a->val[a->n], sizeof(a->val[a->n]), "%s", val);
        a->n++;
    }
    return r;
}

int cl_verify_acks(kvt_cluster *c, const cl_acks *a, int i)
{
    int bad = 0;
    for (int k = 0; k < a->n; k++) {
        /* Only the last acknowledged value of a key must be visible. */
        int later = 0;
        for (int q = k + 1; q < a->n && !later; q++)
            later = strcmp(a->key[q], a->key[k]) == 0;
        if (later)
            continue;
        char val[64], err[256];
        int found = 0;
        int r = kvt_get(c, i, a->key[k], 0, 5000, val, sizeof(val), &found, NULL, err, sizeof(err));
        if (r || !found || strcmp(val, a->val[k]) != 0) {
            fprintf(stderr, "acknowledged %s=%s: rc %d found %d value '%s' %s\n", a->key[k],
                    a->val[k], r, found, found ? val : "", r ? err : "");
            bad++;
        }
    }
    return bad;
}

void cl_assert_hash_equal(kvt_cluster *c, int via)
{
    uint32_t h[KVT_MAX_MEMBERS];
    int64_t rev = 0;
    cr_assert_eq(kvt_cluster_hash(c, via, h, &rev, 30000), 0, "HashKV of every member");
    int first = -1;
    for (int i = 0; i < c->n; i++) {
        if (!kvt_member_running(c, i))
            continue;
        fprintf(stderr, "  HashKV %s @%" PRId64 " = %08x\n", c->m[i].name, rev, h[i]);
        if (first < 0)
            first = i;
        else
            cr_assert_eq(h[i], h[first], "HashKV %s %08x != %s %08x at revision %" PRId64,
                         c->m[i].name, h[i], c->m[first].name, h[first], rev);
    }
}

double cl_metric(kvt_cluster *c, int i, const char *series)
{
    char *body = NULL;
    int r = kvt_member_metrics(c, i, &body);
    cr_assert_eq(r, 0, "metrics of %s: %d", c->m[i].name, r);
    double v = -1;
    if (kvt_metric_value(body, series, &v) != 0)
        v = -1;
    free(body);
    return v;
}

double cl_metric_sum(kvt_cluster *c, int i, const char *name)
{
    char *body = NULL;
    int r = kvt_member_metrics(c, i, &body);
    cr_assert_eq(r, 0, "metrics of %s: %d", c->m[i].name, r);
    double sum = 0;
    size_t nl = strlen(name);
    for (const char *p = body; p && *p;) {
        const char *e = strchr(p, '\n');
        if (strncmp(p, name, nl) == 0 && (p[nl] == '{' || p[nl] == ' ')) {
            const char *v = p[nl] == '{' ? strchr(p + nl, '}') : p + nl;
            if (v && (!e || v < e))
                sum += strtod(v + 1, NULL);
        }
        p = e ? e + 1 : NULL;
    }
    free(body);
    return sum;
}

int64_t cl_lease_grant(kv_it_grpc *g, int64_t ttl)
{
    Etcdserverpb__LeaseGrantRequest req = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    req.ttl = ttl;
    uint8_t buf[32];
    size_t len = etcdserverpb__lease_grant_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int status = -1;
    char msg[160] = "";
    int rc = kv_it_grpc_call(g, "/etcdserverpb.Lease/LeaseGrant", buf, len, &resp, &rlen, 10000,
                             &status, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "grant: rc %d status %d '%s'", rc, status, msg);
    Etcdserverpb__LeaseGrantResponse *r =
        etcdserverpb__lease_grant_response__unpack(NULL, rlen, resp);
    free(resp);
    cr_assert_not_null(r);
    int64_t id = r->id;
    etcdserverpb__lease_grant_response__free_unpacked(r, NULL);
    return id;
}

void cl_print_log_tail(const kvt_cluster *c, int i)
{
    char *log = NULL;
    if (kvt_member_log(c, i, 1u << 22, &log) == 0 && log)
        fprintf(stderr, "--- the end of m%d's log ---\n%s\n", i + 1, kvt_str_tail(log, 16384));
    free(log);
}

int cl_log_has(const kvt_cluster *c, int i, const char *needle)
{
    char *log = NULL;
    if (kvt_member_log(c, i, 1u << 22, &log) != 0)
        return 0;
    int found = strstr(log, needle) != NULL;
    free(log);
    return found;
}

int cl_wait_exit(kvt_cluster *c, int i, uint32_t timeout_ms)
{
    uint64_t t0 = kvt_now_ms();
    while (kvt_member_running(c, i)) {
        if (kvt_now_ms() - t0 > timeout_ms)
            return -1;
        kvt_sleep_ms(50);
    }
    return (int)(kvt_now_ms() - t0);
}
