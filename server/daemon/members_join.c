/* members_join: a joining member's id from its peers' member list (see members_join.h). */
#include "daemon/members_join.h"
#include "common/clock.h"

#include "daemon/initial_cluster.h"

#include "mvcc/members.h"
#include "net/tls.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- a growable string ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_json_str(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            sb_put(b, esc, 2);
        } else if (ch < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)&ch, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void sb_json_strs(sbuf *b, char *const *v, size_t n)
{
    sb_put(b, "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i)
            sb_put(b, ",", 1);
        sb_json_str(b, v[i]);
    }
    sb_put(b, "]", 1);
}

int kv_members_json(const Kvdpb__Member *const *m, size_t n, char **out, size_t *len)
{
    sbuf b = {0};
    sb_put(&b, "[", 1);
    for (size_t i = 0; i < n; i++) {
        char num[32];
        snprintf(num, sizeof(num), "%llu", (unsigned long long)m[i]->id);
        sb_str(&b, i ? ",{\"id\":" : "{\"id\":");
        sb_str(&b, num);
        sb_str(&b, ",\"peerURLs\":");
        sb_json_strs(&b, m[i]->peer_urls, m[i]->n_peer_urls);
        if (m[i]->name && m[i]->name[0]) {
            sb_str(&b, ",\"name\":");
            sb_json_str(&b, m[i]->name);
        }
        if (m[i]->n_client_urls) {
            sb_str(&b, ",\"clientURLs\":");
            sb_json_strs(&b, m[i]->client_urls, m[i]->n_client_urls);
        }
        if (m[i]->is_learner)
            sb_str(&b, ",\"isLearner\":true");
        sb_put(&b, "}", 1);
    }
    sb_put(&b, "]\n", 2); /* Go's json.Encoder ends with a newline */
    if (b.oom) {
        free(b.p);
        return -ENOMEM;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

/* ---- a small JSON reader for that list ---- */

typedef struct jr {
    const char *p, *end;
    int depth;
} jr;

static void ws(jr *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int lit(jr *r, char c)
{
    ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return 1;
    }
    return 0;
}

/* A JSON string into a malloc'd *out (NULL: skipped). \uXXXX escapes keep only ASCII. */
static int jstr(jr *r, char **out)
{
    ws(r);
    if (r->p >= r->end || *r->p != '"')
        return -EINVAL;
    r->p++;
    sbuf b = {0};
    while (r->p < r->end && *r->p != '"') {
        char ch = *r->p++;
        if (ch == '\\') {
            if (r->p >= r->end)
                break;
            char e = *r->p++;
            switch (e) {
            case 'n':
                ch = '\n';
                break;
            case 't':
                ch = '\t';
                break;
            case 'r':
                ch = '\r';
                break;
            case 'b':
                ch = '\b';
                break;
            case 'f':
                ch = '\f';
                break;
            case 'u': {
                if (r->end - r->p < 4)
                    goto bad;
                char hex[5] = {r->p[0], r->p[1], r->p[2], r->p[3], 0};
                r->p += 4;
                unsigned long v = strtoul(hex, NULL, 16);
                ch = v < 0x80 ? (char)v : '?';
                break;
            }
            default:
                ch = e;
                break;
            }
        }
        if (out)
            sb_put(&b, &ch, 1);
        if (b.len > KV_MEMBER_MAX_STR)
            goto bad;
    }
    if (r->p >= r->end)
        goto bad;
    r->p++;
    if (out) {
        if (b.oom || !b.p) {
            sb_put(&b, "", 0);
            if (b.oom || !b.p) {
                free(b.p);
                return -ENOMEM;
            }
        }
        *out = b.p;
    }
    return 0;
bad:
    free(b.p);
    return -EINVAL;
}

static int skip_value(jr *r)
{
    ws(r);
    if (r->p >= r->end || ++r->depth > 32)
        return -EINVAL;
    int rc = 0;
    char c = *r->p;
    if (c == '"') {
        rc = jstr(r, NULL);
    } else if (c == '[' || c == '{') {
        char close = c == '[' ? ']' : '}';
        r->p++;
        if (!lit(r, close)) {
            do {
                if (c == '{' && (jstr(r, NULL) != 0 || !lit(r, ':')))
                    return -EINVAL;
                if ((rc = skip_value(r)) != 0)
                    return rc;
            } while (lit(r, ','));
            if (!lit(r, close))
                return -EINVAL;
        }
    } else {
        const char *s = r->p;
        while (r->p < r->end && strchr("+-.0123456789eEtruefalsn", *r->p))
            r->p++;
        if (r->p == s)
            return -EINVAL;
    }
    r->depth--;
    return rc;
}

static int jstrs(jr *r, char ***v, size_t *n)
{
    if (!lit(r, '['))
        return -EINVAL;
    if (lit(r, ']'))
        return 0;
    do {
        if (*n >= KV_MEMBER_MAX_URLS)
            return -EINVAL;
        if (!*v && !(*v = calloc(KV_MEMBER_MAX_URLS, sizeof(char *))))
            return -ENOMEM;
        int rc = jstr(r, &(*v)[*n]);
        if (rc)
            return rc;
        (*n)++;
    } while (lit(r, ','));
    return lit(r, ']') ? 0 : -EINVAL;
}

static int jmember(jr *r, Kvdpb__Member *m)
{
    if (!lit(r, '{'))
        return -EINVAL;
    if (lit(r, '}'))
        return 0;
    do {
        char *key = NULL;
        int rc = jstr(r, &key);
        if (rc)
            return rc;
        if (!lit(r, ':')) {
            free(key);
            return -EINVAL;
        }
        ws(r);
        if (strcmp(key, "id") == 0) {
            char *e;
            errno = 0;
            unsigned long long v = strtoull(r->p, &e, 10);
            if (e == r->p || errno || e > r->end || (*r->p < '0' || *r->p > '9'))
                rc = -EINVAL;
            m->id = v;
            r->p = e;
        } else if (strcmp(key, "peerURLs") == 0) {
            rc = jstrs(r, &m->peer_urls, &m->n_peer_urls);
        } else if (strcmp(key, "clientURLs") == 0) {
            rc = jstrs(r, &m->client_urls, &m->n_client_urls);
        } else if (strcmp(key, "name") == 0) {
            free(m->name == protobuf_c_empty_string ? NULL : m->name);
            m->name = NULL;
            rc = jstr(r, &m->name);
            if (rc)
                m->name = (char *)protobuf_c_empty_string;
        } else if (strcmp(key, "isLearner") == 0) {
            m->is_learner = r->end - r->p >= 4 && memcmp(r->p, "true", 4) == 0;
            rc = skip_value(r);
        } else {
            rc = skip_value(r);
        }
        free(key);
        if (rc)
            return rc;
    } while (lit(r, ','));
    return lit(r, '}') ? 0 : -EINVAL;
}

int kv_members_parse_json(const char *json, size_t len, Kvdpb__Member ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    jr r = {.p = json, .end = json + len};
    Kvdpb__Member **v = calloc(KV_MEMBERS_MAX, sizeof(*v));
    if (!v)
        return -ENOMEM;
    size_t cnt = 0;
    int rc = lit(&r, '[') ? 0 : -EINVAL;
    if (rc == 0 && !lit(&r, ']')) {
        do {
            if (cnt >= KV_MEMBERS_MAX) {
                rc = -EINVAL;
                break;
            }
            Kvdpb__Member *m = calloc(1, sizeof(*m));
            if (!m) {
                rc = -ENOMEM;
                break;
            }
            kvdpb__member__init(m);
            v[cnt++] = m;
            if ((rc = jmember(&r, m)) != 0)
                break;
            if (m->id == 0 || m->n_peer_urls == 0) {
                rc = -EINVAL;
                break;
            }
        } while (lit(&r, ','));
        if (rc == 0 && !lit(&r, ']'))
            rc = -EINVAL;
    }
    if (rc) {
        kv_store_members_free(v, cnt);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const Kvdpb__Member *kv_members_match_urls(Kvdpb__Member *const *m, size_t n,
                                           const char *const *urls, size_t n_urls)
{
    const char *want[KV_MEMBER_MAX_URLS], *have[KV_MEMBER_MAX_URLS];
    if (n_urls == 0 || n_urls > KV_MEMBER_MAX_URLS)
        return NULL;
    memcpy(want, urls, n_urls * sizeof(*want));
    qsort(want, n_urls, sizeof(*want), cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (m[i]->n_peer_urls != n_urls)
            continue;
        memcpy(have, m[i]->peer_urls, n_urls * sizeof(*have));
        qsort(have, n_urls, sizeof(*have), cmp_str);
        size_t k = 0;
        while (k < n_urls && strcmp(want[k], have[k]) == 0)
            k++;
        if (k == n_urls)
            return m[i];
    }
    return NULL;
}

/* ---- one blocking GET /members ---- */

static uint64_t now_ms(void)
{
    return kv_mono_ms();
}

static int wait_fd(int fd, short ev, uint64_t deadline)
{
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = ev};
        int k = poll(&p, 1, (int)(deadline - now));
        if (k > 0)
            return 0;
        if (k == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static int send_all(int fd, const uint8_t *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -errno;
        int rc = wait_fd(fd, POLLOUT, deadline);
        if (rc)
            return rc;
    }
    return 0;
}

static int dial(const kv_url *u, uint64_t deadline)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", u->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(u->host, port, &hints, &ai);
    if (g != 0)
        return g == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
    int rc = -ECONNREFUSED;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
            rc = wait_fd(fd, POLLOUT, deadline);
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
                rc = -soerr;
            if (rc == 0) {
                freeaddrinfo(ai);
                return fd;
            }
        } else {
            rc = -errno;
        }
        close(fd);
    }
    freeaddrinfo(ai);
    return rc;
}

static int on_plain(void *arg, const uint8_t *p, size_t n)
{
    sbuf *b = arg;
    if (b->len + n > KV_MEMBERS_JOIN_MAX_BYTES)
        return -EFBIG;
    sb_put(b, (const char *)p, n);
    return b->oom ? -ENOMEM : 0;
}

/* GET u/members into *resp (status line, headers, body). why: a reason on failure. */
static int http_get(const kv_url *u, kv_tls_ctx *tls_ctx, sbuf *resp, char *why, size_t wl)
{
    uint64_t deadline = now_ms() + KV_MEMBERS_JOIN_TIMEOUT_MS;
    kv_tls_conn *t = NULL;
    int rc, fd = dial(u, deadline);
    if (fd < 0) {
        snprintf(why, wl, "%s", strerror(-fd));
        return fd;
    }
    char req[512];
    int rl = snprintf(req, sizeof(req),
                      "GET /members HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: kvd\r\n"
                      "Accept: application/json\r\nConnection: close\r\n\r\n",
                      u->host, u->port);
    int sent = 0;
    if (u->tls) {
        if (!tls_ctx) {
            snprintf(why, wl, "no peer TLS configuration for an https peer URL");
            rc = -EINVAL;
            goto out;
        }
        if ((rc = kv_tls_conn_new(tls_ctx, u->text, u->host, &t)) < 0 ||
            (rc = kv_tls_conn_start(t)) < 0) {
            snprintf(why, wl, "TLS: %s",
                     t && kv_tls_conn_error(t)[0] ? kv_tls_conn_error(t) : strerror(-rc));
            goto out;
        }
    }
    for (;;) {
        if (!sent && (!t || kv_tls_conn_established(t))) {
            rc = t ? kv_tls_conn_write(t, (const uint8_t *)req, (size_t)rl)
                   : send_all(fd, (const uint8_t *)req, (size_t)rl, deadline);
            if (rc < 0) {
                snprintf(why, wl, "sending the request: %s", strerror(-rc));
                goto out;
            }
            sent = 1;
        }
        while (t && kv_tls_conn_out_pending(t)) {
            uint8_t ob[16384];
            size_t k = kv_tls_conn_out_read(t, ob, sizeof(ob));
            if ((rc = send_all(fd, ob, k, deadline)) < 0) {
                snprintf(why, wl, "sending: %s", strerror(-rc));
                goto out;
            }
        }
        if ((rc = wait_fd(fd, POLLIN, deadline)) < 0) {
            snprintf(why, wl, "%s", rc == -ETIMEDOUT ? "no answer in time (10 s)" : strerror(-rc));
            goto out;
        }
        uint8_t ib[16384];
        ssize_t k = recv(fd, ib, sizeof(ib), MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (k < 0) {
            rc = -errno;
            snprintf(why, wl, "%s", strerror(errno));
            goto out;
        }
        if (k == 0)
            break; /* Connection: close: the answer ends at EOF */
        rc = t ? kv_tls_conn_recv(t, ib, (size_t)k, on_plain, resp) : on_plain(resp, ib, (size_t)k);
        if (rc < 0) {
            snprintf(why, wl, "%s",
                     rc == -EFBIG                   ? "answer too large"
                     : t && kv_tls_conn_error(t)[0] ? kv_tls_conn_error(t)
                                                    : strerror(-rc));
            goto out;
        }
    }
    rc = sent && resp->len ? 0 : -ECONNRESET;
    if (rc)
        snprintf(why, wl, "connection closed without an answer");
out:
    kv_tls_conn_free(t);
    close(fd);
    return rc;
}

/* Status, X-Etcd-Cluster-ID and body of an HTTP/1.1 answer (Content-Length honoured). */
static int parse_answer(sbuf *resp, const char **body, size_t *blen, char *why, size_t wl)
{
    char *p = resp->p;
    char *hend = strstr(p, "\r\n\r\n");
    int status = 0;
    if (!hend || sscanf(p, "HTTP/1.%*d %d", &status) != 1) {
        snprintf(why, wl, "not an HTTP/1.1 answer");
        return -EPROTO;
    }
    *hend = 0;
    *body = hend + 4;
    *blen = resp->len - (size_t)(hend + 4 - p);
    for (char *h = strstr(p, "\r\n"); h; h = strstr(h + 2, "\r\n"))
        if (strncasecmp(h + 2, "Content-Length:", 15) == 0) {
            unsigned long long cl = strtoull(h + 17, NULL, 10);
            if (cl < *blen)
                *blen = (size_t)cl;
        }
    if (status != 200) {
        snprintf(why, wl, "answered %d: %.100s", status, *body);
        for (char *c = why; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
        return -EPROTO;
    }
    return 0;
}

/* this member's peer URLs: --initial-advertise-peer-urls, else its --initial-cluster entries */
static size_t own_urls(const kv_config *cfg, const char **urls)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_advertise_peer && n < KV_MEMBER_MAX_URLS; i++)
        urls[n++] = cfg->advertise_peer[i].text;
    if (n == 0)
        n = kv_initial_cluster_urls(cfg, cfg->name, urls, KV_MEMBER_MAX_URLS);
    return n;
}

static void adopt(const kv_config *cfg, Kvdpb__Member *const *m, size_t n, kv_identity *id)
{
    /* identity.c's order: one entry per --initial-cluster name, in first-seen order */
    size_t k = 0;
    for (size_t i = 0; i < cfg->n_initial_cluster && k < id->n_members; i++) {
        if (!kv_initial_cluster_first(cfg, i))
            continue;
        const char *name = cfg->initial_cluster[i].name;
        const char *urls[KV_MEMBER_MAX_URLS];
        size_t nu = kv_initial_cluster_urls(cfg, name, urls, KV_MEMBER_MAX_URLS);
        const Kvdpb__Member *f = kv_members_match_urls(m, n, urls, nu);
        if (f && strcmp(name, cfg->name) != 0)
            id->member_ids[k] = f->id;
        k++;
    }
}

int kv_members_join_lookup(const kv_config *cfg, kv_tls_ctx *tls_client, kv_identity *id, char *err,
                           size_t errlen)
{
    sbuf tried = {0}, why_all = {0};
    int rc = -EHOSTUNREACH;
    const char *mine[KV_MEMBER_MAX_URLS];
    size_t n_mine = own_urls(cfg, mine);
    for (size_t i = 0; i < cfg->n_initial_cluster; i++) {
        const kv_peer *p = &cfg->initial_cluster[i];
        if (strcmp(p->name, cfg->name) == 0)
            continue;
        sb_str(&tried, tried.len ? ", " : "");
        sb_str(&tried, p->url.text);
        sbuf resp = {0};
        char why[256] = "";
        const char *body = NULL;
        size_t blen = 0;
        Kvdpb__Member **m = NULL;
        size_t nm = 0;
        int r = http_get(&p->url, tls_client, &resp, why, sizeof(why));
        if (r == 0 && resp.oom)
            r = -ENOMEM;
        if (r == 0)
            r = parse_answer(&resp, &body, &blen, why, sizeof(why));
        if (r == 0 && (r = kv_members_parse_json(body, blen, &m, &nm)) != 0)
            snprintf(why, sizeof(why), "not a member list (%s)", strerror(-r));
        if (r == 0) {
            const Kvdpb__Member *me = kv_members_match_urls(m, nm, mine, n_mine);
            if (me) {
                uint64_t old = id->member_id;
                for (size_t k = 0; k < id->n_members; k++)
                    if (id->member_ids[k] == old)
                        id->member_ids[k] = me->id;
                id->member_id = me->id;
                adopt(cfg, m, nm, id);
                rc = 0;
            } else {
                sbuf u = {0};
                for (size_t k = 0; k < n_mine; k++) {
                    sb_str(&u, k ? "," : "");
                    sb_str(&u, mine[k]);
                }
                snprintf(err, errlen,
                         "this member's peer URLs %s are not in the cluster's member list: run "
                         "`member add` first (the list of %s)",
                         u.p ? u.p : "(none)", p->url.text);
                free(u.p);
                rc = -ENOENT;
            }
            kv_store_members_free(m, nm);
            free(resp.p);
            break;
        }
        sb_str(&why_all, why_all.len ? "; " : "");
        sb_str(&why_all, p->url.text);
        sb_str(&why_all, ": ");
        sb_str(&why_all, why[0] ? why : strerror(-r));
        free(resp.p);
    }
    if (rc == -EHOSTUNREACH)
        snprintf(err, errlen, "could not fetch the cluster's member list from any of %s: %s",
                 tried.p ? tried.p : "(no other member in --initial-cluster)",
                 why_all.p ? why_all.p : "no peer to ask");
    free(tried.p);
    free(why_all.p);
    return rc;
}
