/*
 * systemd readiness without libsystemd (server/daemon/sd_notify.h): datagrams on $NOTIFY_SOCKET.
 * Unit part: kv_sd_notify() against a bound unix datagram socket (path and abstract).
 * Process part: a real kvd started with NOTIFY_SOCKET sends READY=1 once it serves client
 * requests and STOPPING=1 on SIGTERM, as kvd.service (Type=notify) expects.
 */
#include "daemon/sd_notify.h"

#include "kvt_proc.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A bound unix datagram socket at path ("@..." = abstract). Returns the fd. */
static int bind_dgram(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t len = strlen(path);
    cr_assert_lt(len, sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, len);
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    else
        salen++;
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, salen), 0, "bind %s: %s", path, strerror(errno));
    return fd;
}

/* Receives one datagram within timeout_ms into buf (NUL-terminated); returns its length or
 * -1 on timeout. */
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

Test(sd_notify, sends_one_datagram_to_a_path_socket)
{
    kvt_tmpdir d;
    cr_assert_eq(kvt_tmpdir_create(&d, "sdnotify"), 0);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/notify", d.path);
    int fd = bind_dgram(path);
    cr_assert_eq(kv_sd_notify(path, "READY=1\nSTATUS=x"), 0);
    char buf[256];
    cr_assert_eq(recv_within(fd, buf, sizeof(buf), 5000), 16);
    cr_expect_str_eq(buf, "READY=1\nSTATUS=x");
    cr_assert_eq(kv_sd_notify(path, "STOPPING=1"), 0);
    cr_assert_eq(recv_within(fd, buf, sizeof(buf), 5000), 10);
    cr_expect_str_eq(buf, "STOPPING=1");
    close(fd);
    kvt_tmpdir_destroy(&d);
}

Test(sd_notify, abstract_socket)
{
    char path[64];
    snprintf(path, sizeof(path), "@kvd-sdnotify-test-%d", (int)getpid());
    int fd = bind_dgram(path);
    cr_assert_eq(kv_sd_notify(path, "READY=1"), 0);
    char buf[64];
    cr_assert_eq(recv_within(fd, buf, sizeof(buf), 5000), 7);
    cr_expect_str_eq(buf, "READY=1");
    close(fd);
}

Test(sd_notify, unset_is_a_no_op_and_errors_are_reported)
{
    cr_expect_eq(kv_sd_notify(NULL, "READY=1"), 0);
    cr_expect_eq(kv_sd_notify("", "READY=1"), 0);
    cr_expect_eq(kv_sd_notify("relative/path", "READY=1"), -EINVAL);
    char longp[200];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = '\0';
    cr_expect_eq(kv_sd_notify(longp, "READY=1"), -EINVAL);
    /* nobody listens there */
    cr_expect_lt(kv_sd_notify("/nonexistent-dir-kvd/notify", "READY=1"), 0);
}

Test(sd_notify, kvd_notifies_ready_and_stopping, .timeout = 120)
{
    const char *b = getenv("KV_BUILD_DIR");
    cr_assert(b && *b, "KV_BUILD_DIR not set");
    char kvd[PATH_MAX];
    snprintf(kvd, sizeof(kvd), "%s/server/kvd", b);
    cr_assert_eq(access(kvd, X_OK), 0, "%s not built", kvd);
    kvt_tmpdir d;
    cr_assert_eq(kvt_tmpdir_create(&d, "sdnotify-kvd"), 0);
    char sock[PATH_MAX + 16], data[PATH_MAX + 16], log[PATH_MAX + 16], env[PATH_MAX + 32];
    snprintf(sock, sizeof(sock), "%s/notify", d.path);
    snprintf(data, sizeof(data), "%s/data", d.path);
    snprintf(log, sizeof(log), "%s/kvd.log", d.path);
    snprintf(env, sizeof(env), "NOTIFY_SOCKET=%s", sock);
    int fd = bind_dgram(sock);
    uint16_t cport, pport;
    cr_assert_eq(kvt_port_free(&cport), 0);
    cr_assert_eq(kvt_port_free(&pport), 0);
    char curl[64], purl[64];
    snprintf(curl, sizeof(curl), "--listen-client-urls=http://127.0.0.1:%u", cport);
    snprintf(purl, sizeof(purl), "--listen-peer-urls=http://127.0.0.1:%u", pport);
    const char *argv[] = {kvd, "--data-dir", data, curl, purl, NULL};
    const char *envs[] = {env, NULL};
    kvt_proc p;
    kvt_proc_init(&p, log);
    cr_assert_eq(kvt_proc_spawn_env(&p, argv, envs), 0);

    char buf[256];
    int n = recv_within(fd, buf, sizeof(buf), 60000);
    cr_assert_gt(n, 0, "no datagram from kvd within 60 s (log %s)", log);
    cr_expect(strncmp(buf, "READY=1\n", 8) == 0 || strcmp(buf, "READY=1") == 0, "got '%s'", buf);
    /* READY means serving: the client port accepts connections now */
    int c = kvt_connect_loopback(cport, 5000);
    cr_expect_geq(c, 0, "client port not accepting after READY=1");
    if (c >= 0)
        close(c);

    cr_assert_eq(kvt_proc_signal(&p, SIGTERM), 0);
    n = recv_within(fd, buf, sizeof(buf), 30000);
    cr_assert_gt(n, 0, "no STOPPING=1 after SIGTERM");
    cr_expect_str_eq(buf, "STOPPING=1");
    cr_expect_eq(kvt_proc_wait(&p, 30000), 0);
    kvt_proc_kill9(&p);
    close(fd);
    kvt_tmpdir_destroy(&d);
}
