/* kvctl RPC plumbing and error reporting: see kvctl.h. */
#include "kvctl.h"

#include "rpc.pb-c.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kvctl_fail(int code, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("Error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

int kvctl_unsupported_format(const struct kvctl *k)
{
    return kvctl_fail(KVCTL_EXIT_BAD_FEATURE, "%s not supported as output format", k->format_name);
}

static void base_config(const struct kvctl *k, kvc_config *cfg)
{
    kvc_config_default(cfg);
    /* etcdctl waits dial-timeout for a connection; a zero dial timeout means "no limit" there,
     * the command timeout still bounds every call. */
    cfg->dial_timeout_ms = k->dial_timeout_ms ? k->dial_timeout_ms : k->command_timeout_ms;
    /* TLS: --cacert, --cert, --key, --insecure-skip-tls-verify */
    cfg->ca_file = k->raw_cacert && *k->raw_cacert ? k->raw_cacert : NULL;
    cfg->cert_file = k->raw_cert && *k->raw_cert ? k->raw_cert : NULL;
    cfg->key_file = k->raw_key && *k->raw_key ? k->raw_key : NULL;
    cfg->insecure_skip_verify = k->insecure_skip_verify;
    cfg->server_name = kvctl_srv_server_name(k);
    /* --keepalive-time / --keepalive-timeout (2s / 6s): pings while a stream is open (watch,
     * lease keep-alive), so a hung member is left; libkvclient raises a time below 10 s to
     * 10 s, as etcdctl's grpc-go does. */
    cfg->keepalive_time_ms = k->keepalive_time_ms;
    cfg->keepalive_timeout_ms = k->keepalive_timeout_ms;
}

/* --user NAME[:PASSWORD] (--password): etcdctl authenticates first (Authenticate) and sends
 * the token with every call; "authentication is not enabled" is ignored, as clientv3 does.
 * 0, or the exit status after printing etcdctl's error. token[0] = 0: no token. */
static int authenticate(struct kvctl *k, const kvc_config *base, char *token, size_t cap)
{
    token[0] = 0;
    if (!k->raw_user || !*k->raw_user)
        return 0;
    char user[512];
    snprintf(user, sizeof user, "%s", k->raw_user);
    const char *pw = k->raw_password && *k->raw_password ? k->raw_password : NULL;
    char *colon = strchr(user, ':');
    if (!pw && !colon)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                          "kvctl cannot prompt for a password: use --user name:password or "
                          "--password");
    if (!pw) {
        *colon = 0;
        pw = colon + 1;
    }
    kvc_client *c = NULL;
    kvc_error err = {0};
    char m[512];
    if (kvc_open(&c, base, &err) < 0)
        return kvctl_fail(KVCTL_EXIT_BAD_CONNECTION, "%s", kvctl_err_text(&err, m, sizeof m));
    Etcdserverpb__AuthenticateRequest req;
    etcdserverpb__authenticate_request__init(&req);
    req.name = user;
    req.password = (char *)pw;
    ProtobufCMessage *r = NULL;
    int rc = kvctl_rpc(c, "/etcdserverpb.Auth/Authenticate", &req.base,
                       &etcdserverpb__authenticate_response__descriptor, &r, k->command_timeout_ms,
                       0, &err);
    kvc_close(c);
    if (rc < 0) {
        if (strcmp(err.message, "etcdserver: authentication is not enabled") == 0)
            return 0;
        /* etcdctl: the client cannot be created, ExitBadConnection */
        return kvctl_fail(KVCTL_EXIT_BAD_CONNECTION, "%s", kvctl_err_text(&err, m, sizeof m));
    }
    snprintf(token, cap, "%s", ((Etcdserverpb__AuthenticateResponse *)r)->token);
    protobuf_c_message_free_unpacked(r, NULL);
    return 0;
}

kvc_client *kvctl_client(struct kvctl *k, int *exit_code)
{
    if (k->client)
        return k->client;
    kvc_config cfg;
    base_config(k, &cfg);
    cfg.endpoints = (const char *const *)k->endpoints;
    cfg.n_endpoints = k->n_endpoints;
    kvc_error err = {0};
    char token[256];
    if ((*exit_code = authenticate(k, &cfg, token, sizeof token)) != 0)
        return NULL;
    cfg.auth_token = token[0] ? token : NULL;
    if (kvc_open(&k->client, &cfg, &err) < 0) {
        char m[512];
        *exit_code =
            kvctl_fail(KVCTL_EXIT_BAD_CONNECTION, "%s", kvctl_err_text(&err, m, sizeof(m)));
        return NULL;
    }
    return k->client;
}

int kvctl_open_one(const struct kvctl *k, const char *endpoint, kvc_client **out, kvc_error *err)
{
    kvc_config cfg;
    base_config(k, &cfg);
    const char *eps[1] = {endpoint};
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    return kvc_open(out, &cfg, err);
}

int kvctl_rpc(kvc_client *c, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
              uint32_t timeout_ms, int flags, kvc_error *err)
{
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        err->code = -1;
        snprintf(err->message, sizeof(err->message), "out of memory");
        return -1;
    }
    protobuf_c_message_pack(req, buf);
    uint8_t *out = NULL;
    size_t out_len = 0;
    int rc = kvc_call_unary(c, method, buf, n, &out, &out_len, timeout_ms, flags, err);
    free(buf);
    if (rc < 0)
        return -1;
    static const uint8_t empty[1];
    *resp = protobuf_c_message_unpack(resp_desc, NULL, out_len, out ? out : empty);
    kvc_free(out);
    if (!*resp) {
        err->code = -1;
        snprintf(err->message, sizeof(err->message), "failed to decode %s", resp_desc->name);
        return -1;
    }
    return 0;
}

const char *kvctl_code_name(int code)
{
    static const char *const names[] = {
        "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
        "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
        "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
        "DataLoss", "Unauthenticated"};
    if (code >= 0 && code < (int)(sizeof(names) / sizeof(names[0])))
        return names[code];
    return "Unknown";
}

const char *kvctl_err_text(const kvc_error *err, char *buf, size_t len)
{
    if (err->code < 0) {
        snprintf(buf, len, "%s", err->message);
    } else if (strncmp(err->message, "etcdserver: ", 12) == 0 ||
               strncmp(err->message, "mvcc: ", 6) == 0) {
        /* clientv3 turns etcd's own errors into errors whose text is the grpc-message */
        snprintf(buf, len, "%s", err->message);
    } else if (err->code == KVC_DEADLINE_EXCEEDED || err->code == KVC_UNAVAILABLE) {
        /* clientv3 keeps retrying an unreachable endpoint until the context expires */
        snprintf(buf, len, "context deadline exceeded");
    } else if (err->code == KVC_CANCELLED) {
        snprintf(buf, len, "context canceled");
    } else {
        snprintf(buf, len, "rpc error: code = %s desc = %s", kvctl_code_name(err->code),
                 err->message);
    }
    return buf;
}

/* Sends one request; on failure prints etcdctl's error line. Returns 0 or the exit status. */
int kvctl_call(struct kvctl *k, const char *method, const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *rd, ProtobufCMessage **resp, uint32_t timeout,
               int flags, int fail_code, const char *wrap)
{
    int rc = 0;
    kvc_client *c = kvctl_client(k, &rc);
    if (!c)
        return rc;
    kvc_error err = {0};
    if (kvctl_rpc(c, method, req, rd, resp, timeout, flags, &err) < 0) {
        char m[512];
        kvctl_err_text(&err, m, sizeof(m));
        if (wrap)
            return kvctl_fail(fail_code, "%s (%s)", wrap, m);
        return kvctl_fail(fail_code, "%s", m);
    }
    return 0;
}
