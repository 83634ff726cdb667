/* kvctl endpoint health|status and member list (etcdctl's ep_command.go, member_command.go and
 * their printers). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd_member.h"
#include "kvctl.h"
#include "out.h"
#include "print_kv.h"
#include "print_fields.h"
#include "rpc.pb-c.h"
#include "table.h"

static int emit(struct kvctl_buf *b, FILE *f)
{
    int rc = kvctl_buf_ok(b) ? kvctl_buf_write(b, f) : -1;
    kvctl_buf_free(b);
    return rc < 0 ? KVCTL_EXIT_IO : 0;
}

static void join(struct kvctl_buf *b, char **items, size_t n, const char *sep)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            kvctl_buf_puts(b, sep);
        kvctl_buf_puts(b, items[i]);
    }
}

/* Prints hdr/rows etcdctl-style: "a, b, c" lines (simple) or a table. */
static int print_rows(const struct kvctl *k, const char *const *hdr, size_t ncols,
                      struct kvctl_buf *cells, size_t nrows, FILE *simple_out)
{
    struct kvctl_buf out = {0};
    if (k->format == KVCTL_FMT_TABLE) {
        struct kvctl_table t;
        if (kvctl_table_init(&t, hdr, ncols) < 0)
            return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        const char **row = calloc(ncols, sizeof(char *));
        for (size_t r = 0; row && r < nrows; r++) {
            for (size_t c = 0; c < ncols; c++)
                row[c] = kvctl_buf_str(&cells[r * ncols + c]);
            if (kvctl_table_add(&t, row) < 0)
                out.failed = true;
        }
        if (!row)
            out.failed = true;
        free(row);
        kvctl_table_render(&t, &out);
        kvctl_table_free(&t);
    } else {
        for (size_t r = 0; r < nrows; r++) {
            for (size_t c = 0; c < ncols; c++) {
                if (c)
                    kvctl_buf_puts(&out, ", ");
                kvctl_buf_puts(&out, kvctl_buf_str(&cells[r * ncols + c]));
            }
            kvctl_buf_puts(&out, "\n");
        }
    }
    return emit(&out, k->format == KVCTL_FMT_TABLE ? stdout : simple_out);
}

static void free_cells(struct kvctl_buf *cells, size_t n)
{
    for (size_t i = 0; cells && i < n; i++)
        kvctl_buf_free(&cells[i]);
    free(cells);
}

/* ---- member list ---- */

static int member_list(struct kvctl *k, Etcdserverpb__MemberListResponse **out, int *rc)
{
    Etcdserverpb__MemberListRequest req;
    etcdserverpb__member_list_request__init(&req);
    *rc = kvctl_call(k, "/etcdserverpb.Cluster/MemberList", &req.base,
                     &etcdserverpb__member_list_response__descriptor, (ProtobufCMessage **)out,
                     k->command_timeout_ms, KVC_IDEMPOTENT, KVCTL_EXIT_ERROR, NULL);
    return *rc ? -1 : 0;
}

static int print_members(const struct kvctl *k, const Etcdserverpb__MemberListResponse *r)
{
    static const char *const hdr[] = {"ID",         "Status",       "Name",
                                      "Peer Addrs", "Client Addrs", "Is Learner"};
    if (k->format == KVCTL_FMT_JSON)
        return kvctl_print_json(&r->base) < 0 ? KVCTL_EXIT_IO : 0;
    if (k->format == KVCTL_FMT_PROTOBUF)
        return kvctl_print_pb(&r->base) < 0 ? KVCTL_EXIT_IO : 0;
    if (k->format == KVCTL_FMT_FIELDS) {
        struct kvctl_buf b = {0};
        kvctl_fields_members(&b, r);
        return emit(&b, stdout);
    }
    if (k->format != KVCTL_FMT_SIMPLE && k->format != KVCTL_FMT_TABLE)
        return kvctl_unsupported_format(k);
    struct kvctl_buf *cells = calloc(r->n_members * 6 + 1, sizeof(*cells));
    if (!cells)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    for (size_t i = 0; i < r->n_members; i++) {
        const Etcdserverpb__Member *m = r->members[i];
        struct kvctl_buf *c = &cells[i * 6];
        kvctl_buf_printf(&c[0], "%" PRIx64, m->id);
        kvctl_buf_puts(&c[1], m->name && *m->name ? "started" : "unstarted");
        kvctl_buf_puts(&c[2], m->name ? m->name : "");
        join(&c[3], m->peerurls, m->n_peerurls, ",");
        join(&c[4], m->clienturls, m->n_clienturls, ",");
        kvctl_buf_puts(&c[5], m->islearner ? "true" : "false");
    }
    int rc = print_rows(k, hdr, 6, cells, r->n_members, stdout);
    free_cells(cells, r->n_members * 6);
    return rc;
}

int kvctl_cmd_member(struct kvctl *k, int argc, char **argv)
{
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    Etcdserverpb__MemberListResponse *resp = NULL;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    const char *peer_urls = NULL;
    bool learner = false;
    struct kvctl_flag fl[] = {
        {"peer-urls", 0, KVCTL_FLAG_STRING, &peer_urls, false},
        {"learner", 0, KVCTL_FLAG_BOOL, &learner, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    static const char *const subs[] = {"list", "add", "remove", "update", "promote"};
    int sub = np >= 2 ? kvctl_match(pos[1], subs, 5) : -1;
    if (sub < 0) {
        rc = kvctl_group_help("member", np >= 2 ? pos[1] : NULL);
        goto out;
    }
    /* The flags belong to add (both) and update (--peer-urls) only, as etcdctl's. */
    if ((fl[0].changed && sub != 1 && sub != 3) || (fl[1].changed && sub != 1)) {
        rc = kvctl_flag_error(argc, argv,
                              fl[0].changed && sub != 1 && sub != 3 ? "unknown flag: --peer-urls"
                                                                    : "unknown flag: --learner");
        goto out;
    }
    if (sub > 0) {
        rc = kvctl_member_change(k, subs[sub], np - 2, pos + 2, peer_urls, learner);
        goto out;
    }
    if (member_list(k, &resp, &rc) < 0)
        goto out;
    rc = print_members(k, resp);
out:
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(pos);
    return rc;
}

/* ---- endpoint ---- */

/* The endpoints to visit: --endpoints, or every member's client URLs with --cluster (found
 * through the discovered endpoints with --discovery-srv). Returns 0
 * or the exit status; the array and its strings are owned by the caller (free each entry and the
 * array). */
static int endpoints(struct kvctl *k, bool cluster, char ***eps, size_t *n)
{
    *eps = calloc(KVCTL_MAX_ENDPOINTS, sizeof(char *));
    *n = 0;
    if (!*eps)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    if (!cluster) { /* the flag, not what --discovery-srv found (etcdctl 3.4) */
        char *const *flag = k->n_flag_endpoints ? k->flag_endpoints : k->endpoints;
        size_t nf = k->n_flag_endpoints ? k->n_flag_endpoints : k->n_endpoints;
        for (size_t i = 0; i < nf; i++) {
            if (!((*eps)[(*n)++] = strdup(flag[i])))
                return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        }
        return 0;
    }
    Etcdserverpb__MemberListResponse *r = NULL;
    Etcdserverpb__MemberListRequest req;
    etcdserverpb__member_list_request__init(&req);
    int rc = 0;
    kvc_client *c = kvctl_client(k, &rc);
    if (!c)
        return rc;
    kvc_error err = {0};
    if (kvctl_rpc(c, "/etcdserverpb.Cluster/MemberList", &req.base,
                  &etcdserverpb__member_list_response__descriptor, (ProtobufCMessage **)&r,
                  k->command_timeout_ms, KVC_IDEMPOTENT, &err) < 0) {
        char m[512];
        return kvctl_fail(KVCTL_EXIT_ERROR,
                          "failed to fetch endpoints from etcd cluster member list: %s",
                          kvctl_err_text(&err, m, sizeof(m)));
    }
    int rc2 = 0;
    for (size_t i = 0; i < r->n_members && !rc2; i++) {
        for (size_t j = 0; j < r->members[i]->n_clienturls && *n < KVCTL_MAX_ENDPOINTS; j++) {
            if (!((*eps)[(*n)++] = strdup(r->members[i]->clienturls[j]))) {
                rc2 = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
                break;
            }
        }
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return rc2;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct health {
    const char *ep;
    bool ok;
    int64_t took_ns;
    char took[64];
    char error[512];
};

static int cmp_took(const void *a, const void *b)
{
    const struct health *x = a, *y = b;
    return (x->took_ns > y->took_ns) - (x->took_ns < y->took_ns);
}

static void check_health(const struct kvctl *k, struct health *h)
{
    kvc_client *c = NULL;
    kvc_error err = {0};
    h->error[0] = '\0';
    if (kvctl_open_one(k, h->ep, &c, &err) < 0) {
        h->ok = false;
        kvctl_err_text(&err, h->error, sizeof(h->error));
        return;
    }
    Etcdserverpb__RangeRequest req;
    etcdserverpb__range_request__init(&req);
    req.key.data = (uint8_t *)"health";
    req.key.len = 6;
    ProtobufCMessage *resp = NULL;
    int64_t st = now_ns();
    int rc =
        kvctl_rpc(c, "/etcdserverpb.KV/Range", &req.base, &etcdserverpb__range_response__descriptor,
                  &resp, k->command_timeout_ms, KVC_IDEMPOTENT, &err);
    h->took_ns = now_ns() - st;
    kvctl_go_duration(h->took, sizeof(h->took), h->took_ns);
    /* permission denied is fine: the request went through consensus */
    if (rc == 0 || (err.code == KVC_PERMISSION_DENIED &&
                    strcmp(err.message, "etcdserver: permission denied") == 0)) {
        h->ok = true;
    } else {
        h->ok = false;
        kvctl_err_text(&err, h->error, sizeof(h->error));
    }
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    kvc_close(c);
}

static int ep_health(struct kvctl *k, char **eps, size_t n)
{
    struct health *hs = calloc(n + 1, sizeof(*hs));
    if (!hs)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    bool errs = false;
    for (size_t i = 0; i < n; i++) {
        hs[i].ep = eps[i];
        check_health(k, &hs[i]);
        errs |= !hs[i].ok;
    }
    /* etcdctl checks all endpoints concurrently and lists them as they finish */
    qsort(hs, n, sizeof(*hs), cmp_took);
    int rc = 0;
    struct kvctl_buf b = {0};
    if (k->format == KVCTL_FMT_JSON) {
        kvctl_buf_puts(&b, "[");
        for (size_t i = 0; i < n; i++) {
            kvctl_buf_puts(&b, i ? ",{\"endpoint\":" : "{\"endpoint\":");
            kvctl_json_string(&b, (const uint8_t *)hs[i].ep, strlen(hs[i].ep));
            kvctl_buf_printf(&b, ",\"health\":%s,\"took\":", hs[i].ok ? "true" : "false");
            kvctl_json_string(&b, (const uint8_t *)hs[i].took, strlen(hs[i].took));
            if (hs[i].error[0]) {
                kvctl_buf_puts(&b, ",\"error\":");
                kvctl_json_string(&b, (const uint8_t *)hs[i].error, strlen(hs[i].error));
            }
            kvctl_buf_puts(&b, "}");
        }
        kvctl_buf_puts(&b, "]\n");
        rc = emit(&b, stdout);
    } else if (k->format == KVCTL_FMT_TABLE) {
        static const char *const hdr[] = {"endpoint", "health", "took", "error"};
        struct kvctl_buf *cells = calloc(n * 4 + 1, sizeof(*cells));
        if (!cells) {
            free(hs);
            return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
            kvctl_buf_puts(&cells[i * 4], hs[i].ep);
            kvctl_buf_puts(&cells[i * 4 + 1], hs[i].ok ? "true" : "false");
            kvctl_buf_puts(&cells[i * 4 + 2], hs[i].took);
            kvctl_buf_puts(&cells[i * 4 + 3], hs[i].error);
        }
        rc = print_rows(k, hdr, 4, cells, n, stdout);
        free_cells(cells, n * 4);
    } else if (k->format == KVCTL_FMT_SIMPLE) {
        for (size_t i = 0; i < n; i++) {
            if (hs[i].ok)
                kvctl_buf_printf(&b, "%s is healthy: successfully committed proposal: took = %s\n",
                                 hs[i].ep, hs[i].took);
            else
                kvctl_buf_printf(&b, "%s is unhealthy: failed to commit proposal: %s\n", hs[i].ep,
                                 hs[i].error);
        }
        rc = emit(&b, stderr);
    } else if (k->format == KVCTL_FMT_FIELDS) {
        for (size_t i = 0; i < n; i++)
            kvctl_fields_health(&b, hs[i].ep, hs[i].ok, hs[i].took, hs[i].error);
        rc = emit(&b, stdout);
    } else {
        rc = kvctl_unsupported_format(k);
    }
    free(hs);
    if (rc)
        return rc;
    if (errs)
        return kvctl_fail(KVCTL_EXIT_ERROR, "unhealthy cluster");
    return 0;
}

static int ep_status(struct kvctl *k, char **eps, size_t n)
{
    Etcdserverpb__StatusResponse **st = calloc(n + 1, sizeof(*st));
    const char **st_ep = calloc(n + 1, sizeof(*st_ep));
    size_t ns = 0;
    bool failed = false;
    int rc = 0;
    if (!st || !st_ep) {
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        kvc_client *c = NULL;
        kvc_error err = {0};
        Etcdserverpb__StatusRequest req;
        etcdserverpb__status_request__init(&req);
        int r = kvctl_open_one(k, eps[i], &c, &err);
        if (r == 0)
            r = kvctl_rpc(c, "/etcdserverpb.Maintenance/Status", &req.base,
                          &etcdserverpb__status_response__descriptor, (ProtobufCMessage **)&st[ns],
                          k->command_timeout_ms, KVC_IDEMPOTENT, &err);
        kvc_close(c);
        if (r < 0) {
            char m[512];
            failed = true;
            fflush(stdout);
            fprintf(stderr, "Failed to get the status of endpoint %s (%s)\n", eps[i],
                    kvctl_err_text(&err, m, sizeof(m)));
            continue;
        }
        st_ep[ns++] = eps[i];
    }
    if (k->format == KVCTL_FMT_JSON) {
        struct kvctl_buf b = {0};
        kvctl_buf_puts(&b, "[");
        for (size_t i = 0; i < ns; i++) {
            kvctl_buf_puts(&b, i ? ",{\"Endpoint\":" : "{\"Endpoint\":");
            kvctl_json_string(&b, (const uint8_t *)st_ep[i], strlen(st_ep[i]));
            kvctl_buf_puts(&b, ",\"Status\":");
            kvctl_json_message(&b, &st[i]->base);
            kvctl_buf_puts(&b, "}");
        }
        kvctl_buf_puts(&b, "]\n");
        rc = emit(&b, stdout);
    } else if (k->format == KVCTL_FMT_SIMPLE || k->format == KVCTL_FMT_TABLE) {
        static const char *const hdr[] = {"endpoint",  "ID",         "version",
                                          "db size",   "is leader",  "is learner",
                                          "raft term", "raft index", "raft applied index",
                                          "errors"};
        struct kvctl_buf *cells = calloc(ns * 10 + 1, sizeof(*cells));
        if (!cells) {
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < ns; i++) {
            const Etcdserverpb__StatusResponse *s = st[i];
            struct kvctl_buf *c = &cells[i * 10];
            uint64_t member = s->header ? s->header->member_id : 0;
            char size[32];
            kvctl_humanize_bytes(size, sizeof(size), (uint64_t)s->dbsize);
            kvctl_buf_puts(&c[0], st_ep[i]);
            kvctl_buf_printf(&c[1], "%" PRIx64, member);
            kvctl_buf_puts(&c[2], s->version ? s->version : "");
            kvctl_buf_puts(&c[3], size);
            kvctl_buf_puts(&c[4], s->leader == member ? "true" : "false");
            kvctl_buf_puts(&c[5], s->islearner ? "true" : "false");
            kvctl_buf_printf(&c[6], "%" PRIu64, s->raftterm);
            kvctl_buf_printf(&c[7], "%" PRIu64, s->raftindex);
            kvctl_buf_printf(&c[8], "%" PRIu64, s->raftappliedindex);
            join(&c[9], s->errors, s->n_errors, ", ");
        }
        rc = print_rows(k, hdr, 10, cells, ns, stdout);
        free_cells(cells, ns * 10);
    } else if (k->format == KVCTL_FMT_FIELDS) {
        struct kvctl_buf b = {0};
        for (size_t i = 0; i < ns; i++)
            kvctl_fields_status(&b, st_ep[i], st[i]);
        rc = emit(&b, stdout);
    } else {
        rc = kvctl_unsupported_format(k);
    }
    if (rc == 0 && failed)
        rc = KVCTL_EXIT_ERROR; /* etcdctl: os.Exit(ExitError) without a further message */
out:
    for (size_t i = 0; st && i < ns; i++)
        protobuf_c_message_free_unpacked(&st[i]->base, NULL);
    free(st);
    free(st_ep);
    return rc;
}

int kvctl_cmd_endpoint(struct kvctl *k, int argc, char **argv)
{
    bool cluster = false;
    struct kvctl_flag fl[] = {
        {"cluster", 0, KVCTL_FLAG_BOOL, &cluster, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0, n = 0;
    char **eps = NULL;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    static const char *const subs[] = {"health", "status"};
    int sub = np >= 2 ? kvctl_match(pos[1], subs, 2) : -1;
    if (sub < 0) {
        rc = kvctl_group_help("endpoint", np >= 2 ? pos[1] : NULL);
        goto out;
    }
    rc = endpoints(k, cluster, &eps, &n);
    if (rc)
        goto out;
    rc = sub == 0 ? ep_health(k, eps, n) : ep_status(k, eps, n);
out:
    for (size_t i = 0; eps && i < n; i++)
        free(eps[i]);
    free(eps);
    free(pos);
    return rc;
}
