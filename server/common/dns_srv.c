/* dns_srv: etcd's SRV discovery of client endpoints (see dns_srv.h). */
#include "common/dns_srv.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <resolv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct srv_rec {
    char target[NS_MAXDNAME + 2]; /* with the trailing dot */
    unsigned port, priority, weight;
};

struct eps {
    char **v;
    size_t n, cap;
};

static int by_priority_weight(const void *a, const void *b)
{
    const struct srv_rec *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority < y->priority ? -1 : 1;
    return x->weight > y->weight ? -1 : x->weight < y->weight;
}

static int eps_add(struct eps *e, const char *scheme, const struct srv_rec *r)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 8;
        char **v = realloc(e->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        e->v = v;
        e->cap = cap;
    }
    size_t len = strlen(scheme) + strlen(r->target) + 16;
    char *s = malloc(len);
    if (!s)
        return -ENOMEM;
    snprintf(s, len, "%s://%s:%u", scheme, r->target, r->port);
    e->v[e->n++] = s;
    return 0;
}

/* "lookup <name> on <server>: <why>", as Go's DNSError. */
static void lookup_error(char *out, size_t cap, const char *name, const res_state st)
{
    char ns[INET6_ADDRSTRLEN + 8] = "the resolver";
    if (st->nscount > 0 && st->nsaddr_list[0].sin_family == AF_INET) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &st->nsaddr_list[0].sin_addr, a, sizeof a);
        snprintf(ns, sizeof ns, "%s:%u", a, ntohs(st->nsaddr_list[0].sin_port));
    }
    const char *why = st->res_h_errno == TRY_AGAIN ? "server misbehaving" : "no such host";
    snprintf(out, cap, "lookup %s on %s: %s", name, ns, why);
}

/* name's SRV records, ordered (by priority, then weight), into *recs (malloc'd, *n of them).
 * 0, -ENOENT (err filled: Go's "lookup <name> on <server>: no such host") or -ENOMEM. */
static int lookup_srv(const char *name, struct srv_rec **recs_out, size_t *n_out, char *err,
                      size_t errlen)
{
    struct __res_state st;
    memset(&st, 0, sizeof st);
    int rc = -ENOENT;
    *recs_out = NULL;
    *n_out = 0;
    if (res_ninit(&st) != 0) {
        snprintf(err, errlen, "lookup %s: the resolver could not be initialised", name);
        return -ENOENT;
    }
    enum { ANSWER_MAX = 65536 };
    unsigned char *ans = malloc(ANSWER_MAX);
    struct srv_rec *recs = NULL;
    if (!ans) {
        rc = -ENOMEM;
        goto out;
    }
    int len = res_nsearch(&st, name, ns_c_in, ns_t_srv, ans, ANSWER_MAX);
    ns_msg msg;
    if (len < 0 || ns_initparse(ans, len, &msg) < 0) {
        lookup_error(err, errlen, name, &st);
        goto out;
    }
    int count = ns_msg_count(msg, ns_s_an);
    recs = calloc(count > 0 ? (size_t)count : 1, sizeof *recs);
    if (!recs) {
        rc = -ENOMEM;
        goto out;
    }
    size_t n = 0;
    for (int i = 0; i < count; i++) {
        ns_rr rr;
        if (ns_parserr(&msg, ns_s_an, i, &rr) < 0 || ns_rr_type(rr) != ns_t_srv ||
            ns_rr_rdlen(rr) < 7)
            continue;
        const unsigned char *d = ns_rr_rdata(rr);
        struct srv_rec *r = &recs[n];
        r->priority = ns_get16(d);
        r->weight = ns_get16(d + 2);
        r->port = ns_get16(d + 4);
        if (dn_expand(ns_msg_base(msg), ns_msg_end(msg), d + 6, r->target, NS_MAXDNAME) < 0)
            continue;
        strcat(r->target, "."); /* Go's form: absolute, with the dot */
        n++;
    }
    if (n == 0) { /* the name exists without SRV records: Go's "no such host" too */
        st.res_h_errno = NO_DATA;
        lookup_error(err, errlen, name, &st);
        goto out;
    }
    qsort(recs, n, sizeof *recs, by_priority_weight);
    *recs_out = recs;
    *n_out = n;
    recs = NULL;
    rc = 0;
out:
    free(recs);
    free(ans);
    res_nclose(&st);
    return rc;
}

/* Appends the endpoints of name's SRV records to e. 0, -ENOENT (err filled) or -ENOMEM. */
static int lookup(const char *name, const char *scheme, struct eps *e, char *err, size_t errlen)
{
    struct srv_rec *recs = NULL;
    size_t n = 0;
    int rc = lookup_srv(name, &recs, &n, err, errlen);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = eps_add(e, scheme, &recs[i]);
    free(recs);
    return rc;
}

void kv_srv_endpoints_free(char **eps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(eps[i]);
    free(eps);
}

int kv_srv_client_endpoints(const char *domain, const char *service_name, char ***eps, size_t *n,
                            char *err, size_t errlen)
{
    const char *sfx = service_name && *service_name ? "-" : "";
    const char *sn = service_name ? service_name : "";
    char name[2][NS_MAXDNAME + 64], why[2][2 * NS_MAXDNAME + 256];
    snprintf(name[0], sizeof name[0], "_etcd-client-ssl%s%s._tcp.%s", sfx, sn, domain);
    snprintf(name[1], sizeof name[1], "_etcd-client%s%s._tcp.%s", sfx, sn, domain);
    static const char *const scheme[2] = {"https", "http"};
    struct eps e = {0};
    int rc[2];
    for (int i = 0; i < 2; i++) {
        why[i][0] = '\0';
        rc[i] = lookup(name[i], scheme[i], &e, why[i], sizeof why[i]);
        if (rc[i] == -ENOMEM) {
            kv_srv_endpoints_free(e.v, e.n);
            snprintf(err, errlen, "dns lookup: out of memory");
            return -ENOMEM;
        }
    }
    if (rc[0] && rc[1]) {
        kv_srv_endpoints_free(e.v, e.n);
        snprintf(err, errlen, "dns lookup errors: %s and %s", why[0], why[1]);
        return -ENOENT;
    }
    *eps = e.v;
    *n = e.n;
    return 0;
}

/* Connects to host:port (hp: "host:port" or "[v6]:port") within timeout_ms; 0 or an errno. */
static int dial(const char *hp, unsigned timeout_ms)
{
    char host[NS_MAXDNAME + 8];
    const char *colon = strrchr(hp, ':');
    if (!colon || (size_t)(colon - hp) >= sizeof host)
        return EINVAL;
    size_t hl = (size_t)(colon - hp);
    if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']')
        snprintf(host, sizeof host, "%.*s", (int)hl - 2, hp + 1);
    else
        snprintf(host, sizeof host, "%.*s", (int)hl, hp);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai)
        return EHOSTUNREACH;
    int e = ECONNREFUSED;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            e = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            e = 0;
        } else if (errno != EINPROGRESS) {
            e = errno;
        } else {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int r = poll(&p, 1, (int)timeout_ms);
            socklen_t sl = sizeof e;
            if (r <= 0)
                e = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0)
                e = errno;
        }
        close(fd);
        if (e == 0)
            break;
    }
    freeaddrinfo(ai);
    return e;
}

/* Appends text to the comma-separated list in why. */
static void why_add(char *why, size_t cap, const char *text)
{
    size_t o = strlen(why);
    if (o + 2 < cap)
        snprintf(why + o, cap - o, "%s%s", o ? "," : "", text);
}

size_t kv_srv_keep_secure(char **eps, size_t n, unsigned timeout_ms, char *why, size_t cap)
{
    size_t kept = 0;
    if (cap)
        why[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char text[2 * NS_MAXDNAME + 128];
        if (strncmp(eps[i], "https://", 8) != 0) {
            snprintf(text, sizeof text, "\"%s\" is insecure", eps[i]);
            why_add(why, cap, text);
            free(eps[i]);
            continue;
        }
        const char *hp = eps[i] + 8;
        int e = dial(hp, timeout_ms);
        if (e) {
            char msg[128]; /* Go spells errnos in lower case */
            snprintf(msg, sizeof msg, "%s", strerror(e));
            msg[0] = (char)tolower((unsigned char)msg[0]);
            snprintf(text, sizeof text, "\"%s\" failed to dial (dial tcp %s: connect: %s)", eps[i],
                     hp, msg);
            why_add(why, cap, text);
            free(eps[i]);
            continue;
        }
        eps[kept++] = eps[i];
    }
    return kept;
}

/* host:port's first address as "ip:port" (Go's ResolveTCPAddr: IPv4 first). 0 or -ENOENT. */
static int resolve_tcp(const char *host, unsigned port, char *out, size_t cap)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%u", port);
    static const int families[] = {AF_INET, AF_INET6};
    for (size_t f = 0; f < 2; f++) {
        struct addrinfo hints = {.ai_family = families[f], .ai_socktype = SOCK_STREAM}, *ai;
        if (getaddrinfo(host, ps, &hints, &ai) != 0 || !ai)
            continue;
        char ip[INET6_ADDRSTRLEN] = "";
        const void *a = ai->ai_family == AF_INET
                            ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                            : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
        inet_ntop(ai->ai_family, a, ip, sizeof ip);
        snprintf(out, cap, ai->ai_family == AF_INET ? "%s:%u" : "[%s]:%u", ip, port);
        freeaddrinfo(ai);
        return 0;
    }
    return -ENOENT;
}

struct cluster_buf {
    char *s;
    size_t len, cap;
};

static int cluster_add(struct cluster_buf *b, const char *name, const char *scheme,
                       const char *host, size_t host_len, unsigned port)
{
    size_t need = strlen(name) + strlen(scheme) + host_len + 32;
    if (b->len + need > b->cap) {
        size_t cap = (b->cap + need) * 2;
        char *s = realloc(b->s, cap);
        if (!s)
            return -ENOMEM;
        b->s = s;
        b->cap = cap;
    }
    b->len += (size_t)snprintf(b->s + b->len, b->cap - b->len, "%s%s=%s://%.*s:%u",
                               b->len ? "," : "", name, scheme, (int)host_len, host, port);
    return 0;
}

/* etcd's GetCluster for one service: appends its members to b. 0, -ENOENT (why filled) or
 * -ENOMEM. */
static int get_cluster(const char *scheme, const char *service, const char *domain,
                       const char *self_name, char (*self_addr)[INET6_ADDRSTRLEN + 8],
                       const kv_srv_self *self, size_t n_self, struct cluster_buf *b, char *why,
                       size_t cap)
{
    char name[NS_MAXDNAME + 64];
    snprintf(name, sizeof name, "_%s._tcp.%s", service, domain);
    struct srv_rec *recs = NULL;
    size_t n = 0, added = 0;
    char lerr[NS_MAXDNAME + 160] = "";
    int rc = lookup_srv(name, &recs, &n, lerr, sizeof lerr);
    if (rc == -ENOMEM)
        return rc;
    unsigned temp = 0;
    for (size_t i = 0; i < n; i++) {
        const struct srv_rec *r = &recs[i];
        char addr[INET6_ADDRSTRLEN + 8];
        if (resolve_tcp(r->target, r->port, addr, sizeof addr) < 0) {
            snprintf(lerr, sizeof lerr, "lookup %.*s: no such host", (int)strlen(r->target) - 1,
                     r->target);
            continue;
        }
        const kv_srv_self *me = NULL;
        for (size_t k = 0; k < n_self && !me; k++)
            if (strcmp(self_addr[k], addr) == 0)
                me = &self[k];
        char tmp[16];
        const char *nm = self_name;
        if (!me) {
            snprintf(tmp, sizeof tmp, "%u", temp++);
            nm = tmp;
        }
        size_t hl = strlen(r->target) - 1; /* without the trailing dot */
        if (me && me->tls != (strcmp(scheme, "https") == 0)) {
            snprintf(lerr, sizeof lerr,
                     "bootstrap at %s://%.*s:%u from DNS for %s has scheme mismatch with "
                     "expected peer %s://%s:%u",
                     scheme, (int)hl, r->target, r->port, service, me->tls ? "https" : "http",
                     me->host, me->port);
            continue;
        }
        if ((rc = cluster_add(b, nm, scheme, r->target, hl, r->port)) < 0)
            break;
        added++;
    }
    free(recs);
    if (rc == -ENOMEM)
        return rc;
    if (added == 0) {
        snprintf(why, cap, "error querying DNS SRV records for _%s %s", service, lerr);
        return -ENOENT;
    }
    return 0;
}

int kv_srv_cluster(const char *domain, const char *service_name, const char *self_name,
                   const kv_srv_self *self, size_t n_self, char **out, char *err, size_t errlen)
{
    char(*self_addr)[INET6_ADDRSTRLEN + 8] = calloc(n_self ? n_self : 1, sizeof *self_addr);
    if (!self_addr) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (size_t k = 0; k < n_self; k++)
        if (resolve_tcp(self[k].host, self[k].port, self_addr[k], sizeof self_addr[k]) < 0) {
            snprintf(err, errlen, "lookup %s: no such host", self[k].host);
            free(self_addr);
            return -ENOENT;
        }
    const char *sfx = service_name && *service_name ? "-" : "";
    const char *sn = service_name ? service_name : "";
    char svc[2][128], why[2][2 * NS_MAXDNAME + 512];
    snprintf(svc[0], sizeof svc[0], "etcd-server-ssl%s%s", sfx, sn);
    snprintf(svc[1], sizeof svc[1], "etcd-server%s%s", sfx, sn);
    static const char *const scheme[2] = {"https", "http"};
    struct cluster_buf b = {0};
    int rc[2];
    for (int i = 0; i < 2; i++) {
        why[i][0] = '\0';
        rc[i] = get_cluster(scheme[i], svc[i], domain, self_name, self_addr, self, n_self, &b,
                            why[i], sizeof why[i]);
        if (rc[i] == -ENOMEM) {
            free(b.s);
            free(self_addr);
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
    }
    free(self_addr);
    if (rc[0] && rc[1]) {
        free(b.s);
        snprintf(err, errlen, "%s; %s", why[0], why[1]);
        return -ENOENT;
    }
    *out = b.s;
    return 0;
}
