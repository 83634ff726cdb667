/* dns_srv_cluster: a member's initial cluster from SRV records, etcd's GetCluster (see
 * dns_srv.h kv_srv_cluster). */
#include "common/dns_srv.h"
#include "common/dns_srv_int.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
    struct kv_srv_rec *recs = NULL;
    size_t n = 0, added = 0;
    char lerr[NS_MAXDNAME + 160] = "";
    int rc = kv_srv__lookup(name, &recs, &n, lerr, sizeof lerr);
    if (rc == -ENOMEM)
        return rc;
    unsigned temp = 0;
    for (size_t i = 0; i < n; i++) {
        const struct kv_srv_rec *r = &recs[i];
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
