#include "daemon/config.h"
#include "daemon/config_file.h"
#include "auth/auth_jwt.h"
#include "common/go_duration.h"
#include "log/log.h"
#include "pb/pb_scan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_config_default(kv_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->name, sizeof(cfg->name), "default");
    snprintf(cfg->initial_cluster_token, sizeof(cfg->initial_cluster_token), "etcd-cluster");
    snprintf(cfg->initial_cluster_state, sizeof(cfg->initial_cluster_state), "new");
    cfg->heartbeat_interval_ms = 100;
    cfg->snapshot_count = 100000;
    cfg->self_signed_cert_validity = 1; /* etcd: one year */
    cfg->strict_reconfig_check = 1;     /* etcd's default */
    cfg->experimental_wal = 1;          /* the raft log in <data-dir>/wal (docs/raftlog.md) */
    cfg->peer_max_queue_bytes = 16u << 20;
    cfg->election_timeout_ms = 1000;
    cfg->max_request_bytes = 1572864;
    cfg->max_txn_ops = 128;
    cfg->quota_backend_bytes = 2ULL << 30;
    cfg->max_concurrent_streams = 1000;
    cfg->max_connections = 10000;
    cfg->max_send_buffer_bytes = 16u << 20;
    cfg->max_pending_proposals = 10000;
    cfg->read_workers = 2;
    cfg->max_pending_reads = 256;
    snprintf(cfg->auth_token, sizeof cfg->auth_token, "simple");
    cfg->auth_token_ttl = 300;
    cfg->auth_hash_iterations = 100000;
    cfg->auth_max_pending_hashes = 64;
    cfg->auth_max_tokens = 100000;
    cfg->max_lease_ttl_s = 9000000000LL;
    cfg->max_keys_per_lease = 0;
    cfg->lease_revoke_rate = 1000;
    cfg->lease_checkpoint_interval_ms = 300000;
    cfg->lease_checkpoint_rate = 1000;
    cfg->max_pending_lease_forwards = 65536;
    cfg->startup_verify_records = 10000;
    cfg->startup_verify_full = 1;
    cfg->max_health_probes = 64;
    cfg->compaction_batch_limit = 50;
    cfg->metrics_max_connections = 256;
    cfg->metrics_request_timeout_ms = 5000;
    cfg->max_response_bytes = 256u << 20;
    cfg->max_buffered_bytes = 512u << 20;
    cfg->max_recv_buffer_bytes = 16u << 20;
    cfg->grpc_handshake_timeout_ms = 10000;
    cfg->grpc_max_connection_idle_ms = 0;
    cfg->grpc_keepalive_min_time_ms = 5000;
    cfg->grpc_keepalive_interval_ms = 2u * 3600 * 1000;
    cfg->grpc_keepalive_timeout_ms = 20000;
    cfg->send_stall_timeout_ms = 30000;
    cfg->max_pending_request_bytes = 64u << 20;
    cfg->max_watchers_per_stream = 10000;
    cfg->max_watch_streams_per_conn = 1000;
    cfg->max_concurrency_waiters = 10000;
    cfg->watch_send_buffer_bytes = 1u << 20;
    cfg->watch_progress_interval_ms = 600000;
    snprintf(cfg->auto_compaction_mode, sizeof(cfg->auto_compaction_mode), "periodic");
    snprintf(cfg->auto_compaction_retention, sizeof(cfg->auto_compaction_retention), "0");
    cfg->auto_compaction_interval_ms = 300000;
    cfg->max_snapshots = 2;
    cfg->max_raft_inbox_bytes = 64u << 20;
    cfg->max_raft_inbox_messages = 4096;
    cfg->max_pending_read_index = 10000;
    cfg->max_forwarded_proposals = 10000;
    cfg->peer_max_prio_queue_bytes = 4u << 20;
    cfg->peer_max_pending_conns = 16;
    cfg->peer_handshake_timeout_ms = 1000;
    cfg->corrupt_check_time_ms = 60000; /* on by default (etcd 3.4: 0, off) */
    cfg->malloc_trim_interval_ms = 1000;
    snprintf(cfg->log_level, sizeof(cfg->log_level), "info");
    snprintf(cfg->log_format, sizeof(cfg->log_format), "text");
    snprintf(cfg->log_outputs, sizeof(cfg->log_outputs), "stderr");
    cfg->enable_grpc_gateway = 1; /* etcd's default */
}

int kv_url_parse(kv_url *u, const char *text, char *err, size_t errlen)
{
    const char *p = text;
    memset(u, 0, sizeof(*u));
    if (strncmp(p, "unixs://", 8) == 0) {
        snprintf(err, errlen, "%s: unix sockets are not supported (use https://)", text);
        return -ENOTSUP;
    }
    int tls = strncmp(p, "https://", 8) == 0;
    if (tls)
        p += 8;
    else if (strncmp(p, "http://", 7) == 0)
        p += 7;
    const char *colon = strrchr(p, ':');
    if (colon == NULL || colon == p) {
        snprintf(err, errlen, "%s: expected [http://]host:port", text);
        return -EINVAL;
    }
    size_t hlen = (size_t)(colon - p);
    if (*p == '[' && hlen >= 2 && p[hlen - 1] == ']') { /* [::1]:2379 */
        p++;
        hlen -= 2;
    }
    if (hlen >= sizeof(u->host)) {
        snprintf(err, errlen, "%s: host too long", text);
        return -EINVAL;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' && *end != '/') {
        snprintf(err, errlen, "%s: bad port", text);
        return -EINVAL;
    }
    if (port < 0 || port > 65535) {
        snprintf(err, errlen, "%s: port out of range", text);
        return -EINVAL;
    }
    memcpy(u->host, p, hlen);
    u->host[hlen] = '\0';
    u->port = (int)port;
    u->tls = tls;
    int v6 = strchr(u->host, ':') != NULL; /* an IPv6 literal keeps its brackets (RFC 3986) */
    snprintf(u->text, sizeof(u->text), "%s://%s%s%s:%d", tls ? "https" : "http", v6 ? "[" : "",
             u->host, v6 ? "]" : "", u->port);
    return 0;
}

static int parse_url_list(kv_url *out, size_t *n, const char *list, char *err, size_t errlen)
{
    char buf[2048];
    if (strlen(list) >= sizeof(buf)) {
        snprintf(err, errlen, "URL list too long");
        return -EINVAL;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == KV_MAX_URLS) {
            snprintf(err, errlen, "too many URLs (max %d)", KV_MAX_URLS);
            return -E2BIG;
        }
        int rc = kv_url_parse(&out[*n], tok, err, errlen);
        if (rc < 0)
            return rc;
        (*n)++;
    }
    if (*n == 0) {
        snprintf(err, errlen, "empty URL list");
        return -EINVAL;
    }
    return 0;
}

static int parse_cluster(kv_config *cfg, const char *list, char *err, size_t errlen)
{
    char buf[4096];
    if (strlen(list) >= sizeof(buf)) {
        snprintf(err, errlen, "--initial-cluster too long");
        return -EINVAL;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    cfg->n_initial_cluster = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL || eq == tok) {
            snprintf(err, errlen, "--initial-cluster: expected name=url, got '%s'", tok);
            return -EINVAL;
        }
        if (cfg->n_initial_cluster == KV_MAX_MEMBERS) {
            snprintf(err, errlen, "--initial-cluster: too many members (max %d)", KV_MAX_MEMBERS);
            return -E2BIG;
        }
        *eq = '\0';
        kv_peer *p = &cfg->initial_cluster[cfg->n_initial_cluster];
        if (strlen(tok) >= sizeof(p->name)) {
            snprintf(err, errlen, "--initial-cluster: member name too long");
            return -EINVAL;
        }
        snprintf(p->name, sizeof(p->name), "%s", tok);
        int rc = kv_url_parse(&p->url, eq + 1, err, errlen);
        if (rc < 0)
            return rc;
        cfg->n_initial_cluster++;
    }
    return 0;
}

int kv_config_set_cluster(kv_config *cfg, const char *list, char *err, size_t errlen)
{
    return parse_cluster(cfg, list, err, errlen);
}

/* Go's strconv "underscoreOK" (Go 1.17): in a number of Go syntax, '_' only between two digits
 * or between a base prefix and a digit ("1_000", "0x_3e8"; not "_1", "1__0", "1_"). */
static int go_underscore_ok(const char *s)
{
    char saw = '^'; /* ^ start, 0 a digit or the prefix, _ an underscore, ! anything else */
    int hex = 0;
    if (*s == '+' || *s == '-')
        s++;
    if (s[0] == '0' && s[1] != '\0' && strchr("bBoOxX", s[1]) != NULL) {
        hex = s[1] == 'x' || s[1] == 'X';
        saw = '0';
        s += 2;
    }
    for (; *s; s++) {
        char c = *s;
        if ((c >= '0' && c <= '9') || (hex && strchr("abcdefABCDEF", c) != NULL)) {
            saw = '0';
        } else if (c == '_') {
            if (saw != '0')
                return 0;
            saw = '_';
        } else {
            if (saw == '_')
                return 0;
            saw = '!';
        }
    }
    return saw != '_';
}

/* Go's strconv.ParseUint(s, 0, 64) (Go 1.17, etcd 3.4.23's toolchain), which etcd's flag package
 * reads its uint flags with: a 0x/0X (hex), 0o/0O (octal) or 0b/0B (binary) prefix, or a
 * leading 0 (octal: "010" is 8), '_' as go_underscore_ok allows; no sign, no blanks.
 * 0, -EINVAL (no such number) or -ERANGE (past UINT64_MAX). */
static int go_parse_uint(const char *s, uint64_t *out)
{
    const char *s0 = s;
    unsigned base = 10;
    int underscores = 0;
    uint64_t n = 0;
    if (*s == '\0')
        return -EINVAL;
    if (s[0] == '0') {
        char p = (char)(s[1] | 0x20); /* Go's lower() */
        if (strlen(s) >= 3 && (p == 'b' || p == 'o' || p == 'x')) {
            base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
            s += 2;
        } else {
            base = 8;
            s++;
        }
    }
    for (; *s; s++) {
        char c = *s, l = (char)(c | 0x20);
        unsigned d;
        if (c == '_') {
            underscores = 1;
            continue;
        }
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (l >= 'a' && l <= 'z')
            d = (unsigned)(l - 'a') + 10;
        else
            return -EINVAL;
        if (d >= base)
            return -EINVAL;
        if (n > (UINT64_MAX - d) / base)
            return -ERANGE;
        n = n * base + d;
    }
    if (underscores && !go_underscore_ok(s0))
        return -EINVAL;
    *out = n;
    return 0;
}

/* Go's strconv.ParseInt(s, 0, 64), etcd's int flags: an optional sign, then go_parse_uint. */
static int go_parse_int(const char *s, int64_t *out)
{
    int neg = *s == '-';
    uint64_t u;
    if (*s == '+' || *s == '-')
        s++;
    int rc = go_parse_uint(s, &u);
    if (rc < 0)
        return rc;
    if (u > (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX))
        return -ERANGE;
    *out = neg ? (int64_t)(0 - u) : (int64_t)u; /* 0 - u: -2^63 has no positive int64 */
    return 0;
}

/* How a flag's number is spelled. etcd 3.4's int and uint flags are read with Go's ParseInt or
 * ParseUint in base 0 (go_parse_uint), and an etcd command line, ETCD_* variable or YAML file
 * given to kvd may spell them so ("--election-timeout=0x3e8"): the kvd flags with an etcd 3.4
 * int or uint flag's name take that syntax. kvd's own flags keep plain base 10 (strtoull):
 * no etcd configuration holds them, and "010" reading as 8 there would only surprise. */
enum { NUM_DEC, NUM_GO_UINT, NUM_GO_INT };

static int number_syntax(const char *flag)
{
    /* etcdmain/config.go: UintVar, Uint64Var, NewUint32Value (ParseUint); Int64Var, IntVar */
    static const char *const uints[] = {
        "heartbeat-interval",     "election-timeout", "max-request-bytes", "max-txn-ops",
        "max-concurrent-streams", "max-snapshots",    "snapshot-count",    "auth-token-ttl"};
    static const char *const ints[] = {"quota-backend-bytes",
                                       "experimental-compaction-batch-limit"};
    for (size_t i = 0; i < sizeof uints / sizeof uints[0]; i++)
        if (strcmp(uints[i], flag) == 0)
            return NUM_GO_UINT;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strcmp(ints[i], flag) == 0)
            return NUM_GO_INT;
    return NUM_DEC;
}

/* An unsigned setting in [min, max], its number spelled as number_syntax says. */
static int parse_u64(const char *flag, const char *v, int syntax, uint64_t min, uint64_t max,
                     uint64_t *out, char *err, size_t errlen)
{
    uint64_t x = 0;
    int ok;
    if (syntax == NUM_GO_UINT) {
        ok = go_parse_uint(v, &x) == 0;
    } else if (syntax == NUM_GO_INT) {
        int64_t i = 0;
        ok = go_parse_int(v, &i) == 0 && i >= 0; /* a negative one is out of every range */
        x = (uint64_t)i;
    } else {
        char *end;
        errno = 0;
        unsigned long long y = strtoull(v, &end, 10);
        ok = !errno && end != v && *end == '\0' && v[0] != '-';
        x = y;
    }
    if (!ok || x < min || x > max) {
        snprintf(err, errlen, "--%s: invalid value '%s' (want %" PRIu64 "..%" PRIu64 ")", flag, v,
                 min, max);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

/* A kvd duration setting, held in milliseconds: Go's syntax (common/go_duration.h) with kvd's
 * extra, a lone number without a unit ("1500", "1.5") is milliseconds; refused naming the
 * flag when negative (meaningless for these periods and timeouts), when under 1 ms but not 0
 * (it would read as 0, which turns several of them off; the YAML reader refuses such a plain
 * number of nanoseconds for the same reason), or past 4e9 ms (the field is 32 bits). */
static int parse_duration_ms(const char *flag, const char *v, uint32_t *out, char *err,
                             size_t errlen)
{
    int64_t ns = 0;
    const char *why = "";
    if (kv_go_duration_parse(v, KV_NS_PER_MS, &ns) < 0)
        goto bad;
    if (ns < 0) {
        why = " (must not be negative)";
        goto bad;
    }
    if (ns > 0 && ns < KV_NS_PER_MS) {
        why = " (under 1ms, kvd's resolution: it would read as 0)";
        goto bad;
    }
    if (ns > 4000000000LL * KV_NS_PER_MS) {
        why = " (at most 4000000000ms)";
        goto bad;
    }
    *out = (uint32_t)(ns / KV_NS_PER_MS); /* whole milliseconds: "1.5ms" is 1, as before */
    return 0;
bad:
    snprintf(err, errlen, "--%s: invalid duration '%s'%s", flag, v, why);
    return -EINVAL;
}

enum { F_STR, F_URLS, F_CLUSTER, F_U32, F_U64, F_SIZE, F_I64, F_DUR, F_BOOL, F_IGNORED, F_ETCD };

/* F_ETCD: an etcd 3.4 flag kvd has no setting for (README.md, "Flags": the table's last
 * rows). Its value is checked as etcd's flag type, so a bad one is still refused; a value
 * kvd cannot honour is refused with the reason; any other has no effect. The flag_def's off
 * is the index of its rule in ETCD_RULES. */
enum { T_BOOL, T_DUR, T_UINT, T_INT, T_CHOICE, T_STR };

typedef struct etcd_rule {
    int type;
    uint64_t min, max;    /* T_UINT */
    const char *choices;  /* T_CHOICE: etcd's values, '|'-separated ("" among them: empty) */
    const char *want;     /* T_CHOICE: the same, for the error */
    const char *honoured; /* the one value kvd can honour (NULL: every valid value) */
    const char *refusal;  /* why any other value is refused */
    const char *empty;    /* T_STR: etcd's flag refuses an empty value, with this error */
} etcd_rule;

enum {
    R_BOOL,
    R_DUR,
    R_UINT,
    R_INT,
    R_STR,
    R_BCRYPT_COST,
    R_FREELIST,
    R_METRICS,
    R_FALLBACK,
    R_FORCE_NEW_CLUSTER,
    R_DISCOVERY,
    R_DISCOVERY_PROXY,
    R_PROXY,
    R_V2V3,
    R_CLIENT_HOSTNAME,
    R_WAL_DIR,
    R_CORS,
    R_HOST_WHITELIST,
};

static const etcd_rule ETCD_RULES[] = {
    [R_BOOL] = {.type = T_BOOL},
    [R_DUR] = {.type = T_DUR},
    [R_UINT] = {.type = T_UINT, .max = UINT64_MAX},
    [R_INT] = {.type = T_INT},
    [R_STR] = {.type = T_STR},
    /* as etcd 3.4 takes them: any uint (a cost outside 4..31 falls back to 10), any text
     * (not "map": array; not "extensive": basic) */
    [R_BCRYPT_COST] = {.type = T_UINT, .max = UINT32_MAX}, /* etcd: a uint */
    [R_FREELIST] = {.type = T_STR},
    [R_METRICS] = {.type = T_STR},
    [R_FALLBACK] = {.type = T_CHOICE, .choices = "exit|proxy", .want = "exit or proxy"},
    [R_FORCE_NEW_CLUSTER] =
        {.type = T_BOOL,
         .honoured = "false",
         .refusal = "kvd cannot rewrite the membership of an existing data dir. To recover a "
                    "cluster that lost quorum, restore a snapshot (etcdctl snapshot save from a "
                    "surviving member, or a backup) into a new data dir with kvctl snapshot "
                    "restore or etcdctl snapshot restore, start it as a one-member cluster with "
                    "a new --initial-cluster-token, then add members (README.md, \"Restore\")"},
    [R_DISCOVERY] = {.type = T_STR,
                     .honoured = "",
                     .refusal = "etcd's v2 discovery service is not supported; bootstrap with "
                                "--initial-cluster, or from DNS SRV records with --discovery-srv"},
    [R_DISCOVERY_PROXY] = {.type = T_STR,
                           .honoured = "",
                           .refusal = "only used by --discovery, etcd's v2 discovery service, "
                                      "which is not supported; bootstrap with --initial-cluster "
                                      "or --discovery-srv"},
    [R_PROXY] = {.type = T_CHOICE,
                 .choices = "off|readonly|on",
                 .want = "off, readonly or on",
                 .honoured = "off",
                 .refusal = "etcd's v2 proxy is not supported; run kvd grpc-proxy start (etcd's "
                            "gRPC proxy) or kvd gateway start instead"},
    [R_V2V3] = {.type = T_STR,
                .honoured = "",
                .refusal = "the v2 API is not served (kvd serves the v3 API only)"},
    [R_CLIENT_HOSTNAME] = {.type = T_STR,
                           .honoured = "",
                           .refusal = "not supported: kvd cannot require a host name in client "
                                      "certificates; it takes --client-cert-auth, "
                                      "--trusted-ca-file and --client-crl-file"},
    [R_WAL_DIR] = {.type = T_STR,
                   .honoured = "",
                   .refusal = "a separate WAL directory is not supported: kvd keeps its raft "
                              "write-ahead log inside --data-dir, in <data-dir>/wal (in "
                              "data.mdb with --experimental-wal=false; docs/raftlog.md)"},
    /* etcd 3.4's --cors is a UniqueURLs flag: "" is no URL (types.NewURLs), while its YAML
     * key and ETCD_CORS leave the default when empty (parse_config_file, kv_config_parse_env) */
    [R_CORS] = {.type = T_STR,
                .honoured = "*",
                .refusal = "kvd answers HTTP requests from every origin (Access-Control-Allow-"
                           "Origin: *, etcd's default); a list of origins is not supported",
                .empty = "URL scheme must be http, https, unix, or unixs"},
    /* a UniqueStrings flag in etcd 3.4: "" is a valid value there, so it stays accepted (as
     * the default, "*"; etcd's flag would keep the one host name "") */
    [R_HOST_WHITELIST] = {.type = T_STR,
                          .honoured = "*",
                          .refusal = "kvd answers HTTP requests for any Host (etcd's default, "
                                     "*); a list of host names is not supported"},
};

/* Go's strconv.ParseBool, which etcd's bool flags use: 1 (*b set) or 0 (not a bool). */
static int parse_bool(const char *val, int *b)
{
    static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True"};
    static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(val, yes[i]) == 0) {
            *b = 1;
            return 1;
        }
        if (strcmp(val, no[i]) == 0) {
            *b = 0;
            return 1;
        }
    }
    return 0;
}

/* Is val one of the '|'-separated choices ("a|b", "|a|b": empty too)? */
static int is_choice(const char *choices, const char *val)
{
    size_t n = strlen(val);
    for (const char *p = choices;; p++) {
        size_t len = strcspn(p, "|");
        if (len == n && strncmp(p, val, n) == 0)
            return 1;
        p += len;
        if (*p == '\0')
            return 0;
    }
}

/* Checks val of the F_ETCD flag name against its rule (see ETCD_RULES). */
static int check_etcd_flag(const char *name, const etcd_rule *r, const char *val, char *err,
                           size_t errlen)
{
    uint64_t u;
    int64_t ns; /* T_DUR, T_INT: checked, not kept */
    int rc = 0, b = 0;
    if (*val == '\0' && r->empty) {
        snprintf(err, errlen,
                 "--%s: '' refused: etcd 3.4 refuses an empty value too (%s); leave the flag "
                 "out, or give '*'",
                 name, r->empty);
        return -EINVAL;
    }
    if (*val == '\0' && (r->type == T_STR || r->type == T_CHOICE))
        return 0; /* etcd: an empty string setting (YAML '') is the default */
    switch (r->type) {
    case T_BOOL:
        if (!parse_bool(val, &b)) {
            snprintf(err, errlen, "--%s: want true or false", name);
            return -EINVAL;
        }
        val = b ? "true" : "false"; /* the spelling honoured compares with */
        break;
    case T_DUR: /* no kvd setting: any duration etcd takes, negative or under 1 ms too */
        if (kv_go_duration_parse(val, KV_NS_PER_MS, &ns) < 0) {
            snprintf(err, errlen, "--%s: invalid duration '%s'", name, val);
            return -EINVAL;
        }
        break;
    case T_UINT:
        rc = parse_u64(name, val, NUM_GO_UINT, r->min, r->max, &u, err, errlen);
        break;
    case T_INT:
        if (go_parse_int(val, &ns) < 0) {
            snprintf(err, errlen, "--%s: invalid value '%s' (want an integer)", name, val);
            return -EINVAL;
        }
        break;
    case T_CHOICE:
        if (!is_choice(r->choices, val)) {
            snprintf(err, errlen, "--%s: want %s, got '%s'", name, r->want, val);
            return -EINVAL;
        }
        break;
    case T_STR:
        break;
    }
    if (rc == 0 && r->honoured && strcmp(val, r->honoured) != 0) {
        snprintf(err, errlen, "--%s: '%s' refused: %s", name, val, r->refusal);
        return -ENOTSUP;
    }
    return rc;
}

typedef struct flag_def {
    const char *name;
    int kind;
    size_t off;   /* offset into kv_config */
    size_t n_off; /* for F_URLS: offset of the count */
    size_t cap;   /* for F_STR: buffer size */
    uint64_t min, max;
} flag_def;

#define OFF(f) offsetof(kv_config, f)
/* What a raft message needs beyond its one entry's request (its encoding, the entry's
 * envelope, the frame header), and the peer transport's largest frame (peer_net.c). */
#define KV_CONFIG_PEER_FRAME_SLACK 65536u
#define KV_CONFIG_PEER_MAX_FRAME (64ull << 20)
static const flag_def FLAGS[] = {
    {"name", F_STR, OFF(name), 0, sizeof(((kv_config *)0)->name), 0, 0},
    {"data-dir", F_STR, OFF(data_dir), 0, sizeof(((kv_config *)0)->data_dir), 0, 0},
    {"listen-client-urls", F_URLS, OFF(listen_client), OFF(n_listen_client), 0, 0, 0},
    {"advertise-client-urls", F_URLS, OFF(advertise_client), OFF(n_advertise_client), 0, 0, 0},
    {"listen-peer-urls", F_URLS, OFF(listen_peer), OFF(n_listen_peer), 0, 0, 0},
    {"initial-advertise-peer-urls", F_URLS, OFF(advertise_peer), OFF(n_advertise_peer), 0, 0, 0},
    {"listen-metrics-urls", F_URLS, OFF(listen_metrics), OFF(n_listen_metrics), 0, 0, 0},
    {"initial-cluster", F_CLUSTER, 0, 0, 0, 0, 0},
    {"peers", F_CLUSTER, 0, 0, 0, 0, 0},
    {"initial-cluster-token", F_STR, OFF(initial_cluster_token), 0,
     sizeof(((kv_config *)0)->initial_cluster_token), 0, 0},
    {"initial-cluster-state", F_STR, OFF(initial_cluster_state), 0,
     sizeof(((kv_config *)0)->initial_cluster_state), 0, 0},
    {"strict-reconfig-check", F_BOOL, OFF(strict_reconfig_check), 0, 0, 0, 0},
    {"discovery-srv", F_STR, OFF(discovery_srv), 0, sizeof(((kv_config *)0)->discovery_srv), 0, 0},
    {"discovery-srv-name", F_STR, OFF(discovery_srv_name), 0,
     sizeof(((kv_config *)0)->discovery_srv_name), 0, 0},
    {"initial-member-id", F_STR, OFF(initial_member_id), 0,
     sizeof(((kv_config *)0)->initial_member_id), 0, 0},
    {"heartbeat-interval", F_U32, OFF(heartbeat_interval_ms), 0, 0, 1, 60000},
    {"election-timeout", F_U32, OFF(election_timeout_ms), 0, 0, 5, 600000},
    {"max-request-bytes", F_SIZE, OFF(max_request_bytes), 0, 0, 1024, 1ULL << 30},
    {"max-txn-ops", F_U32, OFF(max_txn_ops), 0, 0, 1, KV_TXN_MAX_OPS_LIMIT},
    {"quota-backend-bytes", F_U64, OFF(quota_backend_bytes), 0, 0, 0, 1ULL << 40},
    {"max-concurrent-streams", F_U32, OFF(max_concurrent_streams), 0, 0, 1, 1u << 20},
    {"max-connections", F_U32, OFF(max_connections), 0, 0, 1, 1u << 20},
    {"max-send-buffer-bytes", F_SIZE, OFF(max_send_buffer_bytes), 0, 0, 65536, 1ULL << 32},
    {"max-pending-proposals", F_U32, OFF(max_pending_proposals), 0, 0, 1, 1u << 24},
    {"read-workers", F_U32, OFF(read_workers), 0, 0, 1, 64},
    {"max-pending-reads", F_U32, OFF(max_pending_reads), 0, 0, 1, 1u << 20},
    {"max-lease-ttl", F_I64, OFF(max_lease_ttl_s), 0, 0, 1, 9000000000ULL},
    {"max-keys-per-lease", F_U32, OFF(max_keys_per_lease), 0, 0, 0, UINT32_MAX},
    {"lease-revoke-rate", F_U32, OFF(lease_revoke_rate), 0, 0, 1, 1u << 24},
    {"lease-checkpoint-interval", F_DUR, OFF(lease_checkpoint_interval_ms), 0, 0, 0, 0},
    {"lease-checkpoint-rate", F_U32, OFF(lease_checkpoint_rate), 0, 0, 1, 1u << 24},
    {"max-pending-lease-forwards", F_U32, OFF(max_pending_lease_forwards), 0, 0, 1, 1u << 24},
    {"enable-failpoints", F_BOOL, OFF(enable_failpoints), 0, 0, 0, 0},
    {"enable-pprof", F_BOOL, OFF(enable_pprof), 0, 0, 0, 0},
    {"enable-grpc-gateway", F_BOOL, OFF(enable_grpc_gateway), 0, 0, 0, 0},
    {"startup-verify-records", F_U64, OFF(startup_verify_records), 0, 0, 0, 1ULL << 40},
    {"startup-verify-full", F_BOOL, OFF(startup_verify_full), 0, 0, 0, 0},
    {"max-health-probes", F_U32, OFF(max_health_probes), 0, 0, 1, 1u << 16},
    {"experimental-compaction-batch-limit", F_U32, OFF(compaction_batch_limit), 0, 0, 1, 1u << 20},
    {"experimental-wal", F_BOOL, OFF(experimental_wal), 0, 0, 0, 0},
    {"wal-segment-bytes", F_U64, OFF(wal_segment_bytes), 0, 0, 1u << 16, 1ULL << 40},
    {"metrics-max-connections", F_U32, OFF(metrics_max_connections), 0, 0, 2, 1u << 20},
    {"metrics-request-timeout", F_DUR, OFF(metrics_request_timeout_ms), 0, 0, 0, 0},
    {"max-response-bytes", F_SIZE, OFF(max_response_bytes), 0, 0, 65536, UINT32_MAX},
    {"max-buffered-bytes", F_SIZE, OFF(max_buffered_bytes), 0, 0, 1u << 20, 1ULL << 40},
    {"max-recv-buffer-bytes", F_SIZE, OFF(max_recv_buffer_bytes), 0, 0, 65536, 1ULL << 32},
    {"grpc-handshake-timeout", F_DUR, OFF(grpc_handshake_timeout_ms), 0, 0, 0, 0},
    {"grpc-max-connection-idle", F_DUR, OFF(grpc_max_connection_idle_ms), 0, 0, 0, 0},
    {"grpc-keepalive-min-time", F_DUR, OFF(grpc_keepalive_min_time_ms), 0, 0, 0, 0},
    {"grpc-keepalive-interval", F_DUR, OFF(grpc_keepalive_interval_ms), 0, 0, 0, 0},
    {"grpc-keepalive-timeout", F_DUR, OFF(grpc_keepalive_timeout_ms), 0, 0, 0, 0},
    {"send-stall-timeout", F_DUR, OFF(send_stall_timeout_ms), 0, 0, 0, 0},
    {"max-pending-request-bytes", F_SIZE, OFF(max_pending_request_bytes), 0, 0, 1u << 20,
     1ULL << 40},
    {"max-watchers-per-stream", F_U32, OFF(max_watchers_per_stream), 0, 0, 1, 1u << 24},
    {"max-watch-streams-per-connection", F_U32, OFF(max_watch_streams_per_conn), 0, 0, 1, 1u << 20},
    {"max-concurrency-waiters", F_U32, OFF(max_concurrency_waiters), 0, 0, 1, 1u << 24},
    {"watch-send-buffer-bytes", F_SIZE, OFF(watch_send_buffer_bytes), 0, 0, 4096, 1ULL << 32},
    /* etcd 3.4's name of the same setting (0: the default, 10m, as etcd);
     * first, so that kvd's own name wins when the environment sets both */
    {"experimental-watch-progress-notify-interval", F_DUR, OFF(watch_progress_interval_ms), 0, 0, 0,
     0},
    {"watch-progress-notify-interval", F_DUR, OFF(watch_progress_interval_ms), 0, 0, 0, 0},
    {"auto-compaction-mode", F_STR, OFF(auto_compaction_mode), 0,
     sizeof(((kv_config *)0)->auto_compaction_mode), 0, 0},
    {"auto-compaction-retention", F_STR, OFF(auto_compaction_retention), 0,
     sizeof(((kv_config *)0)->auto_compaction_retention), 0, 0},
    {"auto-compaction-interval", F_DUR, OFF(auto_compaction_interval_ms), 0, 0, 0, 0},
    {"max-snapshots", F_U32, OFF(max_snapshots), 0, 0, 1, 64},
    {"snapshot-count", F_U64, OFF(snapshot_count), 0, 0, 1, 1ULL << 40},
    {"peer-max-queue-bytes", F_SIZE, OFF(peer_max_queue_bytes), 0, 0, 65536, 1ULL << 32},
    {"unsafe-no-fsync", F_BOOL, OFF(unsafe_no_fsync), 0, 0, 0, 0},
    {"max-snapshot-bytes", F_U64, OFF(max_snapshot_bytes), 0, 0, 0, 1ULL << 44},
    {"max-raft-inbox-bytes", F_SIZE, OFF(max_raft_inbox_bytes), 0, 0, 1, 1ULL << 40},
    {"max-raft-inbox-messages", F_U32, OFF(max_raft_inbox_messages), 0, 0, 1, 1u << 20},
    {"max-pending-read-index", F_U32, OFF(max_pending_read_index), 0, 0, 1, 1u << 20},
    {"max-forwarded-proposals", F_U32, OFF(max_forwarded_proposals), 0, 0, 1, 1u << 24},
    {"max-raft-log-bytes", F_U64, OFF(max_raft_log_bytes), 0, 0, 0, 1ULL << 40},
    {"peer-max-priority-queue-bytes", F_SIZE, OFF(peer_max_prio_queue_bytes), 0, 0, 65536,
     1ULL << 32},
    {"peer-max-pending-connections", F_U32, OFF(peer_max_pending_conns), 0, 0, 1, 4096},
    {"peer-handshake-timeout", F_DUR, OFF(peer_handshake_timeout_ms), 0, 0, 0, 0},
    /* TLS, etcd's flags. */
    {"cert-file", F_STR, OFF(cert_file), 0, sizeof(((kv_config *)0)->cert_file), 0, 0},
    {"key-file", F_STR, OFF(key_file), 0, sizeof(((kv_config *)0)->key_file), 0, 0},
    {"trusted-ca-file", F_STR, OFF(trusted_ca_file), 0, sizeof(((kv_config *)0)->trusted_ca_file),
     0, 0},
    {"client-cert-auth", F_BOOL, OFF(client_cert_auth), 0, 0, 0, 0},
    {"peer-cert-file", F_STR, OFF(peer_cert_file), 0, sizeof(((kv_config *)0)->peer_cert_file), 0,
     0},
    {"peer-key-file", F_STR, OFF(peer_key_file), 0, sizeof(((kv_config *)0)->peer_key_file), 0, 0},
    {"peer-trusted-ca-file", F_STR, OFF(peer_trusted_ca_file), 0,
     sizeof(((kv_config *)0)->peer_trusted_ca_file), 0, 0},
    {"peer-client-cert-auth", F_BOOL, OFF(peer_client_cert_auth), 0, 0, 0, 0},
    {"auto-tls", F_BOOL, OFF(auto_tls), 0, 0, 0, 0},
    {"peer-auto-tls", F_BOOL, OFF(peer_auto_tls), 0, 0, 0, 0},
    {"self-signed-cert-validity", F_U32, OFF(self_signed_cert_validity), 0, 0, 1, 100},
    {"client-crl-file", F_STR, OFF(client_crl_file), 0, sizeof(((kv_config *)0)->client_crl_file),
     0, 0},
    {"peer-crl-file", F_STR, OFF(peer_crl_file), 0, sizeof(((kv_config *)0)->peer_crl_file), 0, 0},
    {"peer-cert-allowed-cn", F_STR, OFF(peer_cert_allowed_cn), 0,
     sizeof(((kv_config *)0)->peer_cert_allowed_cn), 0, 0},
    {"peer-cert-allowed-hostname", F_STR, OFF(peer_cert_allowed_hostname), 0,
     sizeof(((kv_config *)0)->peer_cert_allowed_hostname), 0, 0},
    {"cipher-suites", F_STR, OFF(cipher_suites), 0, sizeof(((kv_config *)0)->cipher_suites), 0, 0},
    /* Corruption checks (server/corrupt/corrupt_check.h), etcd 3.4's flags. */
    {"experimental-initial-corrupt-check", F_BOOL, OFF(initial_corrupt_check), 0, 0, 0, 0},
    {"experimental-corrupt-check-time", F_DUR, OFF(corrupt_check_time_ms), 0, 0, 0, 0},
    /* Free heap pages back to the kernel (daemon/heap_trim.h); kvd's own. */
    {"malloc-trim-interval", F_DUR, OFF(malloc_trim_interval_ms), 0, 0, 0, 0},
    /* Logging (log/log.h). */
    {"log-level", F_STR, OFF(log_level), 0, sizeof(((kv_config *)0)->log_level), 0, 0},
    {"log-format", F_STR, OFF(log_format), 0, sizeof(((kv_config *)0)->log_format), 0, 0},
    {"log-outputs", F_STR, OFF(log_outputs), 0, sizeof(((kv_config *)0)->log_outputs), 0, 0},
    /* etcd 3.4's deprecated switch (kv_config_parse applies it) */
    {"debug", F_BOOL, OFF(debug), 0, 0, 0, 0},
    /* Auth */
    {"auth-token", F_STR, OFF(auth_token), 0, sizeof(((kv_config *)0)->auth_token), 0, 0},
    {"auth-token-ttl", F_U32, OFF(auth_token_ttl), 0, 0, 1, 1u << 30},
    {"auth-hash-iterations", F_U32, OFF(auth_hash_iterations), 0, 0, 1000, 100000000},
    {"auth-max-pending-hashes", F_U32, OFF(auth_max_pending_hashes), 0, 0, 1, 1u << 20},
    {"auth-max-tokens", F_U32, OFF(auth_max_tokens), 0, 0, 1, 1u << 24},
    /* Accepted for etcd command-line compatibility; no effect in kvd. */
    {"enable-v2", F_IGNORED, 0, 0, 0, 0, 0},
    {"logger", F_IGNORED, 0, 0, 0, 0, 0},
    /* etcd 3.4's flags without a kvd setting (ETCD_RULES): the value is checked; no effect,
     * or refused when kvd cannot honour it. */
    {"backend-batch-interval", F_ETCD, R_DUR, 0, 0, 0, 0},
    {"backend-batch-limit", F_ETCD, R_INT, 0, 0, 0, 0},
    {"bcrypt-cost", F_ETCD, R_BCRYPT_COST, 0, 0, 0, 0},
    {"client-cert-allowed-hostname", F_ETCD, R_CLIENT_HOSTNAME, 0, 0, 0, 0},
    {"discovery", F_ETCD, R_DISCOVERY, 0, 0, 0, 0},
    {"discovery-fallback", F_ETCD, R_FALLBACK, 0, 0, 0, 0},
    {"discovery-proxy", F_ETCD, R_DISCOVERY_PROXY, 0, 0, 0, 0},
    {"experimental-backend-bbolt-freelist-type", F_ETCD, R_FREELIST, 0, 0, 0, 0},
    {"experimental-enable-lease-checkpoint", F_ETCD, R_BOOL, 0, 0, 0, 0},
    {"experimental-enable-lease-checkpoint-persist", F_ETCD, R_BOOL, 0, 0, 0, 0},
    {"experimental-enable-v2v3", F_ETCD, R_V2V3, 0, 0, 0, 0},
    {"experimental-peer-skip-client-san-verification", F_ETCD, R_BOOL, 0, 0, 0, 0},
    {"experimental-warning-apply-duration", F_ETCD, R_DUR, 0, 0, 0, 0},
    {"force-new-cluster", F_ETCD, R_FORCE_NEW_CLUSTER, 0, 0, 0, 0},
    {"initial-election-tick-advance", F_ETCD, R_BOOL, 0, 0, 0, 0},
    {"log-package-levels", F_ETCD, R_STR, 0, 0, 0, 0},
    {"max-wals", F_ETCD, R_UINT, 0, 0, 0, 0},
    {"metrics", F_ETCD, R_METRICS, 0, 0, 0, 0},
    {"pre-vote", F_ETCD, R_BOOL, 0, 0, 0, 0},
    {"proxy", F_ETCD, R_PROXY, 0, 0, 0, 0},
    {"proxy-dial-timeout", F_ETCD, R_UINT, 0, 0, 0, 0},
    {"proxy-failure-wait", F_ETCD, R_UINT, 0, 0, 0, 0},
    {"proxy-read-timeout", F_ETCD, R_UINT, 0, 0, 0, 0},
    {"proxy-refresh-interval", F_ETCD, R_UINT, 0, 0, 0, 0},
    {"proxy-write-timeout", F_ETCD, R_UINT, 0, 0, 0, 0},
    {"wal-dir", F_ETCD, R_WAL_DIR, 0, 0, 0, 0},
    {"cors", F_ETCD, R_CORS, 0, 0, 0, 0},
    /* etcd 3.4 logs to --log-outputs and only warns about this deprecated one */
    {"log-output", F_ETCD, R_STR, 0, 0, 0, 0},
    {"host-whitelist", F_ETCD, R_HOST_WHITELIST, 0, 0, 0, 0},
    /* Read before the other flags (kv_config_parse_env, config_file.h). */
    {"config-file", F_IGNORED, 0, 0, 0, 0, 0},
};

static int takes_bool(const flag_def *f)
{
    return f->kind == F_BOOL || (f->kind == F_ETCD && ETCD_RULES[f->off].type == T_BOOL);
}

/* etcd 3.4's YAML keys of Go type time.Duration (embed/config.go): a plain number there is
 * nanoseconds. kvd's own duration keys keep the command line's reading (milliseconds). */
static int etcd_duration_key(const char *name)
{
    static const char *const keys[] = {"grpc-keepalive-min-time",
                                       "grpc-keepalive-interval",
                                       "grpc-keepalive-timeout",
                                       "experimental-corrupt-check-time",
                                       "backend-batch-interval",
                                       "experimental-watch-progress-notify-interval",
                                       "experimental-warning-apply-duration"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(keys[i], name) == 0)
            return 1;
    return 0;
}

int kv_config_flag_known(const char *name)
{
    for (size_t k = 0; k < sizeof(FLAGS) / sizeof(FLAGS[0]); k++) {
        if (strcmp(FLAGS[k].name, name) != 0)
            continue;
        if (etcd_duration_key(name))
            return KV_CONFIG_FILE_DURATION;
        return takes_bool(&FLAGS[k]) ? KV_CONFIG_FILE_BOOL : KV_CONFIG_FILE_FLAG;
    }
    return 0;
}

const char *kv_config_usage(void)
{
    return "usage: kvd [flags]\n"
           "  --config-file PATH              etcd's YAML configuration file (etcd.conf.yml);\n"
           "                                  the other flags and variables are then ignored\n"
           "  --name NAME                     member name (default \"default\")\n"
           "  --data-dir DIR                  data directory (default \"${name}.kvd\")\n"
           "  --listen-client-urls URLS       client gRPC (default http://localhost:2379)\n"
           "  --advertise-client-urls URLS    client URLs to advertise (default: listen)\n"
           "  --listen-peer-urls URLS         peer URLs (default http://localhost:2380)\n"
           "  --initial-advertise-peer-urls   peer URLs to advertise (default: listen)\n"
           "  --listen-metrics-urls URLS      /metrics and /health over HTTP/1.1\n"
           "  --initial-cluster | --peers     n1=http://h1:2380,n2=... (default name=peer url)\n"
           "  --discovery-srv DOMAIN          the initial cluster from DNS SRV records\n"
           "                                  (_etcd-server-ssl._tcp.DOMAIN: https,\n"
           "                                  _etcd-server._tcp.DOMAIN: http)\n"
           "  --discovery-srv-name NAME       service name suffix (_etcd-server-NAME)\n"
           "  --initial-cluster-token TOKEN   (default \"etcd-cluster\")\n"
           "  --initial-cluster-state new|existing\n"
           "  --strict-reconfig-check B       refuse member changes that would leave fewer\n"
           "                                  started members than a quorum (true)\n"
           "  --initial-member-id HEX         with existing, optional: the id `member add`\n"
           "                                  printed (default: looked up in the peers' member\n"
           "                                  list, GET /members on the peer port, as etcd)\n"
           "  --heartbeat-interval MS         (default 100)\n"
           "  --election-timeout MS           (default 1000)\n"
           "  --max-request-bytes N           largest request message (default 1572864)\n"
           "  --max-txn-ops N                 operations per txn (default 128)\n"
           "  --quota-backend-bytes N         backend size limit (default 2 GiB)\n"
           "  --max-concurrent-streams N      HTTP/2 streams per connection (default 1000)\n"
           "  --max-connections N             client connections (default 10000)\n"
           "  --max-send-buffer-bytes N       outbound bytes buffered per connection (16 MiB)\n"
           "  --max-pending-proposals N       writes queued for the next commit (10000)\n"
           "  --read-workers N                reader threads for Range/HashKV (2)\n"
           "  --max-pending-reads N           reads queued or running on them (256)\n"
           "  --max-lease-ttl SECONDS         largest lease TTL (default 9000000000)\n"
           "  --max-keys-per-lease N          keys attachable to one lease (0 = unlimited)\n"
           "  --lease-revoke-rate N           expired leases revoked per second (1000)\n"
           "  --lease-checkpoint-interval D   remaining-TTL checkpoint period (default 5m)\n"
           "  --lease-checkpoint-rate N       checkpoints per second (1000)\n"
           "  --max-pending-lease-forwards N  renewals/TTL queries a follower has queued or in\n"
           "                                  flight to the leader, one per lease (renewals of a\n"
           "                                  pending lease join it); beyond: that renewal is\n"
           "                                  dropped, the stream stays open (65536: 3x the\n"
           "                                  20,000 leases of the design load)\n"
           "  --enable-failpoints             testing: SIGUSR1 toggles an apply-path stall\n"
           "  --enable-pprof                  /debug/pprof/ on the client URLs: a CPU profile\n"
           "                                  for go tool pprof (docs/pprof.md) (false)\n"
           "  --enable-grpc-gateway B         the JSON API, /v3/..., on the client URLs (true;\n"
           "                                  false: 404 as any unknown path)\n"
           "  --startup-verify-records N      records per database checked at startup (10000)\n"
           "  --startup-verify-full B         check the structure of every page of data.mdb\n"
           "                                  before opening it (true; false: only the first\n"
           "                                  --startup-verify-records of each database)\n"
           "  --max-health-probes N           /health probes waiting on the apply path (64)\n"
           "  --experimental-compaction-batch-limit N\n"
           "                                  revisions one physical compaction step removes\n"
           "                                  (50; etcd 3.5: 1000, see docs/ARCHITECTURE.md)\n"
           "  --experimental-wal B            the raft log in <data-dir>/wal, one flush per\n"
           "                                  write batch (true; docs/raftlog.md); a data dir\n"
           "                                  whose log is in data.mdb is converted at start.\n"
           "                                  false: the log stays in data.mdb (two flushes per\n"
           "                                  write), refused once the data dir has a WAL\n"
           "  --wal-segment-bytes N           WAL segment size (64MiB; at most an eighth of\n"
           "                                  --max-raft-log-bytes)\n"
           "  --metrics-max-connections N     metrics-port connections, oldest idle evicted (256)\n"
           "  --metrics-request-timeout D     time to send a request on the metrics port (5s)\n"
           "  --max-response-bytes N          largest response message (default 256 MiB)\n"
           "  --max-buffered-bytes N          gRPC in+out buffers, whole process (512 MiB)\n"
           "  --max-recv-buffer-bytes N       input held per connection before its HTTP/2\n"
           "                                  window stops being credited (16 MiB)\n"
           "  --grpc-handshake-timeout D      close a connection with no request by then (10s)\n"
           "  --grpc-max-connection-idle D    close a connection idle this long (0 = never)\n"
           "  --grpc-keepalive-min-time D     min interval between client PINGs (5s)\n"
           "  --grpc-keepalive-interval D     server keepalive PING period (2h)\n"
           "  --grpc-keepalive-timeout D      close if our PING is unanswered (20s)\n"
           "  --send-stall-timeout D          reset a stream whose output stalls (30s)\n"
           "  --max-pending-request-bytes N   unanswered requests held by the server before\n"
           "                                  request delivery waits (64 MiB)\n"
           "  --max-watchers-per-stream N     watchers on one Watch stream (10000)\n"
           "  --max-watch-streams-per-connection N  Watch streams per connection (1000)\n"
           "  --max-concurrency-waiters N     Campaign, Lock and Observe calls in progress\n"
           "                                  (10000)\n"
           "  --watch-send-buffer-bytes N     unsent bytes per Watch stream before its watchers\n"
           "                                  are caught up from disk instead (1 MiB)\n"
           "  --watch-progress-notify-interval D  progress_notify period (default 10m)\n"
           "  --experimental-watch-progress-notify-interval D  the same (etcd 3.4's name)\n"
           "  --auto-compaction-mode M        periodic|revision (periodic)\n"
           "  --auto-compaction-retention R   periodic: duration (1h, 30m) or hours; revision: N\n"
           "                                  revisions to keep; 0 = off (0)\n"
           "  --auto-compaction-interval D    revision mode: check period (5m)\n"
           "  --max-snapshots N               Maintenance.Snapshot streams at once (2)\n"
           "  --snapshot-count N              applied entries between raft log compactions\n"
           "                                  (100000)\n"
           "  --peer-max-queue-bytes N        send queue per peer; raft messages beyond it\n"
           "                                  are dropped (16 MiB)\n"
           "  --unsafe-no-fsync               Disables fsync, unsafe, will cause data loss.\n"
           "  --max-snapshot-bytes N          largest raft snapshot accepted from a peer\n"
           "                                  (0: 2 x the data file's map size, the default)\n"
           "  --max-raft-inbox-bytes N        raft messages from peers waiting while a ready is\n"
           "                                  in flight, in wire bytes; beyond: dropped (64 MiB)\n"
           "  --max-raft-inbox-messages N     the same, in messages (4096)\n"
           "  --max-pending-read-index N      linearizable reads waiting for a read index, and\n"
           "                                  on the leader followers' requests (10000 each)\n"
           "  --max-forwarded-proposals N     proposals a follower forwarded to the leader and\n"
           "                                  not yet applied; the rest stays queued (10000)\n"
           "  --max-raft-log-bytes N          raft log bytes this member retains (it lives in\n"
           "                                  the data file); beyond: writes refused \"too many\n"
           "                                  requests\"; a quarter of it compacts the log early\n"
           "                                  (0: a quarter of the quota's headroom, default)\n"
           "  --peer-max-priority-queue-bytes N  lease renewal frames queued per peer, sent\n"
           "                                  ahead of raft traffic; beyond: dropped (4 MiB)\n"
           "  --peer-max-pending-connections N  accepted peer connections not yet identified\n"
           "                                  as a member; beyond: the oldest is closed (16)\n"
           "  --peer-handshake-timeout D      close such a connection after this (1s)\n"
           "  --cert-file F                   client port TLS certificate (https:// URLs)\n"
           "  --key-file F                    its private key\n"
           "  --trusted-ca-file F             CA that signs client certificates\n"
           "  --client-cert-auth              require a client certificate (mutual TLS)\n"
           "  --peer-cert-file F              peer TLS certificate (server and client side)\n"
           "  --peer-key-file F               its private key\n"
           "  --peer-trusted-ca-file F        CA that signs the other members' certificates\n"
           "  --peer-client-cert-auth         require a verified certificate from peers\n"
           "  --auto-tls                      client TLS with a generated self-signed certificate\n"
           "                                  (<data-dir>/fixtures/client, reused on restart)\n"
           "  --peer-auto-tls                 peer TLS with a generated self-signed certificate;\n"
           "                                  peers' certificates are then not verified\n"
           "  --self-signed-cert-validity N   years the generated certificates are valid (1)\n"
           "  --client-crl-file F             CRLs: client certificates listed are refused\n"
           "  --peer-crl-file F               CRLs: peer certificates listed are refused\n"
           "  --peer-cert-allowed-cn CN       peers' certificates must have this CN\n"
           "  --peer-cert-allowed-hostname H  peers' certificates must be valid for H\n"
           "  --cipher-suites LIST            TLS 1.2 suites, Go names, comma-separated\n"
           "                                  (default: ECDHE with AES-GCM or CHACHA20)\n"
           "  --experimental-initial-corrupt-check  compare HashKV with the peers before\n"
           "                                  serving; refuse to start on a mismatch (false)\n"
           "  --experimental-corrupt-check-time D  leader compares every member's HashKV\n"
           "                                  this often; CORRUPT alarm on mismatch (60s; 0 off)\n"
           "  --malloc-trim-interval D        give free heap pages back to the kernel at most\n"
           "                                  this often, after writes (1s; 0 off)\n"
           "  --log-level L                   debug|info|warn|error: least severe line logged\n"
           "                                  (info)\n"
           "  --log-format F                  text|json: json writes etcd's zap JSON lines (text)\n"
           "  --log-outputs O                 stderr|stdout|FILE: where log lines go (stderr)\n"
           "  --log-output O                  etcd 3.4's deprecated form: accepted, no effect\n"
           "  --debug                         etcd 3.4's deprecated --log-level debug (wins)\n"
           "  --auth-token simple|jwt,...     token type: simple, or jwt,pub-key=F,priv-key=F,\n"
           "                                  sign-method=RS256|PS256|ES256|HS256...[,ttl=5m]\n"
           "  --auth-token-ttl S              simple token lifetime, renewed on use (300)\n"
           "  --auth-hash-iterations N        PBKDF2-SHA256 rounds per password (100000)\n"
           "  --auth-max-pending-hashes N     password hashes queued; beyond: too many requests "
           "(64)\n"
           "  --auth-max-tokens N             live auth tokens; beyond: too many requests "
           "(100000)\n"
           "  etcd 3.4 flags accepted with no effect in kvd; the value is checked as etcd's\n"
           "  (README.md, Flags, says why for each):\n"
           "  --backend-batch-interval D --backend-batch-limit N --bcrypt-cost N\n"
           "  --experimental-backend-bbolt-freelist-type T --max-wals N --metrics M\n"
           "  --experimental-enable-lease-checkpoint B --initial-election-tick-advance B\n"
           "  --experimental-enable-lease-checkpoint-persist B --pre-vote B (kvd: always on)\n"
           "  --experimental-peer-skip-client-san-verification B --log-package-levels S\n"
           "  --experimental-warning-apply-duration D (kvd: fixed 100ms)\n"
           "  --discovery-fallback exit|proxy --proxy-dial-timeout MS --proxy-failure-wait MS\n"
           "  --proxy-read-timeout MS --proxy-refresh-interval MS --proxy-write-timeout MS\n"
           "  etcd 3.4 flags refused unless at etcd's default (false, off, empty), with why:\n"
           "  --force-new-cluster --proxy off --discovery URL --discovery-proxy URL\n"
           "  --experimental-enable-v2v3 P --client-cert-allowed-hostname H --wal-dir DIR\n"
           "  --cors '*' --host-whitelist '*'\n"
           "  --version | --help\n";
}

int kv_config_parse(kv_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "--version") == 0)
            return 1;
        if (a[0] != '-') {
            snprintf(err, errlen, "unexpected argument '%s'", a);
            return -EINVAL;
        }
        while (*a == '-')
            a++;
        char name[64];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        if (nlen >= sizeof(name)) {
            snprintf(err, errlen, "unknown flag '%s'", argv[i]);
            return -EINVAL;
        }
        memcpy(name, a, nlen);
        name[nlen] = '\0';
        const flag_def *f = NULL;
        for (size_t k = 0; k < sizeof(FLAGS) / sizeof(FLAGS[0]); k++)
            if (strcmp(FLAGS[k].name, name) == 0)
                f = &FLAGS[k];
        if (f == NULL) {
            snprintf(err, errlen, "unknown flag '--%s' (see --help)", name);
            return -EINVAL;
        }
        if (eq) {
            val = eq + 1;
        } else if (takes_bool(f)) {
            val = "true";
        } else {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "flag '--%s' needs a value", name);
                return -EINVAL;
            }
            val = argv[++i];
        }
        char *base = (char *)cfg;
        uint64_t x = 0;
        int rc = 0;
        switch (f->kind) {
        case F_STR:
            if (strlen(val) >= f->cap) {
                snprintf(err, errlen, "--%s: value too long", name);
                return -EINVAL;
            }
            snprintf(base + f->off, f->cap, "%s", val);
            break;
        case F_URLS:
            rc = parse_url_list((kv_url *)(base + f->off), (size_t *)(base + f->n_off), val, err,
                                errlen);
            break;
        case F_CLUSTER:
            rc = parse_cluster(cfg, val, err, errlen);
            break;
        case F_U32:
            rc = parse_u64(name, val, number_syntax(name), f->min, f->max, &x, err, errlen);
            *(uint32_t *)(base + f->off) = (uint32_t)x;
            break;
        case F_U64:
            rc = parse_u64(name, val, number_syntax(name), f->min, f->max, &x, err, errlen);
            *(uint64_t *)(base + f->off) = x;
            break;
        case F_SIZE:
            rc = parse_u64(name, val, number_syntax(name), f->min, f->max, &x, err, errlen);
            *(size_t *)(base + f->off) = (size_t)x;
            break;
        case F_I64:
            rc = parse_u64(name, val, number_syntax(name), f->min, f->max, &x, err, errlen);
            *(int64_t *)(base + f->off) = (int64_t)x;
            break;
        case F_DUR:
            rc = parse_duration_ms(name, val, (uint32_t *)(base + f->off), err, errlen);
            break;
        case F_BOOL: {
            int b;
            if (!parse_bool(val, &b)) { /* Go's spellings, as etcd's flags */
                snprintf(err, errlen, "--%s: want true or false", name);
                return -EINVAL;
            }
            *(int *)(base + f->off) = b;
            break;
        }
        case F_IGNORED:
            break;
        case F_ETCD:
            rc = check_etcd_flag(name, &ETCD_RULES[f->off], val, err, errlen);
            break;
        }
        if (rc < 0)
            return rc;
    }

    /* etcd 3.4's deprecated --debug (embed/config_logging.go, embed/etcd.go): the debug log
     * level whatever --log-level says, and /debug/pprof/ on the client URLs. */
    if (cfg->debug) {
        snprintf(cfg->log_level, sizeof(cfg->log_level), "debug");
        cfg->enable_pprof = 1;
    }

    /* Defaults that depend on other flags, as etcd derives them. */
    if (cfg->data_dir[0] == '\0')
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s.kvd", cfg->name);
    if (cfg->n_listen_client == 0) {
        kv_url_parse(&cfg->listen_client[0], "http://localhost:2379", err, errlen);
        cfg->n_listen_client = 1;
    }
    if (cfg->n_listen_peer == 0) {
        kv_url_parse(&cfg->listen_peer[0], "http://localhost:2380", err, errlen);
        cfg->n_listen_peer = 1;
    }
    if (cfg->n_advertise_client == 0) {
        memcpy(cfg->advertise_client, cfg->listen_client, sizeof(cfg->listen_client));
        cfg->n_advertise_client = cfg->n_listen_client;
    }
    if (cfg->n_advertise_peer == 0) {
        memcpy(cfg->advertise_peer, cfg->listen_peer, sizeof(cfg->listen_peer));
        cfg->n_advertise_peer = cfg->n_listen_peer;
    }
    if (cfg->discovery_srv[0] &&
        cfg->n_initial_cluster > 0) { /* etcd's ErrConflictBootstrapFlags */
        snprintf(err, errlen,
                 "multiple discovery or bootstrap flags are set. Choose one of "
                 "\"initial-cluster\", \"discovery\" or \"discovery-srv\"");
        return -EINVAL;
    }
    if (cfg->n_initial_cluster == 0 && !cfg->discovery_srv[0]) {
        snprintf(cfg->initial_cluster[0].name, sizeof(cfg->initial_cluster[0].name), "%s",
                 cfg->name);
        cfg->initial_cluster[0].url = cfg->advertise_peer[0];
        cfg->n_initial_cluster = 1;
    }
    if (cfg->election_timeout_ms < 5 * cfg->heartbeat_interval_ms) {
        snprintf(err, errlen, "--election-timeout must be at least 5x --heartbeat-interval");
        return -EINVAL;
    }
    /* Raft sends at least one entry per append: a request that fits the client limit must fit
     * one peer frame and the peer queue, with room for its encoding. Otherwise the append
     * carrying it is refused on every retry and replication stops behind it. */
    uint64_t frame_need = (uint64_t)cfg->max_request_bytes + KV_CONFIG_PEER_FRAME_SLACK;
    if (frame_need > cfg->peer_max_queue_bytes || frame_need > KV_CONFIG_PEER_MAX_FRAME) {
        snprintf(err, errlen,
                 "--max-request-bytes %" PRIu64 " does not fit a raft message to a peer: it must "
                 "be at most --peer-max-queue-bytes (%" PRIu64 ") and 64 MiB, less %u bytes",
                 (uint64_t)cfg->max_request_bytes, (uint64_t)cfg->peer_max_queue_bytes,
                 (unsigned)KV_CONFIG_PEER_FRAME_SLACK);
        return -EINVAL;
    }
    if (strcmp(cfg->initial_cluster_state, "new") != 0 &&
        strcmp(cfg->initial_cluster_state, "existing") != 0) {
        snprintf(err, errlen, "--initial-cluster-state must be 'new' or 'existing'");
        return -EINVAL;
    }
    if (cfg->initial_member_id[0]) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(cfg->initial_member_id, &end, 16);
        if (errno || !end || *end || v == 0 ||
            strcmp(cfg->initial_cluster_state, "existing") != 0) {
            snprintf(err, errlen,
                     "--initial-member-id must be a non-zero hex member id, with "
                     "--initial-cluster-state existing");
            return -EINVAL;
        }
    }
    /* TLS: an https listener needs a certificate, as etcd. */
    for (size_t k = 0; k < cfg->n_listen_client; k++)
        if (cfg->listen_client[k].tls && !cfg->auto_tls &&
            (!cfg->cert_file[0] || !cfg->key_file[0])) {
            snprintf(err, errlen,
                     "%s: https listen URL needs --cert-file and --key-file, or --auto-tls",
                     cfg->listen_client[k].text);
            return -EINVAL;
        }
    /* etcd 3.4 serves an https metrics URL with the client TLS info; without it,
     * transport.NewListener refuses. */
    for (size_t k = 0; k < cfg->n_listen_metrics; k++)
        if (cfg->listen_metrics[k].tls && !cfg->auto_tls &&
            (!cfg->cert_file[0] || !cfg->key_file[0])) {
            snprintf(err, errlen,
                     "cannot listen on TLS for %s:%d: KeyFile and CertFile are not presented "
                     "(an https --listen-metrics-urls URL uses the client port's TLS: give "
                     "--cert-file and --key-file, or --auto-tls)",
                     cfg->listen_metrics[k].host, cfg->listen_metrics[k].port);
            return -EINVAL;
        }
    for (size_t k = 0; k < cfg->n_listen_peer; k++)
        if (cfg->listen_peer[k].tls && !cfg->peer_auto_tls &&
            (!cfg->peer_cert_file[0] || !cfg->peer_key_file[0])) {
            snprintf(err, errlen,
                     "%s: https peer URL needs --peer-cert-file and --peer-key-file, or "
                     "--peer-auto-tls",
                     cfg->listen_peer[k].text);
            return -EINVAL;
        }
    if ((cfg->client_cert_auth && !cfg->trusted_ca_file[0]) ||
        (cfg->peer_client_cert_auth && !cfg->peer_trusted_ca_file[0])) {
        snprintf(err, errlen, "--%sclient-cert-auth needs --%strusted-ca-file",
                 cfg->client_cert_auth && !cfg->trusted_ca_file[0] ? "" : "peer-",
                 cfg->client_cert_auth && !cfg->trusted_ca_file[0] ? "" : "peer-");
        return -EINVAL;
    }
    if (cfg->peer_cert_allowed_cn[0] && cfg->peer_cert_allowed_hostname[0]) {
        snprintf(err, errlen,
                 "AllowedCN and AllowedHostname are mutually exclusive (cn=\"%s\", "
                 "hostname=\"%s\")",
                 cfg->peer_cert_allowed_cn, cfg->peer_cert_allowed_hostname);
        return -EINVAL;
    }
    kv_log_level ll;
    kv_log_format lf;
    if (kv_log_level_parse(cfg->log_level, &ll) < 0) {
        snprintf(err, errlen, "--log-level: want debug, info, warn or error, got '%s'",
                 cfg->log_level);
        return -EINVAL;
    }
    if (kv_log_format_parse(cfg->log_format, &lf) < 0) {
        snprintf(err, errlen, "--log-format: want text or json, got '%s'", cfg->log_format);
        return -EINVAL;
    }
    if (strchr(cfg->log_outputs, ',') != NULL || cfg->log_outputs[0] == '\0') {
        snprintf(err, errlen, "--log-outputs: want one of stderr, stdout or a file, got '%s'",
                 cfg->log_outputs);
        return -EINVAL;
    }
    if (strncmp(cfg->auth_token, "jwt", 3) == 0 &&
        (cfg->auth_token[3] == 0 || cfg->auth_token[3] == ',')) {
        kv_jwt *j = NULL; /* the keys are read and checked now, as etcd does at start */
        int rc = kv_jwt_new(cfg->auth_token, &j, err, errlen);
        kv_jwt_free(j);
        if (rc)
            return rc;
    } else if (strcmp(cfg->auth_token, "simple") != 0) {
        snprintf(err, errlen,
                 "--auth-token %s: want \"simple\" or \"jwt,pub-key=...,priv-key=...,"
                 "sign-method=...\" (etcd: invalid auth token type)",
                 cfg->auth_token);
        return -EINVAL;
    }
    int found = 0;
    for (size_t k = 0; k < cfg->n_initial_cluster; k++)
        found |= strcmp(cfg->initial_cluster[k].name, cfg->name) == 0;
    if (!found && !cfg->discovery_srv[0]) { /* with DNS: checked by kv_srv_boot */
        snprintf(err, errlen, "--initial-cluster has no member named '%s' (--name)", cfg->name);
        return -EINVAL;
    }
    return 0;
}

/* Environment variables, the etcd way: every flag --foo-bar can also be
 * given as KVD_FOO_BAR, or ETCD_FOO_BAR for a migration from etcd (KVD_ wins over ETCD_);
 * the command line wins over both (a flag given there makes kvd ignore its variables, as
 * etcd's flags.SetFlagsFromEnv skips flags already set). Implemented by placing the
 * environment's settings before the command-line arguments. */
static int on_cmdline(int argc, char **argv, const char *flag)
{
    size_t fl = strlen(flag);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-')
            continue;
        while (*a == '-')
            a++;
        if (strncmp(a, flag, fl) == 0 && (a[fl] == '\0' || a[fl] == '='))
            return 1;
    }
    return 0;
}

static void env_name(char *out, size_t len, const char *prefix, const char *flag)
{
    size_t n = (size_t)snprintf(out, len, "%s", prefix);
    for (const char *p = flag; *p && n + 1 < len; p++)
        out[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    out[n < len ? n : len - 1] = '\0';
}

/* The --config-file path: the command line's, else KVD_CONFIG_FILE, else ETCD_CONFIG_FILE
 * (etcd reads ETCD_CONFIG_FILE before everything else). NULL: none, or --help/--version. */
static const char *config_file_path(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "--version") == 0)
            return NULL;
        while (*a == '-')
            a++;
        if (a == argv[i])
            continue;
        if (strncmp(a, "config-file=", 12) == 0)
            path = a + 12;
        else if (strcmp(a, "config-file") == 0 && i + 1 < argc)
            path = argv[++i];
    }
    if (!path)
        path = getenv("KVD_CONFIG_FILE");
    if (!path)
        path = getenv("ETCD_CONFIG_FILE");
    return path && *path ? path : NULL;
}

/* etcd 3.4: with a configuration file, the other flags and the environment are ignored. */
static int parse_config_file(kv_config *cfg, const char *path, int argc, char **argv, char *err,
                             size_t errlen)
{
    char **args = NULL;
    int n = 0;
    int rc = kv_config_file_read(path, kv_config_flag_known, &args, &n, err, errlen);
    if (rc)
        return rc;
    char **all = calloc((size_t)n + 1, sizeof(char *));
    if (!all) {
        kv_config_file_free(args, n);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    all[0] = argc > 0 ? argv[0] : "kvd";
    int m = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(args[i], "--cors=") != 0) /* etcd's YAML: cors '' is the default (R_CORS) */
            all[1 + m++] = args[i];
    rc = kv_config_parse(cfg, m + 1, all, err, errlen);
    if (rc < 0) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "config file %s: %s", path, err);
        snprintf(err, errlen, "%s", msg);
    } else {
        int others = 0;
        for (int i = 1; i < argc; i++)
            others += argv[i][0] == '-' && strstr(argv[i], "config-file") == NULL;
        if (others > 0)
            fprintf(stderr,
                    "kvd: warning: configuration read from %s; the other command-line flags "
                    "and KVD_/ETCD_ variables are ignored, as etcd does\n",
                    path);
    }
    free(all);
    kv_config_file_free(args, n);
    return rc;
}

int kv_config_parse_env(kv_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    enum { NFLAGS = sizeof(FLAGS) / sizeof(FLAGS[0]) };
    const char *config_file = config_file_path(argc, argv);
    if (config_file)
        return parse_config_file(cfg, config_file, argc, argv, err, errlen);
    char *args[NFLAGS + 1];
    int n = 0, rc;
    char **all = calloc((size_t)argc + NFLAGS + 1, sizeof(char *));
    if (all == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    all[0] = argc > 0 ? argv[0] : "kvd";
    for (size_t k = 0; k < NFLAGS; k++) {
        char var[96];
        env_name(var, sizeof(var), "KVD_", FLAGS[k].name);
        if (on_cmdline(argc, argv, FLAGS[k].name))
            continue;
        const char *v = getenv(var);
        if (v == NULL || *v == '\0') {
            env_name(var, sizeof(var), "ETCD_", FLAGS[k].name);
            v = getenv(var);
        }
        if (v == NULL || *v == '\0')
            continue; /* etcd's setFlagFromEnv: an empty variable is not set */
        size_t len = strlen(FLAGS[k].name) + strlen(v) + 4;
        args[n] = malloc(len);
        if (args[n] == NULL) {
            snprintf(err, errlen, "out of memory");
            rc = -ENOMEM;
            goto cleanup;
        }
        snprintf(args[n], len, "--%s=%s", FLAGS[k].name, v);
        all[1 + n] = args[n];
        n++;
    }
    for (int i = 1; i < argc; i++)
        all[n + i] = argv[i];
    rc = kv_config_parse(cfg, n + (argc > 0 ? argc : 1), all, err, errlen);
    if (rc < 0 && n > 0) {
        /* Name the variable when the bad value came from the environment. */
        char flag[80];
        const char *colon = strchr(err, ':');
        size_t fl = colon ? (size_t)(colon - err) : 0;
        if (fl > 2 && fl < sizeof(flag) && err[0] == '-' && err[1] == '-') {
            memcpy(flag, err + 2, fl - 2);
            flag[fl - 2] = '\0';
            int cmd = on_cmdline(argc, argv, flag);
            char var[96], msg[1024];
            env_name(var, sizeof(var), "KVD_", flag);
            const char *kv = getenv(var);
            if (!cmd && (kv == NULL || *kv == '\0')) /* unset or empty: ETCD_ was read */
                env_name(var, sizeof(var), "ETCD_", flag);
            if (!cmd && getenv(var) != NULL) {
                snprintf(msg, sizeof(msg), "environment variable %s: %s", var, err);
                snprintf(err, errlen, "%s", msg);
            }
        }
    }
cleanup:
    for (int i = 0; i < n; i++)
        free(args[i]);
    free(all);
    return rc;
}
