/*
 * kvctl lease grant|revoke|timetolive|list|keep-alive (etcdctl's lease_command.go).
 *
 * JSON follows what etcdctl prints: the clientv3 response structs, whose embedded
 * *ResponseHeader is inlined (grant, timetolive, list, keep-alive), except revoke, which prints
 * the protobuf response. keep-alive uses libkvclient's shared keepalive stream (callback form).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvctl.h"
#include "out.h"
#include "print_kv.h"
#include "print_fields.h"
#include "rpc.pb-c.h"

/* Go's fmt "%016x" of an int64 (the sign counts toward the width). */
static const char *lease_hex(char *buf, size_t len, int64_t id)
{
    if (id >= 0)
        snprintf(buf, len, "%016" PRIx64, (uint64_t)id);
    else
        snprintf(buf, len, "-%015" PRIx64, (uint64_t)0 - (uint64_t)id);
    return buf;
}

/* leaseFromArgs */
static int lease_arg(const char *arg, int64_t *id)
{
    int rc = kvctl_parse_int64(arg, 16, id);
    if (rc < 0) {
        char m[256];
        kvctl_parse_int_err(m, sizeof(m), arg, rc);
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "bad lease ID arg (%s), expecting ID in Hex", m);
    }
    return 0;
}

/* The inlined fields of an embedded *ResponseHeader (all omitempty). */
static void header_fields(struct kvctl_buf *b, uint64_t cluster, uint64_t member, int64_t rev,
                          uint64_t term, bool *first)
{
    if (cluster) {
        kvctl_buf_printf(b, "%s\"cluster_id\":%" PRIu64, *first ? "" : ",", cluster);
        *first = false;
    }
    if (member) {
        kvctl_buf_printf(b, "%s\"member_id\":%" PRIu64, *first ? "" : ",", member);
        *first = false;
    }
    if (rev) {
        kvctl_buf_printf(b, "%s\"revision\":%" PRId64, *first ? "" : ",", rev);
        *first = false;
    }
    if (term) {
        kvctl_buf_printf(b, "%s\"raft_term\":%" PRIu64, *first ? "" : ",", term);
        *first = false;
    }
}

static void pb_header_fields(struct kvctl_buf *b, const Etcdserverpb__ResponseHeader *h,
                             bool *first)
{
    if (h)
        header_fields(b, h->cluster_id, h->member_id, h->revision, h->raft_term, first);
}

/* -w protobuf of the clientv3 lease responses: their embedded *ResponseHeader's Marshal() is
 * promoted, so etcdctl prints only the packed header. */
static void pb_header(struct kvctl_buf *b, uint64_t cluster, uint64_t member, int64_t rev,
                      uint64_t term)
{
    Etcdserverpb__ResponseHeader h;
    etcdserverpb__response_header__init(&h);
    h.cluster_id = cluster;
    h.member_id = member;
    h.revision = rev;
    h.raft_term = term;
    uint8_t buf[64];
    size_t n = protobuf_c_message_get_packed_size(&h.base);
    if (n <= sizeof(buf)) {
        protobuf_c_message_pack(&h.base, buf);
        kvctl_buf_putn(b, buf, n);
    } else {
        b->failed = true;
    }
}

static void pb_header_msg(struct kvctl_buf *b, const Etcdserverpb__ResponseHeader *h)
{
    if (h)
        pb_header(b, h->cluster_id, h->member_id, h->revision, h->raft_term);
}

static int emit(struct kvctl_buf *b)
{
    int rc = kvctl_buf_ok(b) ? kvctl_buf_write(b, stdout) : -1;
    fflush(stdout);
    kvctl_buf_free(b);
    return rc < 0 ? KVCTL_EXIT_IO : 0;
}

static int grant(struct kvctl *k, size_t nargs, char **args)
{
    if (nargs != 1)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "lease grant command needs TTL argument");
    int64_t ttl;
    int prc = kvctl_parse_int64(args[0], 10, &ttl);
    if (prc < 0) {
        char m[256];
        kvctl_parse_int_err(m, sizeof(m), args[0], prc);
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "bad TTL (%s)", m);
    }
    Etcdserverpb__LeaseGrantRequest req;
    etcdserverpb__lease_grant_request__init(&req);
    req.ttl = ttl;
    Etcdserverpb__LeaseGrantResponse *r = NULL;
    int rc = kvctl_call(k, "/etcdserverpb.Lease/LeaseGrant", &req.base,
                        &etcdserverpb__lease_grant_response__descriptor, (ProtobufCMessage **)&r,
                        k->command_timeout_ms, 0, KVCTL_EXIT_ERROR, "failed to grant lease");
    if (rc)
        return rc;
    struct kvctl_buf b = {0};
    char hex[32];
    if (k->format == KVCTL_FMT_SIMPLE) {
        kvctl_buf_printf(&b, "lease %s granted with TTL(%" PRId64 "s)\n",
                         lease_hex(hex, sizeof(hex), r->id), r->ttl);
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_JSON) {
        bool first = true;
        kvctl_buf_puts(&b, "{");
        pb_header_fields(&b, r->header, &first);
        kvctl_buf_printf(&b,
                         "%s\"ID\":%" PRId64 ",\"TTL\":%" PRId64 ",\"Error\":", first ? "" : ",",
                         r->id, r->ttl);
        kvctl_json_string(&b, (const uint8_t *)(r->error ? r->error : ""),
                          r->error ? strlen(r->error) : 0);
        kvctl_buf_puts(&b, "}\n");
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_PROTOBUF) {
        pb_header_msg(&b, r->header);
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_FIELDS) {
        kvctl_fields_pb_header(&b, r->header);
        kvctl_fields_id_ttl(&b, r->id, r->ttl);
        rc = emit(&b);
    } else {
        rc = kvctl_unsupported_format(k);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return rc;
}

static int revoke(struct kvctl *k, size_t nargs, char **args)
{
    if (nargs != 1)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "lease revoke command needs 1 argument");
    int64_t id;
    int rc = lease_arg(args[0], &id);
    if (rc)
        return rc;
    Etcdserverpb__LeaseRevokeRequest req;
    etcdserverpb__lease_revoke_request__init(&req);
    req.id = id;
    ProtobufCMessage *r = NULL;
    rc = kvctl_call(k, "/etcdserverpb.Lease/LeaseRevoke", &req.base,
                    &etcdserverpb__lease_revoke_response__descriptor, &r, k->command_timeout_ms,
                    KVC_IDEMPOTENT, KVCTL_EXIT_ERROR, "failed to revoke lease");
    if (rc)
        return rc;
    char hex[32];
    if (k->format == KVCTL_FMT_SIMPLE) {
        printf("lease %s revoked\n", lease_hex(hex, sizeof(hex), id));
    } else if (k->format == KVCTL_FMT_JSON) {
        rc = kvctl_print_json(r) < 0 ? KVCTL_EXIT_IO : 0;
    } else if (k->format == KVCTL_FMT_PROTOBUF) {
        rc = kvctl_print_pb(r) < 0 ? KVCTL_EXIT_IO : 0;
    } else if (k->format == KVCTL_FMT_FIELDS) {
        struct kvctl_buf b = {0};
        kvctl_fields_pb_header(&b, ((Etcdserverpb__LeaseRevokeResponse *)r)->header);
        rc = emit(&b);
    } else {
        rc = kvctl_unsupported_format(k);
    }
    protobuf_c_message_free_unpacked(r, NULL);
    return rc;
}

static int timetolive(struct kvctl *k, size_t nargs, char **args, bool keys)
{
    if (nargs != 1)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                          "lease timetolive command needs lease ID as argument");
    int64_t id;
    int rc = lease_arg(args[0], &id);
    if (rc)
        return rc;
    Etcdserverpb__LeaseTimeToLiveRequest req;
    etcdserverpb__lease_time_to_live_request__init(&req);
    req.id = id;
    req.keys = keys;
    Etcdserverpb__LeaseTimeToLiveResponse *r = NULL;
    /* etcdctl: context.TODO(), no command timeout; errors exit with ExitBadConnection */
    rc = kvctl_call(k, "/etcdserverpb.Lease/LeaseTimeToLive", &req.base,
                    &etcdserverpb__lease_time_to_live_response__descriptor, (ProtobufCMessage **)&r,
                    0, KVC_IDEMPOTENT, KVCTL_EXIT_BAD_CONNECTION, NULL);
    if (rc)
        return rc;
    struct kvctl_buf b = {0};
    char hex[32];
    if (k->format == KVCTL_FMT_SIMPLE) {
        if (r->grantedttl == 0 && r->ttl == -1) {
            kvctl_buf_printf(&b, "lease %s already expired\n", lease_hex(hex, sizeof(hex), r->id));
        } else {
            kvctl_buf_printf(&b, "lease %s granted with TTL(%" PRId64 "s), remaining(%" PRId64 "s)",
                             lease_hex(hex, sizeof(hex), r->id), r->grantedttl, r->ttl);
            if (keys) {
                kvctl_buf_puts(&b, ", attached keys([");
                for (size_t i = 0; i < r->n_keys; i++) {
                    if (i)
                        kvctl_buf_puts(&b, " ");
                    kvctl_buf_putn(&b, r->keys[i].data, r->keys[i].len);
                }
                kvctl_buf_puts(&b, "])");
            }
            kvctl_buf_puts(&b, "\n");
        }
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_JSON) {
        bool first = true;
        kvctl_buf_puts(&b, "{");
        pb_header_fields(&b, r->header, &first);
        kvctl_buf_printf(
            &b, "%s\"id\":%" PRId64 ",\"ttl\":%" PRId64 ",\"granted-ttl\":%" PRId64 ",\"keys\":",
            first ? "" : ",", r->id, r->ttl, r->grantedttl);
        if (r->n_keys == 0) {
            kvctl_buf_puts(&b, "null");
        } else {
            kvctl_buf_puts(&b, "[");
            for (size_t i = 0; i < r->n_keys; i++) {
                if (i)
                    kvctl_buf_puts(&b, ",");
                kvctl_json_bytes(&b, r->keys[i].data, r->keys[i].len);
            }
            kvctl_buf_puts(&b, "]");
        }
        kvctl_buf_puts(&b, "}\n");
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_PROTOBUF) {
        pb_header_msg(&b, r->header);
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_FIELDS) {
        kvctl_fields_ttl(&b, r);
        rc = emit(&b);
    } else {
        rc = kvctl_unsupported_format(k);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return rc;
}

static int list(struct kvctl *k)
{
    Etcdserverpb__LeaseLeasesRequest req;
    etcdserverpb__lease_leases_request__init(&req);
    Etcdserverpb__LeaseLeasesResponse *r = NULL;
    int rc = kvctl_call(k, "/etcdserverpb.Lease/LeaseLeases", &req.base,
                        &etcdserverpb__lease_leases_response__descriptor, (ProtobufCMessage **)&r,
                        0, KVC_IDEMPOTENT, KVCTL_EXIT_BAD_CONNECTION, NULL);
    if (rc)
        return rc;
    struct kvctl_buf b = {0};
    char hex[32];
    if (k->format == KVCTL_FMT_SIMPLE) {
        kvctl_buf_printf(&b, "found %zu leases\n", r->n_leases);
        for (size_t i = 0; i < r->n_leases; i++)
            kvctl_buf_printf(&b, "%s\n", lease_hex(hex, sizeof(hex), r->leases[i]->id));
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_JSON) {
        bool first = true;
        kvctl_buf_puts(&b, "{");
        pb_header_fields(&b, r->header, &first);
        kvctl_buf_puts(&b, first ? "\"leases\":[" : ",\"leases\":[");
        for (size_t i = 0; i < r->n_leases; i++)
            kvctl_buf_printf(&b, "%s{\"id\":%" PRId64 "}", i ? "," : "", r->leases[i]->id);
        kvctl_buf_puts(&b, "]}\n");
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_PROTOBUF) {
        pb_header_msg(&b, r->header);
        rc = emit(&b);
    } else if (k->format == KVCTL_FMT_FIELDS) {
        kvctl_fields_leases(&b, r);
        rc = emit(&b);
    } else {
        rc = kvctl_unsupported_format(k);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return rc;
}

/* clientv3.LeaseKeepAliveResponse: {*ResponseHeader (inlined), ID, TTL} */
static void keepalive_line(const struct kvctl *k, struct kvctl_buf *b, const kvc_header *h,
                           int64_t id, int64_t ttl)
{
    char hex[32];
    if (k->format == KVCTL_FMT_SIMPLE) {
        kvctl_buf_printf(b, "lease %s keepalived with TTL(%" PRId64 ")\n",
                         lease_hex(hex, sizeof(hex), id), ttl);
    } else if (k->format == KVCTL_FMT_PROTOBUF) {
        pb_header(b, h->cluster_id, h->member_id, h->revision, h->raft_term);
    } else if (k->format == KVCTL_FMT_FIELDS) {
        kvctl_fields_header(b, h->cluster_id, h->member_id, h->revision, h->raft_term);
        kvctl_fields_id_ttl(b, id, ttl);
    } else {
        bool first = true;
        kvctl_buf_puts(b, "{");
        header_fields(b, h->cluster_id, h->member_id, h->revision, h->raft_term, &first);
        kvctl_buf_printf(b, "%s\"ID\":%" PRId64 ",\"TTL\":%" PRId64 "}\n", first ? "" : ",", id,
                         ttl);
    }
}

struct ka_state {
    const struct kvctl *k;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
};

static void ka_event(void *arg, const kvc_ka_event *ev)
{
    struct ka_state *s = arg;
    pthread_mutex_lock(&s->mu);
    if (!s->done) {
        if (ev->type == KVC_KA_RESPONSE) {
            if (s->k->format != KVCTL_FMT_TABLE) {
                struct kvctl_buf b = {0};
                keepalive_line(s->k, &b, &ev->header, ev->id, ev->ttl);
                if (emit(&b) != 0) {
                    s->rc = KVCTL_EXIT_IO;
                    s->done = true;
                }
            } else {
                s->rc = -1; /* unsupported format: reported by the main thread */
                s->done = true;
            }
        } else {
            s->done = true;
        }
        if (s->done)
            pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

static int keepalive(struct kvctl *k, size_t nargs, char **args, bool once)
{
    if (nargs != 1)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                          "lease keep-alive command needs lease ID as argument");
    int64_t id;
    int rc = lease_arg(args[0], &id);
    if (rc)
        return rc;
    kvc_client *c = kvctl_client(k, &rc);
    if (!c)
        return rc;
    kvc_error err = {0};
    char m[512];
    if (once) {
        /* One request on its own LeaseKeepAlive stream: send, half-close, read one response. */
        Etcdserverpb__LeaseKeepAliveRequest req;
        etcdserverpb__lease_keep_alive_request__init(&req);
        req.id = id;
        Etcdserverpb__LeaseKeepAliveResponse *r = NULL;
        if (kvctl_rpc(c, "/etcdserverpb.Lease/LeaseKeepAlive", &req.base,
                      &etcdserverpb__lease_keep_alive_response__descriptor, (ProtobufCMessage **)&r,
                      0, KVC_IDEMPOTENT, &err) < 0)
            return kvctl_fail(KVCTL_EXIT_BAD_CONNECTION, "%s", kvctl_err_text(&err, m, sizeof(m)));
        if (r->ttl <= 0) { /* clientv3.KeepAliveOnce: ErrLeaseNotFound */
            protobuf_c_message_free_unpacked(&r->base, NULL);
            return kvctl_fail(KVCTL_EXIT_BAD_CONNECTION, "etcdserver: requested lease not found");
        }
        kvc_header h = {0};
        if (r->header) {
            h.cluster_id = r->header->cluster_id;
            h.member_id = r->header->member_id;
            h.revision = r->header->revision;
            h.raft_term = r->header->raft_term;
        }
        int64_t rid = r->id, rttl = r->ttl;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        if (k->format == KVCTL_FMT_TABLE)
            return kvctl_unsupported_format(k);
        struct kvctl_buf b = {0};
        keepalive_line(k, &b, &h, rid, rttl);
        return emit(&b);
    }
    struct ka_state s = {.k = k, .done = false, .rc = 0};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    kvc_keepalive *ka = NULL;
    if (kvc_lease_keepalive(c, id, 0, ka_event, &s, &ka, &err) < 0) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_CONNECTION, "%s", kvctl_err_text(&err, m, sizeof(m)));
        goto out;
    }
    pthread_mutex_lock(&s.mu);
    while (!s.done)
        pthread_cond_wait(&s.cv, &s.mu);
    pthread_mutex_unlock(&s.mu);
    kvc_keepalive_stop(ka);
    if (s.rc < 0) {
        rc = kvctl_unsupported_format(k);
    } else if (s.rc > 0) {
        rc = s.rc;
    } else {
        char hex[32];
        if (k->format == KVCTL_FMT_SIMPLE)
            printf("lease %s expired or revoked.\n", lease_hex(hex, sizeof(hex), id));
        rc = 0;
    }
out:
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    return rc;
}

int kvctl_cmd_lease(struct kvctl *k, int argc, char **argv)
{
    bool keys = false, once = false;
    struct kvctl_flag fl[] = {
        {"keys", 0, KVCTL_FLAG_BOOL, &keys, false},
        {"once", 0, KVCTL_FLAG_BOOL, &once, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    static const char *const subs[] = {"grant", "revoke", "timetolive", "list", "keep-alive"};
    int sub = np >= 2 ? kvctl_match(pos[1], subs, 5) : -1;
    if (sub < 0) {
        rc = kvctl_group_help("lease", np >= 2 ? pos[1] : NULL);
        goto out;
    }
    /* --keys belongs to timetolive and --once to keep-alive only, as in etcdctl */
    if ((fl[0].changed && sub != 2) || (fl[1].changed && sub != 4)) {
        rc = kvctl_flag_error(argc, argv,
                              fl[0].changed && sub != 2 ? "unknown flag: --keys"
                                                        : "unknown flag: --once");
        goto out;
    }
    size_t na = np - 2;
    char **args = pos + 2;
    switch (sub) {
    case 0:
        rc = grant(k, na, args);
        break;
    case 1:
        rc = revoke(k, na, args);
        break;
    case 2:
        rc = timetolive(k, na, args, keys);
        break;
    case 3:
        rc = list(k);
        break;
    default:
        rc = keepalive(k, na, args, once);
        break;
    }
out:
    free(pos);
    return rc;
}
