/* Lesson 13: health must not lie. A member whose apply path is stalled answers /health with
 * 503, because /health goes through the same queue as writes; it recovers when apply resumes. */
#include "kvt_proc.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int free_port(void)
{
    uint16_t port = 0;
    cr_assert_eq(kvt_port_free(&port), 0);
    return port;
}

/* GET path; returns the HTTP status or -1. body gets the response body. */
static int http_get(int port, const char *path, char *body, size_t cap)
{
    int status = -1;
    char *b = NULL;
    if (kvt_http_get((uint16_t)port, path, 15000, &status, &b) != 0)
        return -1;
    snprintf(body, cap, "%s", b);
    free(b);
    return status;
}

static double now_s(void)
{
    return (double)kvt_now_us() / 1e6;
}

Test(health, stalled_apply_makes_health_fail, .timeout = 90)
{
    const char *bd = getenv("KV_BUILD_DIR");
    cr_assert_not_null(bd, "KV_BUILD_DIR must point at the build tree");
    char kvd[512];
    snprintf(kvd, sizeof(kvd), "%s/server/kvd", bd);
    kvt_tmpdir tmp;
    cr_assert_eq(kvt_tmpdir_create(&tmp, "kvd-health"), 0);
    const char *dir = tmp.path;
    int cport = free_port(), pport = free_port(), mport = free_port();
    char curl[64], purl[64], murl[64];
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", cport);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", pport);
    snprintf(murl, sizeof(murl), "http://127.0.0.1:%d", mport);

    const char *argv[] = {kvd,  "--data-dir",          dir,  "--listen-client-urls",
                          curl, "--listen-peer-urls",  purl, "--listen-metrics-urls",
                          murl, "--enable-failpoints", NULL};
    kvt_proc proc;
    kvt_proc_init(&proc, NULL); /* output to /dev/null */
    cr_assert_eq(kvt_proc_spawn(&proc, argv), 0);
    pid_t pid = proc.pid;
    char body[1024];
    int status = -1;
    for (int i = 0; i < 100 && status != 200; i++) {
        usleep(100 * 1000);
        status = http_get(mport, "/health", body, sizeof(body));
    }
    cr_assert_eq(status, 200, "healthy member: %d", status);
    cr_assert(strstr(body, "\"health\":\"true\"") != NULL, "%s", body);

    kill(pid, SIGUSR1); /* stall the apply path */
    usleep(200 * 1000);
    double t0 = now_s();
    status = http_get(mport, "/health", body, sizeof(body));
    cr_assert_eq(status, 503, "stalled member must be unhealthy, got %d (%s)", status, body);
    cr_assert(strstr(body, "\"health\":\"false\"") != NULL, "%s", body);
    cr_log_info("stalled /health answered 503 after %.1f s: %s", now_s() - t0, body);

    /* /metrics bypasses the apply path and still answers: it is not a health signal. */
    cr_assert_eq(http_get(mport, "/metrics", body, sizeof(body)), 200);

    kill(pid, SIGUSR1); /* resume */
    usleep(200 * 1000);
    status = http_get(mport, "/health", body, sizeof(body));
    cr_assert_eq(status, 200, "resumed member is healthy again: %d", status);

    kill(pid, SIGTERM);
    cr_assert_eq(kvt_proc_wait(&proc, 30000), 0, "no exit within 30 s of SIGTERM");
    int ws = proc.last_status;
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "clean shutdown on SIGTERM");
    kvt_tmpdir_destroy(&tmp);
}
