/* dns_srv: SRV lookups and etcd's discovery of client endpoints (see dns_srv.h); the
 * members' initial cluster is dns_srv_cluster.c. */
#include "common/dns_srv.h"
#include "common/dns_srv_int.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <ctype.h>
#include <errno.h>
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

struct eps {
    char **v;
    size_t n, cap;
};

static int by_priority_weight(const void *a, const void *b)
{
    const struct kv_srv_rec *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority < y->priority ? -1 : 1;
    return x->weight > y->weight ? -1 : x->weight < y->weight;
}

static int eps_add(struct eps *e, const char *scheme, const struct kv_srv_rec *r)
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

int kv_srv__lookup(const char *name, struct kv_srv_rec **recs_out, size_t *n_out, char *err,
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
    struct kv_srv_rec *recs = NULL;
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
        struct kv_srv_rec *r = &recs[n];
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
    struct kv_srv_rec *recs = NULL;
    size_t n = 0;
    int rc = kv_srv__lookup(name, &recs, &n, err, errlen);
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
