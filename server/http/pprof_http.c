/* pprof_http: Go's /debug/pprof/ endpoints over server/prof (contract: pprof_http.h). */
#include "http/pprof_http.h"

#include "prof/prof.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PREFIX "/debug/pprof"
#define DEFAULT_SECONDS 30
#define MAX_SECONDS 86400
#define TEXT "text/plain; charset=utf-8"
#define CMDLINE_MAX (64u << 10)

/* A profile being taken; its timer is freed in its close callback. */
struct kv_pprof_req {
    kv_pprof_http *h; /* NULL once detached (cancelled, answered, or h freed) */
    kv_prof *prof;
    uv_timer_t timer;
    kv_pprof_reply_fn reply;
    void *ctx;
};

struct kv_pprof_http {
    uv_loop_t *loop;
    kv_pprof_req *running; /* at most one */
};

int kv_pprof_http_new(kv_pprof_http **out, uv_loop_t *loop)
{
    kv_pprof_http *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->loop = loop;
    *out = h;
    return 0;
}

static void req_closed(uv_handle_t *t)
{
    free(t->data);
}

/* Ends r: the profile (if still held) discarded, the timer closed, r freed after. */
static void req_end(kv_pprof_req *r)
{
    if (r->h && r->h->running == r)
        r->h->running = NULL;
    r->h = NULL;
    kv_prof_discard(r->prof);
    r->prof = NULL;
    uv_close((uv_handle_t *)&r->timer, req_closed);
}

void kv_pprof_http_free(kv_pprof_http *h)
{
    if (!h)
        return;
    if (h->running) /* left to its connection: its reply or its cancel ends it */
        h->running->h = NULL;
    free(h);
}

int kv_pprof_http_match(const char *path)
{
    size_t n = strlen(PREFIX);
    return strncmp(path, PREFIX, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

void kv_pprof_http_cancel(kv_pprof_req *r)
{
    if (r)
        req_end(r);
}

static void on_profile_done(uv_timer_t *t)
{
    kv_pprof_req *r = t->data;
    uint8_t *pb = NULL;
    size_t len = 0;
    kv_prof *p = r->prof;
    r->prof = NULL;
    int rc = kv_prof_stop(p, &pb, &len);
    kv_pprof_reply_fn reply = r->reply;
    void *ctx = r->ctx;
    req_end(r);
    static const char oom[] = "Could not encode the CPU profile: out of memory\n";
    if (rc != 0)
        reply(ctx, 500, TEXT, "", oom, sizeof(oom) - 1);
    else
        reply(ctx, 200, "application/octet-stream",
              "Content-Disposition: attachment; filename=\"profile\"\r\n"
              "X-Content-Type-Options: nosniff\r\n",
              (const char *)pb, len);
    free(pb);
}

/* The value of query parameter name in q ("a=1&b=2"), copied into v; 0 if absent. */
static int query_param(const char *q, const char *name, char *v, size_t cap)
{
    size_t n = strlen(name);
    while (q && *q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        if (len > n && strncmp(q, name, n) == 0 && q[n] == '=') {
            size_t vl = len - n - 1 < cap - 1 ? len - n - 1 : cap - 1;
            memcpy(v, q + n + 1, vl);
            v[vl] = '\0';
            return 1;
        }
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

static void serve_profile(kv_pprof_http *h, const char *query, kv_pprof_reply_fn reply, void *ctx,
                          kv_pprof_req **later)
{
    /* Go: seconds that do not parse, or are <= 0, mean 30 */
    char v[32];
    long long sec = DEFAULT_SECONDS;
    if (query_param(query, "seconds", v, sizeof(v))) {
        char *end;
        errno = 0;
        long long s = strtoll(v, &end, 10);
        if (errno == 0 && end != v && *end == '\0' && s > 0)
            sec = s;
    }
    if (sec > MAX_SECONDS) {
        static const char m[] = "profile duration exceeds kvd's limit of 86400 seconds\n";
        reply(ctx, 400, TEXT, "", m, sizeof(m) - 1);
        return;
    }
    static const char busy[] = "Could not enable CPU profiling: cpu profiling already in use\n";
    if (h->running) {
        reply(ctx, 500, TEXT, "", busy, sizeof(busy) - 1);
        return;
    }
    kv_pprof_req *r = calloc(1, sizeof(*r));
    if (!r) {
        static const char oom[] = "out of memory\n";
        reply(ctx, 500, TEXT, "", oom, sizeof(oom) - 1);
        return;
    }
    int rc = kv_prof_start(&r->prof, KV_PROF_DEFAULT_HZ, KV_PROF_DEFAULT_BUF_BYTES);
    if (rc != 0) {
        free(r);
        char m[128];
        int n = rc == -EBUSY
                    ? snprintf(m, sizeof(m), "%s", busy)
                    : snprintf(m, sizeof(m), "Could not enable CPU profiling: %s\n", strerror(-rc));
        reply(ctx, 500, TEXT, "", m, (size_t)n);
        return;
    }
    r->h = h;
    r->reply = reply;
    r->ctx = ctx;
    uv_timer_init(h->loop, &r->timer);
    r->timer.data = r;
    uv_timer_start(&r->timer, on_profile_done, (uint64_t)sec * 1000u, 0);
    h->running = r;
    *later = r;
}

static void serve_cmdline(kv_pprof_reply_fn reply, void *ctx)
{
    char *buf = malloc(CMDLINE_MAX);
    ssize_t n = -1;
    int fd = buf ? open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        n = read(fd, buf, CMDLINE_MAX);
        close(fd);
    }
    if (n < 0) {
        free(buf);
        static const char m[] = "cannot read the command line\n";
        reply(ctx, 500, TEXT, "", m, sizeof(m) - 1);
        return;
    }
    if (n > 0 && buf[n - 1] == '\0') /* Go joins os.Args with NUL: no trailing one */
        n--;
    reply(ctx, 200, TEXT, "X-Content-Type-Options: nosniff\r\n", buf, (size_t)n);
    free(buf);
}

static void serve_index(kv_pprof_reply_fn reply, void *ctx)
{
    static const char page[] =
        "<html>\n<head>\n<title>/debug/pprof/</title>\n</head>\n<body>\n/debug/pprof/<br>\n"
        "<br>\nTypes of profiles available:\n<table>\n<thead><td>Count</td><td>Profile</td>"
        "</thead>\n<tr><td></td><td><a href='cmdline'>cmdline</a></td></tr>\n"
        "<tr><td></td><td><a href='profile?seconds=30'>profile</a></td></tr>\n</table>\n"
        "<br>\n<p>profile: CPU profile, sampled at 100 Hz from the process's CPU time "
        "(seconds=N, default 30). cmdline: the command line, arguments separated by NUL "
        "bytes. kvd is a C program: Go's heap, allocs, goroutine, block, mutex, "
        "threadcreate and trace profiles do not exist here.</p>\n</body>\n</html>\n";
    reply(ctx, 200, "text/html; charset=utf-8", "", page, sizeof(page) - 1);
}

void kv_pprof_http_handle(kv_pprof_http *h, const char *path, const char *query,
                          kv_pprof_reply_fn reply, void *ctx, kv_pprof_req **later)
{
    *later = NULL;
    const char *name = path + strlen(PREFIX); /* precondition: kv_pprof_http_match(path) */
    size_t nlen = strlen(name);
    if (nlen > 0 && name[0] == '/') {
        name++;
        nlen--;
    }
    if (nlen == 0) {
        serve_index(reply, ctx);
    } else if (nlen == 7 && memcmp(name, "profile", 7) == 0) {
        serve_profile(h, query, reply, ctx, later);
    } else if (nlen == 7 && memcmp(name, "cmdline", 7) == 0) {
        serve_cmdline(reply, ctx);
    } else {
        static const char m[] = "Unknown profile\n"; /* Go's answer to a name it lacks */
        reply(ctx, 404, TEXT, "X-Content-Type-Options: nosniff\r\n", m, sizeof(m) - 1);
    }
}
