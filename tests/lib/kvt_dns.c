/*
 * kvt_dns: a DNS responder for tests of SRV discovery (etcd's --discovery-srv). It answers
 * SRV questions from its command line and "no such name" (NXDOMAIN) to everything else, over
 * UDP on <addr>:53, and writes a resolv.conf naming it. glibc's resolver talks to port 53
 * only, so a test puts that file over /etc/resolv.conf in a private mount namespace
 * (`unshare --mount`, as root) for the tool it runs; nothing else on the machine sees it.
 *
 *   kvt_dns --addr 127.53.X.Y --resolv-conf FILE --life SECONDS \
 *           --srv _etcd-client._tcp.kvt.test=m1.kvt.test:2379 [--srv ...] \
 *           --a m1.kvt.test=127.0.0.1 [--a ...]
 *
 * A name may repeat (several records); a known name asked for another type gets an empty
 * answer. The file is written once the socket is bound (wait for
 * it); the responder exits after --life seconds or on SIGTERM. Needs root (port 53).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MAX_RECS = 32, MSG_MAX = 1232 };

struct rec {
    unsigned type;    /* 33 SRV, 1 A */
    char name[256];   /* lower case, no trailing dot */
    char target[256]; /* SRV: the target name; A: the address */
    unsigned port;
};

struct responder {
    struct rec recs[MAX_RECS];
    size_t n;
};

static void lower_nodot(char *s)
{
    for (char *p = s; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    size_t l = strlen(s);
    if (l && s[l - 1] == '.')
        s[l - 1] = '\0';
}

/* Reads the question's name at q (labels) into out (dotted). Returns the bytes after it, or
 * NULL when malformed (compression in a question is not expected from glibc). */
static const uint8_t *read_name(const uint8_t *q, const uint8_t *end, char *out, size_t cap)
{
    size_t o = 0;
    while (q < end && *q) {
        unsigned l = *q++;
        if (l > 63 || q + l > end || o + l + 2 > cap)
            return NULL;
        if (o)
            out[o++] = '.';
        memcpy(out + o, q, l);
        o += l;
        q += l;
    }
    if (q >= end)
        return NULL;
    out[o] = '\0';
    return q + 1;
}

static size_t put_name(uint8_t *p, const char *name)
{
    size_t o = 0;
    const char *s = name;
    while (*s) {
        const char *dot = strchr(s, '.');
        size_t l = dot ? (size_t)(dot - s) : strlen(s);
        p[o++] = (uint8_t)l;
        memcpy(p + o, s, l);
        o += l;
        s += l;
        if (*s == '.')
            s++;
    }
    p[o++] = 0;
    return o;
}

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* Builds the answer to query q (len bytes) in a; returns its length, 0 to ignore it. */
static size_t answer(const struct responder *r, const uint8_t *q, size_t len, uint8_t *a)
{
    if (len < 12 || (q[2] & 0x80))
        return 0;
    char name[256];
    const uint8_t *p = read_name(q + 12, q + len, name, sizeof name);
    if (!p || p + 4 > q + len)
        return 0;
    unsigned qtype = (unsigned)(p[0] << 8 | p[1]);
    size_t qlen = (size_t)(p + 4 - q);
    memcpy(a, q, qlen);
    a[2] = (uint8_t)(0x84 | (q[2] & 0x01)); /* response, authoritative, RD copied */
    a[3] = 0x80;                            /* RA */
    put16(a + 4, 1);
    put16(a + 6, 0);
    put16(a + 8, 0);
    put16(a + 10, 0);
    lower_nodot(name);
    size_t o = qlen, an = 0;
    int known = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (strcmp(r->recs[i].name, name) != 0)
            continue;
        known = 1;
        if (qtype != r->recs[i].type || o + 12 + 6 + 258 > MSG_MAX)
            continue;
        put16(a + o, 0xc00c); /* the question's name */
        put16(a + o + 2, qtype);
        put16(a + o + 4, 1); /* IN */
        put16(a + o + 6, 0);
        put16(a + o + 8, 5); /* TTL 5 s */
        size_t rd = o + 12;
        if (qtype == 1) {
            put16(a + o + 10, 4);
            inet_pton(AF_INET, r->recs[i].target, a + rd);
            o = rd + 4;
            an++;
            continue;
        }
        put16(a + rd, 0);                   /* priority */
        put16(a + rd + 2, 0);               /* weight */
        put16(a + rd + 4, r->recs[i].port); /* port */
        size_t nl = put_name(a + rd + 6, r->recs[i].target);
        put16(a + o + 10, (unsigned)(6 + nl)); /* RDLENGTH */
        o = rd + 6 + nl;
        an++;
    }
    put16(a + 6, (unsigned)an);
    if (!known)
        a[3] |= 3; /* NXDOMAIN */
    return o;
}

static int usage(void)
{
    fprintf(stderr, "usage: kvt_dns --addr A --resolv-conf F --life S --srv NAME=TARGET:PORT... "
                    "--a NAME=IPV4...\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct responder r = {.n = 0};
    const char *addr = NULL, *conf = NULL;
    long life = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--addr") == 0) {
            addr = argv[i + 1];
        } else if (strcmp(argv[i], "--resolv-conf") == 0) {
            conf = argv[i + 1];
        } else if (strcmp(argv[i], "--life") == 0) {
            life = atol(argv[i + 1]);
        } else if ((strcmp(argv[i], "--srv") == 0 || strcmp(argv[i], "--a") == 0) &&
                   r.n < MAX_RECS) {
            struct rec *x = &r.recs[r.n];
            x->type = argv[i][2] == 's' ? 33 : 1;
            const char *eq = strchr(argv[i + 1], '=');
            const char *colon = x->type == 33 ? strrchr(argv[i + 1], ':') : NULL;
            if (!colon)
                colon = argv[i + 1] + strlen(argv[i + 1]);
            if (!eq || colon < eq || (size_t)(eq - argv[i + 1]) >= sizeof x->name ||
                (size_t)(colon - eq - 1) >= sizeof x->target)
                return usage();
            snprintf(x->name, sizeof x->name, "%.*s", (int)(eq - argv[i + 1]), argv[i + 1]);
            snprintf(x->target, sizeof x->target, "%.*s", (int)(colon - eq - 1), eq + 1);
            x->port = *colon ? (unsigned)atoi(colon + 1) : 0;
            lower_nodot(x->name);
            lower_nodot(x->target);
            r.n++;
        } else {
            return usage();
        }
    }
    if (!addr || !conf)
        return usage();
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
    if (fd < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        fprintf(stderr, "kvt_dns: bind %s:53: %s\n", addr, strerror(errno));
        return 1;
    }
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", conf);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "nameserver %s\noptions timeout:1 attempts:1\n", addr) < 0 ||
        fclose(f) != 0 || rename(tmp, conf) != 0) {
        fprintf(stderr, "kvt_dns: %s: %s\n", conf, strerror(errno));
        return 1;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = (life - (now.tv_sec - t0.tv_sec)) * 1000;
        if (left <= 0)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(left > 1000 ? 1000 : left)) <= 0)
            continue;
        uint8_t q[MSG_MAX], a[MSG_MAX];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
        if (n <= 0)
            continue;
        size_t al = answer(&r, q, (size_t)n, a);
        if (al)
            sendto(fd, a, al, 0, (struct sockaddr *)&from, fl);
    }
    close(fd);
    return 0;
}
