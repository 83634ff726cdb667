/*
 * kvd's log flags end to end (server/log/log.h): a real kvd started with
 * --log-format json writes only JSON objects, one a line, that python3's json module parses,
 * each with etcd zap's level/ts/caller/msg; --log-level warn drops the info lines and keeps
 * the warnings; --log-outputs FILE sends the lines there; bad values are refused at startup.
 * Readiness comes from $NOTIFY_SOCKET (server/daemon/sd_notify.h), not from the log.
 */
#include "kvt_proc.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include "kvt_skip.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int bind_dgram(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path));
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %s", path);
    return fd;
}

static int recv_within(int fd, char *buf, size_t cap, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) != 1)
        return -1;
    ssize_t n = recv(fd, buf, cap - 1, 0);
    cr_assert_geq(n, 0);
    buf[n] = '\0';
    return (int)n;
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    cr_assert(fp, "cannot open %s", path);
    char *buf = NULL;
    size_t cap = 0;
    if (getdelim(&buf, &cap, '\0', fp) == -1) {
        free(buf);
        buf = strdup("");
    }
    fclose(fp);
    return buf;
}

static const char *kvd_path(void)
{
    static char p[4096];
    const char *b = getenv("KV_BUILD_DIR");
    cr_assert(b && *b);
    snprintf(p, sizeof(p), "%s/server/kvd", b);
    return p;
}

/* A kvd with the extra flags; waits for READY=1, then for `between` (if any) to run, then
 * stops it with SIGTERM. Returns what it wrote to stdout and stderr (caller frees). */
static char *run_kvd(const char *dir, const char *const *extra, void (*between)(kvt_proc *, int))
{
    char sock[PATH_MAX + 16], data[PATH_MAX + 16], log[PATH_MAX + 16], env[PATH_MAX + 32];
    char curl[64], purl[64];
    snprintf(sock, sizeof(sock), "%s/notify", dir);
    /* each run: its own data dir (the member id depends on the peer port) */
    static int run;
    run++;
    snprintf(data, sizeof(data), "%s/data%d", dir, run);
    snprintf(log, sizeof(log), "%s/kvd%d.out", dir, run);
    snprintf(env, sizeof(env), "NOTIFY_SOCKET=%s", sock);
    unlink(sock);
    int fd = bind_dgram(sock);
    uint16_t cport, pport;
    cr_assert_eq(kvt_port_free(&cport), 0);
    cr_assert_eq(kvt_port_free(&pport), 0);
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%u", cport);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%u", pport);
    const char *argv[32] = {kvd_path(), "--data-dir",         data, "--listen-client-urls",
                            curl,       "--listen-peer-urls", purl};
    size_t n = 7;
    for (size_t i = 0; extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    const char *envs[] = {env, NULL};
    kvt_proc p;
    kvt_proc_init(&p, log);
    p.no_banner = 1;
    cr_assert_eq(kvt_proc_spawn_env(&p, argv, envs), 0);
    char buf[256];
    cr_assert_gt(recv_within(fd, buf, sizeof(buf), 60000), 0, "no READY=1 (log %s)", log);
    cr_assert(strncmp(buf, "READY=1", 7) == 0, "got %s", buf);
    if (between)
        between(&p, fd);
    cr_assert_eq(kvt_proc_signal(&p, SIGTERM), 0);
    cr_expect_eq(kvt_proc_wait(&p, 30000), 0);
    kvt_proc_kill9(&p);
    close(fd);
    return slurp(log);
}

/* Every line of path is a JSON object with string level/ts/caller/msg (python3 json);
 * prints "<level> <msg>" per line into the result (caller frees). */
static char *parse_json_lines(const char *path)
{
    char prog[] = "import json, re, sys\n"
                  "n = 0\n"
                  "for line in open(sys.argv[1], encoding='utf-8'):\n"
                  "    o = json.loads(line)\n"
                  "    assert list(o)[:4] == ['level', 'ts', 'caller', 'msg'], o\n"
                  "    assert o['level'] in ('debug', 'info', 'warn', 'error', 'fatal'), o\n"
                  "    assert re.fullmatch(r'\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z', "
                  "o['ts']), o\n"
                  "    assert o['caller'] == 'kvd' and isinstance(o['msg'], str), o\n"
                  "    print(o['level'], o['msg'])\n"
                  "    n += 1\n"
                  "assert n > 0, 'no lines'\n";
    if (access("/usr/bin/python3", X_OK) != 0)
        KVT_SKIP_MISSING("no /usr/bin/python3 to parse the JSON lines");
    const char *argv[] = {"/usr/bin/python3", "-c", prog, path, NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "not JSON lines (%s):\n%s", path, r.err);
    char *out = strdup(r.out);
    kvt_cmd_result_free(&r);
    return out;
}

Test(log_json, kvd_writes_parseable_zap_json_lines, .timeout = 180)
{
    kvt_tmpdir t;
    cr_assert_eq(kvt_tmpdir_create(&t, "kvd-logjson"), 0);
    const char *extra[] = {"--log-format", "json", "--log-level=debug", NULL};
    char *out = run_kvd(t.path, extra, NULL);
    cr_assert(strstr(out, "\"msg\":\"ready to serve client requests\"") != NULL, "%s", out);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/kvd1.out", t.path); /* the first run_kvd() here */
    char *parsed = parse_json_lines(path);
    cr_expect(strstr(parsed, "info ready to serve client requests\n") != NULL, "%s", parsed);
    cr_expect(strstr(parsed, "info stopped\n") != NULL, "%s", parsed);
    cr_expect(strstr(parsed, "kvd: ") == NULL, "the prefix stays in messages:\n%s", parsed);
    free(parsed);
    free(out);
    kvt_tmpdir_destroy(&t);
}

static void stall(kvt_proc *p, int fd)
{
    (void)fd;
    /* failpoint: SIGUSR1 stalls the apply path and resumes it: two warning lines */
    cr_assert_eq(kvt_proc_signal(p, SIGUSR1), 0);
    kvt_sleep_ms(300);
    cr_assert_eq(kvt_proc_signal(p, SIGUSR1), 0);
    kvt_sleep_ms(300);
}

Test(log_json, log_level_warn_keeps_warnings_only_in_the_output_file, .timeout = 180)
{
    kvt_tmpdir t;
    cr_assert_eq(kvt_tmpdir_create(&t, "kvd-logwarn"), 0);
    char file[PATH_MAX + 16], arg[PATH_MAX + 32];
    snprintf(file, sizeof(file), "%s/kvd.log", t.path);
    snprintf(arg, sizeof(arg), "--log-outputs=%s", file);
    const char *extra[] = {"--log-format=json",   "--log-level", "warn", arg,
                           "--enable-failpoints", NULL};
    char *out = run_kvd(t.path, extra, stall);
    cr_expect_str_eq(out, "", "stdout/stderr are not the log output");
    char *parsed = parse_json_lines(file);
    cr_expect_str_eq(parsed, "warn failpoint: apply path stalled\n"
                             "warn failpoint: apply path resumed\n");
    free(parsed);
    free(out);
    kvt_tmpdir_destroy(&t);
}

Test(log_json, text_format_is_unchanged_and_filtered, .timeout = 180)
{
    kvt_tmpdir t;
    cr_assert_eq(kvt_tmpdir_create(&t, "kvd-logtext"), 0);
    const char *extra[] = {"--enable-failpoints", NULL};
    char *out = run_kvd(t.path, extra, stall);
    cr_expect(strstr(out, "\nkvd: ready to serve client requests\n") != NULL, "%s", out);
    cr_expect(strstr(out, "\nkvd: warning: failpoint: apply path stalled\n") != NULL, "%s", out);
    cr_expect(strstr(out, "{\"level\"") == NULL, "%s", out);
    free(out);
    const char *extra2[] = {"--enable-failpoints", "--log-level=error", NULL};
    out = run_kvd(t.path, extra2, stall);
    cr_expect_str_eq(out, "");
    free(out);
    kvt_tmpdir_destroy(&t);
}

Test(log_json, bad_values_are_refused)
{
    static const char *const bad[][3] = {
        {"--log-level", "verbose", "--log-level"},
        {"--log-format", "zap", "--log-format"},
        {"--log-outputs", "/nonexistent/dir/kvd.log", "--log-outputs"},
        {"--log-outputs", "stderr,/tmp/x", "--log-outputs"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[] = {kvd_path(),   bad[i][0],        bad[i][1],
                              "--data-dir", "/nonexistent/d", NULL};
        kvt_cmd_result r;
        cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 30000, &r), 0);
        cr_expect_eq(r.exit_code, 2, "%s %s: exit %d", bad[i][0], bad[i][1], r.exit_code);
        cr_expect(strstr(r.err, bad[i][2]) != NULL, "%s %s: %s", bad[i][0], bad[i][1], r.err);
        kvt_cmd_result_free(&r);
    }
}
