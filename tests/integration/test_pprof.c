/*
 * it_pprof: --enable-pprof on kvd's client port, as etcd's (docs/pprof.md).
 * - `go tool pprof URL`, the real client, fetches a CPU profile of a kvd under put load, and
 *   its report names kvd's functions (the profile is symbolized by kvd itself).
 * - One profile at a time: a second request meanwhile gets Go's 500; a client that leaves
 *   mid-profile frees the profiler for the next one at once.
 * - cmdline, the index and an unknown profile answer as Go's net/http/pprof does; the start
 *   logs that pprof is enabled, as etcd does.
 * - Without the flag /debug/pprof/ is 404, as on etcd.
 * - SIGTERM during a profile ends kvd with status 0.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <pthread.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kvt_skip.h"
#include "kvt_util.h"
#include "rpc_client.h"

static kv_it_server *start(int with_flag)
{
    static const char *const flag[] = {"--enable-pprof", NULL};
    kv_it_server *s = calloc(1, sizeof(*s));
    cr_assert(s);
    cr_assert_eq(kv_it_server_init(s, KV_IT_KVD, with_flag ? flag : NULL), 0);
    cr_assert_eq(kv_it_server_start(s, 20000), 0, "start kvd");
    return s;
}

static void stop(kv_it_server *s)
{
    kv_it_server_destroy(s);
    free(s);
}

typedef struct resp {
    int status;
    char head[2048];
    char *body; /* malloc'd */
    size_t len;
} resp;

/* Sends "GET path" with Connection: close; returns the connected socket. */
static int send_get(uint16_t port, const char *path)
{
    int fd = kvt_connect_loopback(port, 5000);
    cr_assert(fd >= 0, "connect %u", port);
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    cr_assert_eq(kvt_send_all(fd, req, (size_t)n, kvt_now_ms() + 5000), 0);
    return fd;
}

/* Reads the whole response (the server closes after it) within timeout_ms. */
static void read_resp(int fd, uint32_t timeout_ms, resp *r)
{
    memset(r, 0, sizeof(*r));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    cr_assert(buf);
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = (int64_t)(deadline - kvt_now_ms());
        cr_assert(left > 0, "no complete answer within %u ms", timeout_ms);
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        if (n + 4096 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert(buf);
        }
        ssize_t k = read(fd, buf + n, cap - n - 1);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    cr_assert(end, "a response head: %.200s", buf);
    size_t hl = (size_t)(end - buf);
    memcpy(r->head, buf, hl < sizeof(r->head) - 1 ? hl : sizeof(r->head) - 1);
    cr_assert_eq(sscanf(buf, "HTTP/1.1 %d", &r->status), 1);
    r->len = n - hl - 4;
    r->body = malloc(r->len + 1);
    memcpy(r->body, end + 4, r->len);
    r->body[r->len] = '\0';
    free(buf);
}

static void get(uint16_t port, const char *path, uint32_t timeout_ms, resp *r)
{
    read_resp(send_get(port, path), timeout_ms, r);
}

/* ---- put load ---- */

typedef struct load {
    const char *endpoint;
    atomic_int stop;
    long puts;
} load;

static void *put_loop(void *arg)
{
    load *l = arg;
    kv_it_rpc *c = NULL;
    char err[256];
    if (kv_it_rpc_open(&c, l->endpoint, 5000, err, sizeof(err)) != 0)
        return NULL;
    char key[32];
    while (!atomic_load(&l->stop)) {
        snprintf(key, sizeof(key), "k%ld", l->puts % 100);
        if (kv_it_rpc_put(c, key, strlen(key), "value", 5, 5000, NULL, err, sizeof(err)) == 0)
            l->puts++;
    }
    kv_it_rpc_close(c);
    return NULL;
}

Test(it_pprof, go_tool_pprof_reads_a_profile_that_names_kvd_functions, .timeout = 180)
{
    const char *go = "/usr/bin/go";
    if (access(go, X_OK) != 0)
        KVT_SKIP_MISSING("needs %s (Debian's golang-go) for `go tool pprof`", go);
    kv_it_server *s = start(1);
    load l = {.endpoint = s->endpoint};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, put_loop, &l), 0);
    char url[128], env_tmp[PATH_MAX + 16];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/debug/pprof/profile", s->client_port);
    snprintf(env_tmp, sizeof(env_tmp), "PPROF_TMPDIR=%s", s->dir); /* where pprof saves it */
    const char *argv[] = {go,         "tool", "pprof", "-top", "-nodecount=2000",
                          "-seconds", "3",    url,     NULL};
    const char *env[] = {env_tmp, NULL};
    kv_it_cmd_result res;
    cr_assert_eq(kv_it_run(argv, env, NULL, 0, 90000, &res), 0);
    atomic_store(&l.stop, 1);
    pthread_join(th, NULL);
    cr_log_info("%ld puts during the profile; pprof: %.600s", l.puts, res.out);
    cr_assert(!res.timed_out && res.exit_code == 0, "go tool pprof: exit %d: %s", res.exit_code,
              res.err);
    cr_assert(strstr(res.out, "File: kvd"), "the profile's main mapping is kvd: %s", res.out);
    cr_assert(strstr(res.out, "Type: cpu"), "%s", res.out);
    cr_assert_gt(l.puts, 50, "the load ran");
    /* kvd's own functions, by name: the loop that runs everything, and its put path */
    cr_assert(strstr(res.out, " main\n"), "kvd's main in the report: %s", res.out);
    cr_assert(strstr(res.out, " kv_"), "a kv_ function in the report: %s", res.out);
    kv_it_cmd_result_free(&res);
    stop(s);
}

Test(it_pprof, one_profile_at_a_time_and_a_client_that_leaves_frees_it, .timeout = 120)
{
    kv_it_server *s = start(1);
    int first = send_get(s->client_port, "/debug/pprof/profile?seconds=60");
    kvt_sleep_ms(300);
    resp r;
    get(s->client_port, "/debug/pprof/profile?seconds=1", 5000, &r);
    cr_assert_eq(r.status, 500, "%s", r.head);
    cr_assert_str_eq(r.body, "Could not enable CPU profiling: cpu profiling already in use\n");
    free(r.body);
    close(first); /* the 60 s profile's client leaves: the profile is discarded at once */
    kvt_sleep_ms(300);
    uint64_t t0 = kvt_now_ms();
    get(s->client_port, "/debug/pprof/profile?seconds=1", 10000, &r);
    cr_assert_eq(r.status, 200, "the profiler is free again: %s %s", r.head, r.body);
    cr_assert(strstr(r.head, "Content-Type: application/octet-stream"), "%s", r.head);
    cr_assert(strstr(r.head, "Content-Disposition: attachment; filename=\"profile\""), "%s",
              r.head);
    /* profile.proto: field 1 (sample_type), length-delimited, first */
    cr_assert(r.len > 16 && (uint8_t)r.body[0] == 0x0a, "a pprof protobuf, %zu bytes", r.len);
    cr_log_info("1 s profile: %zu bytes in %llu ms", r.len,
                (unsigned long long)(kvt_now_ms() - t0));
    free(r.body);
    cr_assert(kv_it_server_alive(s));
    stop(s);
}

Test(it_pprof, cmdline_index_and_unknown_profiles_as_go, .timeout = 60)
{
    kv_it_server *s = start(1);
    resp r;
    get(s->client_port, "/debug/pprof/cmdline", 5000, &r);
    cr_assert_eq(r.status, 200);
    /* arguments separated by NUL, none after the last */
    cr_assert(memmem(r.body, r.len, "\0--enable-pprof", 15), "cmdline");
    cr_assert(r.len > 0 && r.body[r.len - 1] != '\0');
    free(r.body);
    get(s->client_port, "/debug/pprof/", 5000, &r);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.head, "text/html") && strstr(r.body, "profile?seconds=30"), "%s", r.body);
    free(r.body);
    get(s->client_port, "/debug/pprof/heap", 5000, &r);
    cr_assert_eq(r.status, 404);
    cr_assert_str_eq(r.body, "Unknown profile\n");
    free(r.body);
    get(s->client_port, "/debug/pprof/profile?seconds=100000", 5000, &r);
    cr_assert_eq(r.status, 400, "%s", r.body);
    free(r.body);
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(s, &log), 0);
    cr_assert(strstr(log, "pprof is enabled under /debug/pprof"), "etcd's start line: %s", log);
    free(log);
    stop(s);
}

Test(it_pprof, without_the_flag_it_is_not_served, .timeout = 60)
{
    kv_it_server *s = start(0);
    resp r;
    uint64_t t0 = kvt_now_ms();
    get(s->client_port, "/debug/pprof/profile?seconds=5", 5000, &r);
    cr_assert_eq(r.status, 404);
    cr_assert_str_eq(r.body, "404 page not found\n");
    cr_assert_lt(kvt_now_ms() - t0, 3000, "answered at once, no profile taken");
    free(r.body);
    stop(s);
}

/* SIGTERM while a 60 s profile runs and another connection has sent half a request head:
 * kvd exits 0 within the grace period (a SIGKILL after it would show as a signal). In the
 * sanitizer build a leak or a use after free in that teardown fails the exit status too. */
Test(it_pprof, sigterm_during_a_profile_exits_cleanly, .timeout = 60)
{
    kv_it_server *s = start(1);
    int prof = send_get(s->client_port, "/debug/pprof/profile?seconds=60");
    int half = kvt_connect_loopback(s->client_port, 5000);
    cr_assert(half >= 0);
    static const char head[] = "GET /health HTTP/1.1\r\nHost: x\r\n";
    cr_assert_eq(kvt_send_all(half, head, sizeof head - 1, kvt_now_ms() + 5000), 0);
    kvt_sleep_ms(300);
    resp r;
    get(s->client_port, "/debug/pprof/profile?seconds=1", 5000, &r);
    cr_assert_eq(r.status, 500, "the 60 s profile runs: %s", r.head);
    free(r.body);
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(kv_it_server_stop(s, 20000), 0);
    int st = s->proc.last_status;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x after %llu ms (log %s)", st,
              (unsigned long long)(kvt_now_ms() - t0), s->log_path);
    close(prof);
    close(half);
    stop(s);
}
