/* kvctl entry point: global flags, environment, command dispatch. See kvctl.h. */
#include "cmd_member.h"
#include "common/dns_srv.h"
#include "kvctl.h"
#include "out.h"
#include "usage.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kvctl_match(const char *word, const char *const *names, size_t n)
{
    int found = -1;
    size_t wl = strlen(word);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(word, names[i]) == 0)
            return (int)i;
    }
    if (wl == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(word, names[i], wl) == 0) {
            if (found >= 0)
                return -1;
            found = (int)i;
        }
    }
    return found;
}

static void free_endpoints(struct kvctl *k)
{
    for (size_t i = 0; i < k->n_endpoints; i++)
        free(k->endpoints[i]);
    k->n_endpoints = 0;
    for (size_t i = 0; i < k->n_flag_endpoints; i++)
        free(k->flag_endpoints[i]);
    k->n_flag_endpoints = 0;
}

const char *kvctl_srv_server_name(const struct kvctl *k)
{
    return k->raw_discovery && *k->raw_discovery && !k->insecure_discovery ? k->raw_discovery
                                                                           : NULL;
}

/* --discovery-srv (etcdctl's endpointsFromFlagValue): the SRV records' endpoints replace
 * --endpoints, which endpoint health/status/hashkv without --cluster still use; without
 * --insecure-discovery the http:// ones are dropped with a notice; none left: --endpoints. */
static int discover(struct kvctl *k)
{
    char **eps = NULL, err[2048];
    size_t n = 0, kept = 0;
    if (kv_srv_client_endpoints(k->raw_discovery, k->raw_discovery_name, &eps, &n, err,
                                sizeof err) < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", err);
    for (size_t i = 0; i < n; i++) {
        if (!k->insecure_discovery && strncmp(eps[i], "http://", 7) == 0) {
            struct kvctl_buf q = {0};
            kvctl_go_quote(&q, (const uint8_t *)eps[i], strlen(eps[i]));
            fprintf(stderr, "ignoring discovered insecure endpoint %s\n", kvctl_buf_str(&q));
            kvctl_buf_free(&q);
            free(eps[i]);
        } else if (kept == KVCTL_MAX_ENDPOINTS) {
            free(eps[i]);
        } else {
            eps[kept++] = eps[i];
        }
    }
    if (kept) {
        memcpy(k->flag_endpoints, k->endpoints, k->n_endpoints * sizeof k->endpoints[0]);
        k->n_flag_endpoints = k->n_endpoints;
        memcpy(k->endpoints, eps, kept * sizeof eps[0]);
        k->n_endpoints = kept;
    }
    free(eps);
    return 0;
}

/* pflag StringSlice: a CSV list; surrounding whitespace is trimmed (endpointsFromCmd). */
static int split_endpoints(struct kvctl *k, const char *list)
{
    free_endpoints(k);
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *s = p;
        while (n && (*s == ' ' || *s == '\t'))
            s++, n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        if (k->n_endpoints == KVCTL_MAX_ENDPOINTS)
            return -E2BIG;
        k->endpoints[k->n_endpoints] = strndup(s, n);
        if (!k->endpoints[k->n_endpoints])
            return -ENOMEM;
        k->n_endpoints++;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* True when flag word `a` (without "=value") takes the next word as its value. */
static bool takes_value(const char *a)
{
    static const char *const v[] = {"--endpoints",
                                    "-w",
                                    "--write-out",
                                    "--dial-timeout",
                                    "--command-timeout",
                                    "--keepalive-time",
                                    "--keepalive-timeout",
                                    "--cert",
                                    "--key",
                                    "--cacert",
                                    "--user",
                                    "--password",
                                    "-d",
                                    "--discovery-srv",
                                    "--discovery-srv-name",
                                    "--lease",
                                    "--limit",
                                    "--rev",
                                    "--consistency",
                                    "--order",
                                    "--sort-by",
                                    "--ttl",
                                    "--data-dir",
                                    "--wal-dir",
                                    "--name",
                                    "--initial-cluster",
                                    "--initial-cluster-token",
                                    "--initial-advertise-peer-urls",
                                    "--peer-urls"};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (strcmp(a, v[i]) == 0)
            return true;
    return false;
}

/* The command path ("get", "lease grant") named by a command line, for its usage text. */
static void command_path(int argc, char **argv, char *out, size_t len)
{
    static const char *const top[] = {"get",    "put",   "del",     "txn",         "compaction",
                                      "watch",  "lock",  "elect",   "move-leader", "endpoint",
                                      "member", "lease", "snapshot"};
    static const char *const ep[] = {"health", "status"};
    static const char *const snap[] = {"save", "status", "restore"};
    static const char *const mem[] = {"list", "add", "remove", "update", "promote"};
    static const char *const lease[] = {"grant", "revoke", "timetolive", "list", "keep-alive"};
    out[0] = '\0';
    int t = -1;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return;
        if (argv[i][0] == '-') {
            i += takes_value(argv[i]);
            continue;
        }
        if (t < 0) {
            t = kvctl_match(argv[i], top, 13);
            if (t < 0)
                return;
            snprintf(out, len, "%s", top[t]);
            if (t < 9)
                return;
            continue;
        }
        const char *const *subs = t == 9 ? ep : t == 10 ? mem : t == 12 ? snap : lease;
        size_t ns = t == 9 ? 2 : t == 10 ? 5 : t == 12 ? 3 : 5;
        int s = kvctl_match(argv[i], subs, ns);
        if (s >= 0)
            snprintf(out, len, "%s %s", top[t], subs[s]);
        return;
    }
}

int kvctl_flag_error(int argc, char **argv, const char *msg)
{
    char path[64];
    /* cobra: the error, the usage on stdout, then etcdctl's main reports the error again */
    fprintf(stderr, "Error: %s\n", msg);
    command_path(argc, argv, path, sizeof(path));
    if (path[0])
        kvctl_usage(path, stdout);
    fflush(stdout);
    fputc('\n', stderr);
    return kvctl_fail(KVCTL_EXIT_ERROR, "%s", msg);
}

int kvctl_group_help(const char *group, const char *word)
{
    static const char *const missing[] = {"endpoint hashkv"};
    if (word) {
        for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
            size_t gl = strlen(group);
            if (strncmp(missing[i], group, gl) == 0 && missing[i][gl] == ' ' &&
                strncmp(missing[i] + gl + 1, word, strlen(word)) == 0 && *word)
                return kvctl_fail(KVCTL_EXIT_BAD_FEATURE, "kvctl does not implement \"%s\"",
                                  missing[i]);
        }
    }
    /* cobra: a group without (or with an unknown) subcommand prints its help */
    kvctl_usage(group, stdout);
    return KVCTL_EXIT_HELP;
}

int kvctl_parse_cmd(struct kvctl *k, int argc, char **argv, struct kvctl_flag *cmd_flags,
                    char **pos, size_t *n_pos)
{
    char path[64];
    struct kvctl_flag none[] = {{NULL, 0, KVCTL_FLAG_BOOL, NULL, false}};
    struct kvctl_flag *sets[2] = {cmd_flags ? cmd_flags : none, k->global_flags};
    char err[512];
    if (kvctl_flags_parse(argc, argv, sets, 2, pos, n_pos, err, sizeof(err)) < 0) {
        /* cobra prints the usage on stdout; the error is reported twice */
        return kvctl_flag_error(argc, argv, err);
    }
    if (k->help) {
        command_path(argc, argv, path, sizeof(path));
        if (path[0] && kvctl_usage(path, stdout) == 0)
            return KVCTL_EXIT_HELP;
    }
    if (kvctl_flags_from_env(k->global_flags, err, sizeof(err)) < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", err);
    if (split_endpoints(k, k->raw_endpoints) < 0)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "too many endpoints");
    static const char *const formats[] = {"simple", "json", "table", "fields", "protobuf"};
    k->format_name = k->raw_write_out;
    int f = -1;
    for (int i = 0; i < 5; i++)
        if (strcmp(k->raw_write_out, formats[i]) == 0)
            f = i;
    if (f < 0)
        return kvctl_fail(KVCTL_EXIT_BAD_FEATURE, "unsupported output format");
    k->format = (enum kvctl_format)f;
    /* TLS, as etcdctl 3.4: any of --cert/--key/--cacert/--insecure-skip-tls-verify,
     * --insecure-transport=false, or --discovery-srv with --insecure-discovery=false (the
     * domain is then the certificates' server name), makes scheme-less endpoints https://. */
    if ((k->raw_cert && *k->raw_cert) || (k->raw_key && *k->raw_key) ||
        (k->raw_cacert && *k->raw_cacert) || k->insecure_skip_verify || !k->insecure_transport ||
        kvctl_srv_server_name(k))
        for (size_t i = 0; i < k->n_endpoints; i++) {
            if (strstr(k->endpoints[i], "://"))
                continue;
            char *u = NULL;
            if (asprintf(&u, "https://%s", k->endpoints[i]) < 0)
                return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
            free(k->endpoints[i]);
            k->endpoints[i] = u;
        }
    /* --user / --password: Authenticate before the first call (rpc.c) */
    if (k->raw_discovery && *k->raw_discovery)
        return discover(k);
    return 0;
}

/* kvctl version: etcdctl's version command ("etcdctl version: 3.4.23" / "API version: 3.4"),
 * with kvctl's own name and version. */
static int cmd_version(struct kvctl *k, int argc, char **argv)
{
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t n_pos = 0;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, NULL, pos, &n_pos);
    free(pos);
    if (rc != 0)
        return rc;
    if (k->help) {
        kvctl_usage("version", stdout);
        return KVCTL_EXIT_HELP;
    }
    printf("kvctl version: %s\nAPI version: 3.4\n", KVCTL_VERSION);
    return 0;
}

int main(int argc, char **argv)
{
    struct kvctl k;
    memset(&k, 0, sizeof(k));
    snprintf(k.raw_endpoints, sizeof(k.raw_endpoints), "127.0.0.1:2379");
    k.raw_write_out = "simple";
    k.dial_timeout_ms = 2000;
    k.command_timeout_ms = 5000;
    k.keepalive_time_ms = 2000;
    k.keepalive_timeout_ms = 6000;
    k.insecure_transport = true;
    k.insecure_discovery = true;
    struct kvctl_flag globals[] = {
        {"endpoints", 0, KVCTL_FLAG_SLICE, k.raw_endpoints, false},
        {"debug", 0, KVCTL_FLAG_BOOL, &k.debug, false},
        {"write-out", 'w', KVCTL_FLAG_STRING, &k.raw_write_out, false},
        {"hex", 0, KVCTL_FLAG_BOOL, &k.hex, false},
        {"dial-timeout", 0, KVCTL_FLAG_DURATION, &k.dial_timeout_ms, false},
        {"command-timeout", 0, KVCTL_FLAG_DURATION, &k.command_timeout_ms, false},
        {"keepalive-time", 0, KVCTL_FLAG_DURATION, &k.keepalive_time_ms, false},
        {"keepalive-timeout", 0, KVCTL_FLAG_DURATION, &k.keepalive_timeout_ms, false},
        {"insecure-transport", 0, KVCTL_FLAG_BOOL, &k.insecure_transport, false},
        {"insecure-discovery", 0, KVCTL_FLAG_BOOL, &k.insecure_discovery, false},
        {"insecure-skip-tls-verify", 0, KVCTL_FLAG_BOOL, &k.insecure_skip_verify, false},
        {"cert", 0, KVCTL_FLAG_STRING, &k.raw_cert, false},
        {"key", 0, KVCTL_FLAG_STRING, &k.raw_key, false},
        {"cacert", 0, KVCTL_FLAG_STRING, &k.raw_cacert, false},
        {"user", 0, KVCTL_FLAG_STRING, &k.raw_user, false},
        {"password", 0, KVCTL_FLAG_STRING, &k.raw_password, false},
        {"discovery-srv", 'd', KVCTL_FLAG_STRING, &k.raw_discovery, false},
        {"discovery-srv-name", 0, KVCTL_FLAG_STRING, &k.raw_discovery_name, false},
        {"help", 'h', KVCTL_FLAG_BOOL, &k.help, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    k.global_flags = globals;

    /* Find the command word: the first argument that is neither a global flag nor its value. */
    const char *cmd = NULL;
    for (int i = 1; i < argc && !cmd; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            cmd = i + 1 < argc ? argv[i + 1] : NULL;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            cmd = a;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            kvctl_usage("", stdout);
            return 0;
        }
        /* a global value flag given without '=' consumes the next word */
        for (struct kvctl_flag *f = globals; f->name; f++) {
            if (f->type == KVCTL_FLAG_BOOL)
                continue;
            bool is_long = a[1] == '-' && strcmp(a + 2, f->name) == 0;
            bool is_short = a[1] != '-' && f->shorthand && a[1] == f->shorthand && a[2] == '\0';
            if (is_long || is_short) {
                i++;
                break;
            }
        }
    }
    if (!cmd) {
        kvctl_usage("", stdout);
        return 0;
    }
    static const char *const names[] = {
        "get",         "put",     "del",   "txn",  "compaction", "endpoint",
        "member",      "lease",   "watch", "lock", "elect",      "snapshot",
        "move-leader", "version", "auth",  "user", "role"};
    int (*const fns[])(struct kvctl *, int, char **) = {
        kvctl_cmd_get,         kvctl_cmd_put,      kvctl_cmd_del,    kvctl_cmd_txn,
        kvctl_cmd_compaction,  kvctl_cmd_endpoint, kvctl_cmd_member, kvctl_cmd_lease,
        kvctl_cmd_watch,       kvctl_cmd_lock,     kvctl_cmd_elect,  kvctl_cmd_snapshot,
        kvctl_cmd_move_leader, cmd_version,        kvctl_cmd_auth,   kvctl_cmd_user,
        kvctl_cmd_role};
    int idx = kvctl_match(cmd, names, sizeof(names) / sizeof(names[0]));
    int rc;
    if (idx < 0) {
        /* cobra reports it, then etcdctl's main reports the returned error again (with the
         * program's own name: kvctl) */
        fprintf(stderr, "Error: unknown command \"%s\" for \"kvctl\"\n", cmd);
        fprintf(stderr, "Run 'kvctl --help' for usage.\n");
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "unknown command \"%s\" for \"kvctl\"", cmd);
    } else {
        rc = fns[idx](&k, argc - 1, argv + 1);
    }
    if (rc == KVCTL_EXIT_HELP)
        rc = 0;
    fflush(stdout);
    kvc_close(k.client);
    free_endpoints(&k);
    return rc;
}
