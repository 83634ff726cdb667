/* kvctl member add|remove|update|promote and move-leader (etcdctl 3.4's member_command.go,
 * move_leader_command.go and their printers). Output formats as etcdctl 3.4.23: simple prints
 * the "Member ... added/removed/updated/promoted" lines (add also the ETCD_* settings for the new
 * member), json and protobuf print the response, table and fields are not supported (etcdctl
 * says so after the RPC, which has then already been applied). Peer URLs are checked on the
 * client first, as clientv3 does (types.NewURLs), with its messages. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cmd_member.h"
#include "kvctl.h"
#include "out.h"
#include "print_kv.h"
#include "rpc.pb-c.h"

/* Go's strconv.ParseUint(s, 16, 64); on error writes its message into err. */
static int parse_hex_id(const char *s, uint64_t *out, char *err, size_t len)
{
    uint64_t v = 0;
    int rc = *s ? 0 : -EINVAL;
    for (const char *p = s; *p && rc == 0; p++) {
        int d = isdigit((unsigned char)*p) ? *p - '0'
                : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10
                : (*p >= 'A' && *p <= 'F') ? *p - 'A' + 10
                                           : -1;
        if (d < 0)
            rc = -EINVAL;
        else if (v >> 60)
            rc = -ERANGE;
        else
            v = (v << 4) | (uint64_t)d;
    }
    if (rc) {
        snprintf(err, len, "strconv.ParseUint: parsing \"%s\": %s", s,
                 rc == -ERANGE ? "value out of range" : "invalid syntax");
        return rc;
    }
    *out = v;
    return 0;
}

static int member_id_arg(size_t nargs, char **args, uint64_t *id)
{
    if (nargs != 1)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "member ID is not provided");
    char err[600];
    if (parse_hex_id(args[0], id, err, sizeof(err)) < 0)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "bad member ID arg (%s), expecting ID in Hex", err);
    return 0;
}

/* ---- clientv3's types.NewURLs on the comma-split --peer-urls ---- */

typedef struct url_list {
    char **v;
    size_t n;
    char *copy;
} url_list;

static void url_list_free(url_list *l)
{
    free(l->v);
    free(l->copy);
}

/* Splits s at commas (strings.Split: every piece, also empty ones). */
static int split_urls(const char *s, url_list *l)
{
    memset(l, 0, sizeof(*l));
    size_t n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    l->copy = strdup(s);
    l->v = calloc(n, sizeof(char *));
    if (!l->copy || !l->v) {
        url_list_free(l);
        return -ENOMEM;
    }
    char *p = l->copy;
    for (;;) {
        l->v[l->n++] = p;
        char *c = strchr(p, ',');
        if (!c)
            break;
        *c = '\0';
        p = c + 1;
    }
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* net.SplitHostPort's acceptance of an authority. */
static int host_port_ok(const char *h)
{
    if (h[0] == '[') {
        const char *close = strchr(h, ']');
        return close && close[1] == ':' && !strpbrk(close + 2, ":[]");
    }
    const char *colon = strchr(h, ':');
    return colon && !strchr(colon + 1, ':') && !strpbrk(h, "[]");
}

/* 0, or the exit status after printing NewURLs' error for the first bad URL. */
static int check_urls(const url_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        char buf[4096];
        snprintf(buf, sizeof(buf), "%s", l->v[i]);
        char *u = trim(buf);
        char *sep = strstr(u, "://");
        const char *scheme_end = sep ? sep : u + strcspn(u, ":");
        size_t sl = (size_t)(scheme_end - u);
        int scheme_ok =
            sep &&
            ((sl == 4 && strncmp(u, "http", 4) == 0) || (sl == 5 && strncmp(u, "https", 5) == 0) ||
             (sl == 4 && strncmp(u, "unix", 4) == 0) || (sl == 5 && strncmp(u, "unixs", 5) == 0));
        if (!scheme_ok)
            return kvctl_fail(KVCTL_EXIT_ERROR,
                              "URL scheme must be http, https, unix, or unixs: %s", u);
        char *auth = sep + 3;
        size_t al = strcspn(auth, "/?#");
        int has_path = auth[al] == '/';
        char host[4096];
        snprintf(host, sizeof(host), "%.*s", (int)al, auth);
        char *at = strrchr(host, '@');
        if (!host_port_ok(at ? at + 1 : host))
            return kvctl_fail(KVCTL_EXIT_ERROR,
                              "URL address does not have the form \"host:port\": %s", u);
        if (has_path)
            return kvctl_fail(KVCTL_EXIT_ERROR, "URL must not contain a path: %s", u);
    }
    return 0;
}

/* ---- output ---- */

static int emit(struct kvctl_buf *b)
{
    int rc = kvctl_buf_ok(b) ? kvctl_buf_write(b, stdout) : -1;
    fflush(stdout);
    kvctl_buf_free(b);
    return rc < 0 ? KVCTL_EXIT_IO : 0;
}

/* json / protobuf / unsupported; 1 = simple (the caller prints). */
static int print_other(const struct kvctl *k, const ProtobufCMessage *m)
{
    if (k->format == KVCTL_FMT_SIMPLE)
        return 1;
    if (k->format == KVCTL_FMT_JSON)
        return kvctl_print_json(m) < 0 ? KVCTL_EXIT_IO : 0;
    if (k->format == KVCTL_FMT_PROTOBUF)
        return kvctl_print_pb(m) < 0 ? KVCTL_EXIT_IO : 0;
    return kvctl_unsupported_format(k);
}

static uint64_t cluster_of(const Etcdserverpb__ResponseHeader *h)
{
    return h ? h->cluster_id : 0;
}

/* ---- member add ---- */

static int member_add(struct kvctl *k, size_t nargs, char **args, const char *peer_urls,
                      bool learner)
{
    if (nargs < 1)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "member name not provided");
    if (nargs > 1) {
        struct kvctl_buf ev = {0};
        kvctl_buf_puts(&ev, "too many arguments");
        for (size_t i = 0; i < nargs; i++)
            if (strncasecmp(args[i], "http", 4) == 0)
                kvctl_buf_printf(&ev, ", did you mean --peer-urls=%s", args[i]);
        int rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "%s", kvctl_buf_str(&ev));
        kvctl_buf_free(&ev);
        return rc;
    }
    const char *name = args[0];
    if (!peer_urls || !*peer_urls)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "member peer urls not provided");
    url_list l;
    if (split_urls(peer_urls, &l) < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = check_urls(&l);
    if (rc) {
        url_list_free(&l);
        return rc;
    }
    Etcdserverpb__MemberAddRequest req;
    etcdserverpb__member_add_request__init(&req);
    req.peerurls = l.v;
    req.n_peerurls = l.n;
    req.islearner = learner;
    Etcdserverpb__MemberAddResponse *r = NULL;
    rc = kvctl_call(k, "/etcdserverpb.Cluster/MemberAdd", &req.base,
                    &etcdserverpb__member_add_response__descriptor, (ProtobufCMessage **)&r,
                    k->command_timeout_ms, 0, KVCTL_EXIT_ERROR, NULL);
    url_list_free(&l);
    if (rc)
        return rc;
    rc = print_other(k, &r->base);
    if (rc == 1) {
        uint64_t new_id = r->member ? r->member->id : 0;
        struct kvctl_buf b = {0};
        kvctl_buf_printf(&b, "Member %16" PRIx64 " added to cluster %16" PRIx64 "\n", new_id,
                         cluster_of(r->header));
        struct kvctl_buf conf = {0};
        bool first = true;
        for (size_t i = 0; i < r->n_members; i++) {
            const Etcdserverpb__Member *m = r->members[i];
            const char *n = m->id == new_id ? name : (m->name ? m->name : "");
            for (size_t j = 0; j < m->n_peerurls; j++) {
                kvctl_buf_printf(&conf, "%s%s=%s", first ? "" : ",", n, m->peerurls[j]);
                first = false;
            }
        }
        kvctl_buf_puts(&b, "\nETCD_NAME=");
        kvctl_go_quote(&b, (const uint8_t *)name, strlen(name));
        kvctl_buf_puts(&b, "\nETCD_INITIAL_CLUSTER=");
        kvctl_go_quote(&b, (const uint8_t *)kvctl_buf_str(&conf), conf.len);
        kvctl_buf_puts(&b, "\nETCD_INITIAL_ADVERTISE_PEER_URLS=");
        kvctl_go_quote(&b, (const uint8_t *)peer_urls, strlen(peer_urls));
        kvctl_buf_puts(&b, "\nETCD_INITIAL_CLUSTER_STATE=\"existing\"\n");
        if (!kvctl_buf_ok(&conf))
            b.failed = true;
        kvctl_buf_free(&conf);
        rc = emit(&b);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return rc;
}

/* ---- member remove / update / promote ---- */

static int member_remove_promote(struct kvctl *k, size_t nargs, char **args, bool promote)
{
    uint64_t id;
    int rc = member_id_arg(nargs, args, &id);
    if (rc)
        return rc;
    ProtobufCMessage *r = NULL;
    if (promote) {
        Etcdserverpb__MemberPromoteRequest req;
        etcdserverpb__member_promote_request__init(&req);
        req.id = id;
        rc = kvctl_call(k, "/etcdserverpb.Cluster/MemberPromote", &req.base,
                        &etcdserverpb__member_promote_response__descriptor, &r,
                        k->command_timeout_ms, 0, KVCTL_EXIT_ERROR, NULL);
    } else {
        Etcdserverpb__MemberRemoveRequest req;
        etcdserverpb__member_remove_request__init(&req);
        req.id = id;
        rc = kvctl_call(k, "/etcdserverpb.Cluster/MemberRemove", &req.base,
                        &etcdserverpb__member_remove_response__descriptor, &r,
                        k->command_timeout_ms, 0, KVCTL_EXIT_ERROR, NULL);
    }
    if (rc)
        return rc;
    rc = print_other(k, r);
    if (rc == 1) {
        /* Both responses start with the header (field 1). */
        const Etcdserverpb__ResponseHeader *h =
            promote ? ((Etcdserverpb__MemberPromoteResponse *)r)->header
                    : ((Etcdserverpb__MemberRemoveResponse *)r)->header;
        struct kvctl_buf b = {0};
        kvctl_buf_printf(&b, "Member %16" PRIx64 " %s cluster %16" PRIx64 "\n", id,
                         promote ? "promoted in" : "removed from", cluster_of(h));
        rc = emit(&b);
    }
    protobuf_c_message_free_unpacked(r, NULL);
    return rc;
}

static int member_update(struct kvctl *k, size_t nargs, char **args, const char *peer_urls)
{
    uint64_t id;
    int rc = member_id_arg(nargs, args, &id);
    if (rc)
        return rc;
    if (!peer_urls || !*peer_urls)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "member peer urls not provided");
    url_list l;
    if (split_urls(peer_urls, &l) < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    if ((rc = check_urls(&l))) {
        url_list_free(&l);
        return rc;
    }
    Etcdserverpb__MemberUpdateRequest req;
    etcdserverpb__member_update_request__init(&req);
    req.id = id;
    req.peerurls = l.v;
    req.n_peerurls = l.n;
    Etcdserverpb__MemberUpdateResponse *r = NULL;
    rc = kvctl_call(k, "/etcdserverpb.Cluster/MemberUpdate", &req.base,
                    &etcdserverpb__member_update_response__descriptor, (ProtobufCMessage **)&r,
                    k->command_timeout_ms, 0, KVCTL_EXIT_ERROR, NULL);
    url_list_free(&l);
    if (rc)
        return rc;
    rc = print_other(k, &r->base);
    if (rc == 1) {
        struct kvctl_buf b = {0};
        kvctl_buf_printf(&b, "Member %16" PRIx64 " updated in cluster %16" PRIx64 "\n", id,
                         cluster_of(r->header));
        rc = emit(&b);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return rc;
}

int kvctl_member_change(struct kvctl *k, const char *sub, size_t nargs, char **args,
                        const char *peer_urls, bool learner)
{
    if (strcmp(sub, "add") == 0)
        return member_add(k, nargs, args, peer_urls, learner);
    if (strcmp(sub, "update") == 0)
        return member_update(k, nargs, args, peer_urls);
    return member_remove_promote(k, nargs, args, strcmp(sub, "promote") == 0);
}

/* ---- move-leader ---- */

int kvctl_cmd_move_leader(struct kvctl *k, int argc, char **argv)
{
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    kvc_client *leader = NULL;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, NULL, pos, &np);
    if (rc)
        goto out;
    if (np != 2) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "move-leader command needs 1 argument");
        goto out;
    }
    uint64_t target, leader_id = 0;
    char err[600];
    if (parse_hex_id(pos[1], &target, err, sizeof(err)) < 0) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "%s", err);
        goto out;
    }
    /* etcdctl: find the leader among the endpoints with Status, then ask it. */
    for (size_t i = 0; i < k->n_endpoints && !leader; i++) {
        kvc_client *c = NULL;
        kvc_error e = {0};
        Etcdserverpb__StatusRequest sreq;
        etcdserverpb__status_request__init(&sreq);
        Etcdserverpb__StatusResponse *st = NULL;
        int r = kvctl_open_one(k, k->endpoints[i], &c, &e);
        if (r == 0)
            r = kvctl_rpc(c, "/etcdserverpb.Maintenance/Status", &sreq.base,
                          &etcdserverpb__status_response__descriptor, (ProtobufCMessage **)&st,
                          k->command_timeout_ms, KVC_IDEMPOTENT, &e);
        if (r < 0) {
            kvc_close(c);
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, err, sizeof(err)));
            goto out;
        }
        if (st->header && st->header->member_id == st->leader) {
            leader = c;
            leader_id = st->leader;
        } else {
            kvc_close(c);
        }
        protobuf_c_message_free_unpacked(&st->base, NULL);
    }
    if (!leader) {
        struct kvctl_buf b = {0};
        for (size_t i = 0; i < k->n_endpoints; i++)
            kvctl_buf_printf(&b, "%s%s", i ? " " : "", k->endpoints[i]);
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "no leader endpoint given at [%s]", kvctl_buf_str(&b));
        kvctl_buf_free(&b);
        goto out;
    }
    Etcdserverpb__MoveLeaderRequest req;
    etcdserverpb__move_leader_request__init(&req);
    req.targetid = target;
    Etcdserverpb__MoveLeaderResponse *r = NULL;
    kvc_error e = {0};
    if (kvctl_rpc(leader, "/etcdserverpb.Maintenance/MoveLeader", &req.base,
                  &etcdserverpb__move_leader_response__descriptor, (ProtobufCMessage **)&r,
                  k->command_timeout_ms, 0, &e) < 0) {
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, err, sizeof(err)));
        goto out;
    }
    rc = print_other(k, &r->base);
    if (rc == 1) {
        struct kvctl_buf b = {0};
        kvctl_buf_printf(&b, "Leadership transferred from %" PRIx64 " to %" PRIx64 "\n", leader_id,
                         target);
        rc = emit(&b);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
out:
    kvc_close(leader);
    free(pos);
    return rc;
}
