/* kvctl test harness: see harness.h. */
#include "harness.h"
#include "kvt_proc.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include "kvt_skip.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ETCDCTL "/usr/bin/etcdctl"
#define STEP_TIMEOUT_S 30

static const char *build_dir(void)
{
    const char *b = getenv("KV_BUILD_DIR");
    return b && *b ? b : ".";
}

const char *h_kvctl(void)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/client/kvctl", build_dir());
    return path;
}

/* The server binary and whether it is etcd (which needs its cluster flags). */
static const char *server_bin(bool *is_etcd)
{
    static char kvd[4096];
    snprintf(kvd, sizeof(kvd), "%s/server/kvd", build_dir());
    const char *want = getenv("KV_TEST_SERVER");
    if (want && strcmp(want, "etcd") == 0) {
        *is_etcd = true;
        return "/usr/bin/etcd";
    }
    if ((want && strcmp(want, "kvd") == 0) || access(kvd, X_OK) == 0) {
        *is_etcd = false;
        return kvd;
    }
    *is_etcd = true;
    return "/usr/bin/etcd";
}

void h_require_tools(void)
{
    bool is_etcd;
    const char *srv = server_bin(&is_etcd);
    if (access(ETCDCTL, X_OK) != 0)
        KVT_SKIP_MISSING("etcdctl not installed (apt-get install etcd-client)");
    if (access(srv, X_OK) != 0)
        KVT_SKIP_MISSING("server %s not available", srv);
    cr_assert(access(h_kvctl(), X_OK) == 0, "kvctl not built at %s", h_kvctl());
}

static int free_port(void)
{
    uint16_t port = 0;
    cr_assert(kvt_port_free(&port) == 0);
    return port;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    cr_assert(b);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            b = realloc(b, cap);
            cr_assert(b);
        }
        size_t r = fread(b + n, 1, cap - n - 1, f);
        if (r == 0)
            break;
        n += r;
    }
    b[n] = '\0';
    fclose(f);
    return b;
}

/* Waits for pid up to timeout_s; kills it after. Returns exit status or 128+signal. */
struct server {
    kvt_proc proc; /* tests/lib's launcher */
    char dir[256];
    char ep[64];
};

/* Runs a shell script (tests/lib kvt_proc); stdout/stderr to files in dir. Returns the exit
 * status, or -1 if it ran longer than STEP_TIMEOUT_S (then it is killed). */
static int run_sh(const char *dir, const char *tool, const char *ep, const char *script,
                  const char *out_path, const char *err_path)
{
    char ctl[4400], e_ctl[4500], e_tool[4200], e_ep[128], e_w[320], e_err[420];
    snprintf(ctl, sizeof(ctl), "%s --endpoints=%s", tool, ep);
    snprintf(e_ctl, sizeof(e_ctl), "CTL=%s", ctl);
    snprintf(e_tool, sizeof(e_tool), "TOOL=%s", tool);
    snprintf(e_ep, sizeof(e_ep), "EP=%s", ep);
    snprintf(e_w, sizeof(e_w), "W=%s/w", dir);
    snprintf(e_err, sizeof(e_err), "KVT_STEP_ERR=%s", err_path);
    const char *env[] = {e_ctl, e_tool, e_ep, e_w, e_err, "ETCDCTL_API=3", "ETCDCTL_ENDPOINTS",
                         NULL};
    /* stdout is the launcher's log file (truncated first); stderr goes to its own file */
    size_t len = strlen(script) + 64;
    char *sh = malloc(len);
    cr_assert_not_null(sh);
    snprintf(sh, len, "exec 2>\"$KVT_STEP_ERR\"\n%s", script);
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0, "%s: %s", out_path, strerror(errno));
    close(fd);
    kvt_proc p;
    kvt_proc_init(&p, out_path);
    p.no_banner = 1;
    const char *argv[] = {"/bin/sh", "-c", sh, NULL};
    int rc = kvt_proc_spawn_env(&p, argv, env);
    free(sh);
    cr_assert_eq(rc, 0, "spawn /bin/sh: %s", strerror(-rc));
    if (kvt_proc_wait(&p, STEP_TIMEOUT_S * 1000) != 0) {
        kvt_proc_kill9(&p);
        return -1;
    }
    int st = p.last_status;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void server_start(struct server *s, int cport, int pport)
{
    bool is_etcd;
    const char *bin = server_bin(&is_etcd);
    snprintf(s->dir, sizeof(s->dir), "/tmp/kvctl-test-XXXXXX");
    cr_assert(mkdtemp(s->dir), "mkdtemp: %s", strerror(errno));
    char data[300], w[300], log[300], curl[64], purl[64], cluster[128];
    snprintf(data, sizeof(data), "%s/data", s->dir);
    snprintf(w, sizeof(w), "%s/w", s->dir);
    snprintf(log, sizeof(log), "%s/server.log", s->dir);
    cr_assert(mkdir(w, 0755) == 0);
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", cport);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", pport);
    snprintf(cluster, sizeof(cluster), "kvctl-test=%s", purl);
    snprintf(s->ep, sizeof(s->ep), "127.0.0.1:%d", cport);
    const char *etcd_argv[] = {
        bin,          "--data-dir",           data,    "--name",
        "kvctl-test", "--listen-client-urls", curl,    "--advertise-client-urls",
        curl,         "--listen-peer-urls",   purl,    "--initial-advertise-peer-urls",
        purl,         "--initial-cluster",    cluster, NULL};
    const char *kvd_argv[] = {
        bin,  "--data-dir",         data, "--name", "kvctl-test", "--listen-client-urls",
        curl, "--listen-peer-urls", purl, NULL};
    kvt_proc_init(&s->proc, log);
    int rc = kvt_proc_spawn(&s->proc, is_etcd ? etcd_argv : kvd_argv);
    cr_assert(rc == 0, "spawn %s: %s", bin, strerror(-rc));
    /* ready when etcdctl's health check (a linearizable read) succeeds */
    char script[512], o[400], e[400];
    snprintf(script, sizeof(script),
             ETCDCTL " --endpoints=%s --dial-timeout=1s --command-timeout=2s endpoint health",
             s->ep);
    snprintf(o, sizeof(o), "%s/ready.out", s->dir);
    snprintf(e, sizeof(e), "%s/ready.err", s->dir);
    for (int i = 0; i < 60; i++) {
        cr_assert(kvt_proc_alive(&s->proc), "server exited; see %s", log);
        if (run_sh(s->dir, ETCDCTL, s->ep, script, o, e) == 0)
            return;
        usleep(250000);
    }
    cr_assert_fail("server on %s not ready; see %s", s->ep, log);
}

static void server_stop(struct server *s)
{
    if (s->proc.pid > 0) {
        pid_t pid = s->proc.pid;
        kvt_proc_signal(&s->proc, SIGTERM);
        if (kvt_proc_wait(&s->proc, 10000) != 0) {
            cr_log_warn("server %d needed SIGKILL", (int)pid);
            kvt_proc_kill9(&s->proc);
        }
    }
    if (kvt_rmtree(s->dir) != 0)
        cr_log_warn("could not remove %s", s->dir);
}

/* Drops Go log lines ({"level":...}) that etcdctl's gRPC retry interceptor writes. */
static char *filter_err(char *s)
{
    char *o = s, *p = s;
    while (*p) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p + 1) : strlen(p);
        if (strncmp(p, "{\"level\"", 8) != 0) {
            memmove(o, p, len);
            o += len;
        }
        p += len;
    }
    *o = '\0';
    return s;
}

static int g_cport, g_pport;

void h_run_scenario(const char *tool, const struct h_step *steps, size_t n, struct h_out *outs)
{
    struct server s = {0};
    server_start(&s, g_cport, g_pport);
    const char *bin = strcmp(tool, "kvctl") == 0 ? h_kvctl() : ETCDCTL;
    char o[400], e[400], l[400];
    snprintf(o, sizeof(o), "%s/w/step.out", s.dir);
    snprintf(e, sizeof(e), "%s/w/step.err", s.dir);
    snprintf(l, sizeof(l), "%s/w/leases", s.dir);
    for (size_t i = 0; i < n; i++) {
        outs[i].status = run_sh(s.dir, bin, s.ep, steps[i].sh, o, e);
        outs[i].out = slurp(o);
        outs[i].err = filter_err(slurp(e));
    }
    char *leases = slurp(l);
    for (size_t i = 0; i < n; i++) {
        outs[i].out = h_normalise(outs[i].out, steps[i].norm, leases);
        outs[i].err = h_normalise(outs[i].err, steps[i].norm, leases);
    }
    free(leases);
    server_stop(&s);
}

/* Appends repl to o (growing it), expanding \1..\9 from the match m against p. */
static char *append_repl(char *o, size_t *n, size_t *cap, const char *repl, const char *p,
                         const regmatch_t *m)
{
    for (const char *r = repl; *r; r++) {
        const char *src = r;
        size_t len = 1;
        if (r[0] == '\\' && r[1] >= '1' && r[1] <= '9') {
            const regmatch_t *g = &m[r[1] - '0'];
            src = p + g->rm_so;
            len = g->rm_so >= 0 ? (size_t)(g->rm_eo - g->rm_so) : 0;
            r++;
        }
        if (*n + len + 1 > *cap) {
            *cap = (*n + len + 1) * 2;
            o = realloc(o, *cap);
            cr_assert(o);
        }
        memcpy(o + *n, src, len);
        *n += len;
    }
    return o;
}

/* Replaces every match of the ERE pat (line anchors per line) in s by repl (\1..\9 allowed);
 * returns a new string and frees s. */
static char *re_sub(char *s, const char *pat, const char *repl)
{
    regex_t re;
    cr_assert(regcomp(&re, pat, REG_EXTENDED | REG_NEWLINE) == 0, "bad regex %s", pat);
    size_t cap = strlen(s) * 2 + 64, n = 0;
    char *o = malloc(cap);
    cr_assert(o);
    const char *p = s;
    regmatch_t m[10];
    int eflags = 0;
    while (*p && regexec(&re, p, 10, m, eflags) == 0) {
        if ((size_t)m[0].rm_so + n + 1 > cap) {
            cap = ((size_t)m[0].rm_so + n + 1) * 2;
            o = realloc(o, cap);
            cr_assert(o);
        }
        memcpy(o + n, p, (size_t)m[0].rm_so);
        n += (size_t)m[0].rm_so;
        o = append_repl(o, &n, &cap, repl, p, m);
        if (m[0].rm_eo == 0) { /* empty match: copy one char to make progress */
            if (n + 2 > cap) {
                cap = (n + 2) * 2;
                o = realloc(o, cap);
                cr_assert(o);
            }
            o[n++] = *p;
            p++;
        } else {
            p += m[0].rm_eo;
        }
        eflags = p[-1] == '\n' ? 0 : REG_NOTBOL;
    }
    size_t rest = strlen(p);
    if (n + rest + 1 > cap) {
        cap = n + rest + 1;
        o = realloc(o, cap);
        cr_assert(o);
    }
    memcpy(o + n, p, rest + 1);
    regfree(&re);
    free(s);
    return o;
}

/* Replaces the literal `from` by `to` everywhere. */
static char *lit_sub(char *s, const char *from, const char *to)
{
    size_t fl = strlen(from);
    if (!fl)
        return s;
    size_t cap = strlen(s) * 2 + strlen(to) * 4 + 64, n = 0;
    char *o = malloc(cap);
    cr_assert(o);
    const char *p = s;
    for (const char *q; (q = strstr(p, from));) {
        size_t need = n + (size_t)(q - p) + strlen(to) + 1;
        if (need > cap) {
            cap = need * 2 + strlen(p);
            o = realloc(o, cap);
            cr_assert(o);
        }
        memcpy(o + n, p, (size_t)(q - p));
        n += (size_t)(q - p);
        memcpy(o + n, to, strlen(to));
        n += strlen(to);
        p = q + fl;
    }
    size_t rest = strlen(p);
    if (n + rest + 1 > cap) {
        cap = n + rest + 1;
        o = realloc(o, cap);
        cr_assert(o);
    }
    memcpy(o + n, p, rest + 1);
    free(s);
    return o;
}

char *h_normalise(char *s, unsigned flags, const char *lease_ids)
{
    /* lease ids: hex as printed (%016x) and decimal as in JSON */
    const char *p = lease_ids;
    int idx = 1;
    while (p && *p) {
        char hex[64] = "";
        size_t l = strcspn(p, "\n");
        if (l > 0 && l < sizeof(hex)) {
            memcpy(hex, p, l);
            hex[l] = '\0';
            char tag[32], dec[32];
            snprintf(tag, sizeof(tag), "<lease%d>", idx++);
            snprintf(dec, sizeof(dec), "%lld", (long long)strtoull(hex, NULL, 16));
            s = lit_sub(s, hex, tag);
            s = re_sub(s, dec, tag);
        }
        p += l;
        if (*p)
            p++;
    }
    if (flags & H_NORM_TOOK)
        s = re_sub(s,
                   "[0-9]+(\\.[0-9]+)?(ns|\xc2\xb5s|us|ms|s|m|h)([0-9]+(\\.[0-9]+)?(ns|\xc2\xb5s|"
                   "us|ms|s))*",
                   "<d>");
    if (flags & H_NORM_TTL) {
        s = re_sub(s, "remaining\\([0-9]+s\\)", "remaining(<ttl>)");
        s = re_sub(s, "\"ttl\":[0-9]+", "\"ttl\":<ttl>");
    }
    if (flags & H_NORM_DB) {
        s = re_sub(s, "\"(dbSize|dbSizeInUse|raftIndex|raftAppliedIndex)\":[0-9]+", "\"\\1\":<n>");
        s = re_sub(s, "\"(DBSize|RaftIndex|RaftAppliedIndex)\" : [0-9]+", "\"\\1\" : <n>");
        s = re_sub(s, "[0-9.]+ (B|kB|MB|GB)", "<size>");
        /* simple: "..., leader, learner, term, index, applied, errors" */
        s = re_sub(s, "(true|false), (true|false), ([0-9]+), [0-9]+, [0-9]+, ",
                   "\\1, \\2, \\3, <n>, <n>, ");
        /* table: "| leader | learner | term | index | applied | errors |" */
        s = re_sub(s, "(true|false) \\| +(true|false) \\| +([0-9]+) \\| +[0-9]+ \\| +[0-9]+ \\|",
                   "\\1 | \\2 | \\3 | <n> | <n> |");
    }
    if (flags & (H_NORM_TABLE | H_NORM_DB)) {
        s = re_sub(s, " +", " ");
        s = re_sub(s, "-+", "-");
    }
    return s;
}

/* etcdctl's output with kvctl's own name where the program names itself:
 * the USAGE lines of the helps and cobra's unknown-command errors. Everything else (data
 * output formats, error texts) is compared byte for byte. */
char *h_own_name(char *s)
{
    s = lit_sub(s, "\tetcdctl ", "\tkvctl ");
    s = lit_sub(s, " for \"etcdctl\"", " for \"kvctl\"");
    s = lit_sub(s, "Run 'etcdctl --help'", "Run 'kvctl --help'");
    return s;
}

void h_out_free(struct h_out *o)
{
    free(o->out);
    free(o->err);
    o->out = o->err = NULL;
}

void h_compare(const struct h_step *steps, size_t n)
{
    h_require_tools();
    g_cport = free_port();
    g_pport = free_port();
    struct h_out *a = calloc(n, sizeof(*a));
    struct h_out *b = calloc(n, sizeof(*b));
    cr_assert(a && b);
    h_run_scenario("kvctl", steps, n, a);
    h_run_scenario("etcdctl", steps, n, b);
    for (size_t i = 0; i < n; i++) {
        b[i].out = h_own_name(b[i].out);
        b[i].err = h_own_name(b[i].err);
        cr_expect_str_eq(a[i].out, b[i].out,
                         "step %zu `%s`: stdout differs\nkvctl:\n%s\netcdctl:\n%s", i, steps[i].sh,
                         a[i].out, b[i].out);
        cr_expect_str_eq(a[i].err, b[i].err,
                         "step %zu `%s`: stderr differs\nkvctl:\n%s\netcdctl:\n%s", i, steps[i].sh,
                         a[i].err, b[i].err);
        cr_expect_eq(a[i].status, b[i].status, "step %zu `%s`: exit status kvctl %d, etcdctl %d", i,
                     steps[i].sh, a[i].status, b[i].status);
        h_out_free(&a[i]);
        h_out_free(&b[i]);
    }
    free(a);
    free(b);
}
