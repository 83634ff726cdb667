/*
 * kvt_lib unit tests: the peer proxy (relay, blackhole, per-dialer blocking by X-Server-From,
 * closing connections that lost bytes once healed), the process launcher, the temp dir and
 * free ports.
 */
#include "kvt_proc.h"
#include "kvt_proxy.h"
#include "kvt_util.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A one-connection echo server on a free port (its own thread). */
typedef struct echo {
    int lfd;
    uint16_t port;
    pthread_t th;
} echo;

static void *echo_main(void *arg)
{
    echo *e = arg;
    int fd = accept(e->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char buf[4096];
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0)
        if (write(fd, buf, (size_t)r) != r)
            break;
    close(fd);
    return NULL;
}

static void echo_start(echo *e)
{
    e->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(a);
    cr_assert_eq(bind(e->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(getsockname(e->lfd, (struct sockaddr *)&a, &l), 0);
    cr_assert_eq(listen(e->lfd, 4), 0);
    e->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&e->th, NULL, echo_main, e), 0);
}

static void echo_stop(echo *e)
{
    shutdown(e->lfd, SHUT_RDWR);
    close(e->lfd);
    pthread_join(e->th, NULL);
}

/* Reads up to cap-1 bytes within timeout_ms: bytes read, 0 on EOF, -ETIMEDOUT, -errno. */
static int read_some(int fd, char *buf, size_t cap, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r == 0)
        return -ETIMEDOUT;
    ssize_t n = read(fd, buf, cap - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return (int)n;
}

static void write_str(int fd, const char *s)
{
    cr_assert_eq(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

Test(kvt_proxy, relays_blocks_a_dialer_and_closes_tainted_connections)
{
    echo e;
    echo_start(&e);
    uint16_t pport;
    cr_assert_eq(kvt_port_free(&pport), 0);
    kvt_proxy *p = NULL;
    cr_assert_eq(kvt_proxy_start(&p, pport, e.port, 1), 0);
    int fd = kvt_connect_loopback(pport, 2000);
    cr_assert_geq(fd, 0);
    char buf[256];
    write_str(fd, "GET /raft/stream HTTP/1.1\r\nX-Server-From: 1a2b\r\n\r\n");
    int n = read_some(fd, buf, sizeof(buf), 3000);
    cr_assert_gt(n, 0, "relay: %d", n);
    cr_assert(strstr(buf, "X-Server-From: 1a2b") != NULL);

    /* Another dialer's id: no effect. */
    cr_assert_eq(kvt_proxy_block_from(p, "ffff", 1), 0);
    write_str(fd, "ping1");
    cr_assert_eq(read_some(fd, buf, sizeof(buf), 3000), 5);
    cr_assert_eq(kvt_proxy_block_from(p, "ffff", 0), 0);

    /* This dialer blocked: bytes are dropped, the connection stays open. */
    cr_assert_eq(kvt_proxy_block_from(p, "1a2b", 1), 0);
    write_str(fd, "ping2");
    cr_assert_eq(read_some(fd, buf, sizeof(buf), 500), -ETIMEDOUT);
    uint64_t bytes, dropped;
    uint32_t conns;
    kvt_proxy_stats(p, &bytes, &dropped, &conns);
    cr_assert_geq(dropped, 5);
    cr_assert_eq(conns, 1);

    /* Healed: the connection lost bytes, so it is closed (the peer must redial). */
    cr_assert_eq(kvt_proxy_block_from(p, "1a2b", 0), 0);
    n = read_some(fd, buf, sizeof(buf), 3000);
    cr_assert(n == 0 || n == -ECONNRESET, "tainted connection not closed: %d", n);
    close(fd);
    kvt_proxy_stop(p);
    echo_stop(&e);
}

Test(kvt_proc, spawn_log_pause_kill_and_run)
{
    kvt_tmpdir d;
    cr_assert_eq(kvt_tmpdir_create(&d, "kvt-test"), 0);
    char log[PATH_MAX + 16];
    snprintf(log, sizeof(log), "%s/sleep.log", d.path);
    kvt_proc p;
    kvt_proc_init(&p, log);
    const char *argv[] = {"/bin/sh", "-c", "echo hello; exec sleep 30", NULL};
    cr_assert_eq(kvt_proc_spawn(&p, argv), 0);
    cr_assert(kvt_proc_alive(&p));
    /* The child's output reaches the log (wait for it before pausing the child). */
    char got[256] = "";
    for (uint64_t t0 = kvt_now_ms(); !strstr(got, "hello") && kvt_now_ms() - t0 < 10000;) {
        FILE *f = fopen(log, "r");
        size_t n = f ? fread(got, 1, sizeof(got) - 1, f) : 0;
        got[n] = '\0';
        if (f)
            fclose(f);
        kvt_sleep_ms(10);
    }
    cr_assert(strstr(got, "=== kvt: start /bin/sh\nhello\n") != NULL, "log: %s", got);
    cr_assert_eq(kvt_proc_pause(&p), 0);
    cr_assert(p.stopped);
    cr_assert_eq(kvt_proc_wait(&p, 200), -ETIMEDOUT);
    /* SIGTERM reaches a paused process (it is continued first). */
    cr_assert_eq(kvt_proc_term(&p, 5000), 0);
    cr_assert_not(kvt_proc_alive(&p));
    cr_assert(WIFSIGNALED(p.last_status) && WTERMSIG(p.last_status) == SIGTERM);

    kvt_cmd_result r;
    const char *cat[] = {"/bin/cat", "-", NULL};
    cr_assert_eq(kvt_run(cat, NULL, "in", 2, 5000, &r), 0);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_str_eq(r.out, "in");
    kvt_cmd_result_free(&r);
    const char *slow[] = {"/bin/sleep", "10", NULL};
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(kvt_run(slow, NULL, NULL, 0, 300, &r), 0);
    cr_assert(r.timed_out);
    cr_assert_lt(kvt_now_ms() - t0, 8000);
    kvt_cmd_result_free(&r);

    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s", d.path);
    kvt_tmpdir_destroy(&d);
    struct stat st;
    cr_assert_neq(stat(path, &st), 0, "tmpdir not removed");
}

/* kvt_port_free hands a port to one live process only: a child claims every free port of an
 * 8-port range and stays alive; the parent then gets -EADDRINUSE (bind(0) or a lone bind
 * probe would hand it one of those ports); once the child is dead its ports are free again.
 * Default picks lie below the kernel's ephemeral range, where connect() never lands. */
Test(kvt_port, a_port_goes_to_one_live_process_and_outside_the_ephemeral_range)
{
    kvt_tmpdir d;
    cr_assert_eq(kvt_tmpdir_create(&d, "kvt-ports"), 0);
    uint16_t a = 0, b = 0;
    cr_assert_eq(kvt_port_free(&a), 0);
    cr_assert_eq(kvt_port_free(&b), 0);
    cr_assert_neq(a, b, "one process got port %u twice", a);
    unsigned eph_lo = 0, eph_hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f && fscanf(f, "%u %u", &eph_lo, &eph_hi) == 2 && eph_lo > 10100)
        cr_assert(a < eph_lo && b < eph_lo, "ports %u %u in the ephemeral range %u-%u", a, b,
                  eph_lo, eph_hi);
    if (f)
        fclose(f);

    cr_assert_eq(setenv("KV_TEST_PORT_DIR", d.path, 1), 0);
    cr_assert_eq(setenv("KV_TEST_PORT_RANGE", "19990-19998", 1), 0);
    int to_parent[2], to_child[2];
    cr_assert_eq(pipe(to_parent), 0);
    cr_assert_eq(pipe(to_child), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(to_parent[0]);
        close(to_child[1]);
        unsigned char n = 0;
        uint16_t p;
        while (n < 16 && kvt_port_free(&p) == 0)
            n++;
        (void)!write(to_parent[1], &n, 1);
        char c;
        (void)!read(to_child[0], &c, 1); /* alive until the parent says */
        _exit(0);
    }
    close(to_parent[1]);
    close(to_child[0]);
    unsigned char claimed = 0;
    cr_assert_eq(read(to_parent[0], &claimed, 1), 1);
    cr_assert(claimed >= 1 && claimed <= 8, "the child claimed %u of 8 ports", claimed);
    uint16_t p = 0;
    int rc = kvt_port_free(&p);
    cr_assert_eq(rc, -EADDRINUSE, "got port %u (rc %d) while its owner lives", p, rc);
    cr_assert_eq(write(to_child[1], "x", 1), 1);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert_eq(kvt_port_free(&p), 0, "the dead child's ports were not taken over");
    cr_assert(p >= 19990 && p < 19998, "port %u outside the range", p);
    close(to_parent[0]);
    close(to_child[1]);
    cr_assert(kvt_log_port_taken("kvd grpc-proxy: error: --metrics-addr 127.0.0.1:1: Address "
                                 "already in use"));
    cr_assert(kvt_log_port_taken("listen tcp 127.0.0.1:1: bind: address already in use"));
    cr_assert_not(kvt_log_port_taken("kvd: ready to serve client requests"));
    unsetenv("KV_TEST_PORT_RANGE");
    unsetenv("KV_TEST_PORT_DIR");
    kvt_tmpdir_destroy(&d);
}

/* Writes text as the port record <dir>/<port>. */
static void write_record(const char *dir, unsigned port, const char *text)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/%u", dir, port);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* A record names its owner by pid AND start time: a live pid that started at another time
 * (the pid was reused after the owner died) does not keep the port; a record of the old form,
 * a pid alone, still does while that pid lives. */
Test(kvt_port, a_reused_pid_does_not_keep_a_port)
{
    kvt_tmpdir d;
    cr_assert_eq(kvt_tmpdir_create(&d, "kvt-ports"), 0);
    cr_assert_eq(setenv("KV_TEST_PORT_DIR", d.path, 1), 0);
    uint16_t port = 0;
    cr_assert_eq(kvt_port_free(&port), 0); /* a port that binds now, for a 1-port range */
    char range[32];
    snprintf(range, sizeof range, "%u-%u", port, port + 1u);
    cr_assert_eq(setenv("KV_TEST_PORT_RANGE", range, 1), 0);

    char path[PATH_MAX + 16], rec[64] = "";
    snprintf(path, sizeof path, "%s/%u", d.path, port);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(rec, sizeof rec, f));
    fclose(f);
    long pid = 0;
    unsigned long long start = 0;
    cr_assert_eq(sscanf(rec, "%ld %llu", &pid, &start), 2, "record '%s'", rec);
    cr_assert_eq(pid, (long)getpid());
    cr_assert_gt(start, 0, "no start time recorded: '%s'", rec);

    uint16_t p = 0;
    cr_assert_eq(kvt_port_free(&p), -EADDRINUSE, "got %u while this process owns it", p);
    char text[64];
    snprintf(text, sizeof text, "%ld %llu\n", pid, start + 1);
    write_record(d.path, port, text); /* the same pid, started at another time */
    cr_assert_eq(kvt_port_free(&p), 0, "a reused pid kept the port");
    cr_assert_eq(p, port);
    snprintf(text, sizeof text, "%ld\n", pid);
    write_record(d.path, port, text); /* a pid alone: live, so kept */
    cr_assert_eq(kvt_port_free(&p), -EADDRINUSE);
    unsetenv("KV_TEST_PORT_RANGE");
    unsetenv("KV_TEST_PORT_DIR");
    kvt_tmpdir_destroy(&d);
}

/* The tail a failure message quotes: the last max bytes, or the whole string when shorter. */
Test(kvt_util, str_tail_is_the_last_max_bytes)
{
    const char *s = "first line\nlast line\n";
    cr_assert_str_eq(kvt_str_tail(s, 10), "last line\n");
    cr_assert_eq(kvt_str_tail(s, strlen(s)), s);
    cr_assert_eq(kvt_str_tail(s, 1000), s);
    cr_assert_str_eq(kvt_str_tail(s, 0), "");
    cr_assert_str_eq(kvt_str_tail("", 5), "");
}
