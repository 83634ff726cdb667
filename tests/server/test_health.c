/* Lesson 13: health must not lie. A member whose apply path is stalled answers /health with
 * 503, because /health goes through the same queue as writes; it recovers when apply resumes. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

/* GET path; returns the HTTP status or -1. body gets the response body. */
static int http_get(int port, const char *path, char *body, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {.tv_sec = 15};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    char req[256];
    int n =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    char buf[8192];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(buf) - 1 && (r = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    buf[got] = '\0';
    int status = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    const char *b = strstr(buf, "\r\n\r\n");
    snprintf(body, cap, "%s", b ? b + 4 : "");
    return status;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

Test(health, stalled_apply_makes_health_fail, .timeout = 90)
{
    const char *bd = getenv("KV_BUILD_DIR");
    cr_assert_not_null(bd, "KV_BUILD_DIR must point at the build tree");
    char kvd[512], dir[64] = "/tmp/kvd-health-XXXXXX";
    snprintf(kvd, sizeof(kvd), "%s/server/kvd", bd);
    cr_assert_not_null(mkdtemp(dir));
    int cport = free_port(), pport = free_port(), mport = free_port();
    char curl[64], purl[64], murl[64];
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", cport);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", pport);
    snprintf(murl, sizeof(murl), "http://127.0.0.1:%d", mport);

    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        execl(kvd, kvd, "--data-dir", dir, "--listen-client-urls", curl, "--listen-peer-urls", purl,
              "--listen-metrics-urls", murl, "--enable-failpoints", (char *)NULL);
        _exit(127);
    }
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
    int ws;
    waitpid(pid, &ws, 0);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "clean shutdown on SIGTERM");
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
