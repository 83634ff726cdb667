/* member_urls: etcd's types.NewURLs checks (see member_urls.h). */
#include "api/member_urls.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int scheme_ok(const char *s, size_t n)
{
    static const char *const ok[] = {"http", "https", "unix", "unixs"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (strlen(ok[i]) == n && strncmp(ok[i], s, n) == 0)
            return 1;
    return 0;
}

/* net.SplitHostPort: "host:port" or "[v6]:port"; the port may be empty; the host may not
 * contain a colon unless bracketed. */
static int host_port_ok(const char *h, size_t n)
{
    if (n == 0)
        return 0;
    if (h[0] == '[') {
        const char *close = memchr(h, ']', n);
        if (!close)
            return 0;
        size_t rest = n - (size_t)(close - h) - 1;
        if (rest == 0 || close[1] != ':')
            return 0;
        return memchr(close + 2, ':', rest - 1) == NULL &&
               memchr(close + 2, '[', rest - 1) == NULL && memchr(close + 2, ']', rest - 1) == NULL;
    }
    const char *colon = memchr(h, ':', n);
    if (!colon)
        return 0;
    size_t after = n - (size_t)(colon - h) - 1;
    return memchr(colon + 1, ':', after) == NULL && memchr(h, '[', n) == NULL &&
           memchr(h, ']', n) == NULL;
}

/* Checks one trimmed URL of length n. */
static int url_ok(const char *u, size_t n)
{
    const char *sep = NULL;
    for (size_t i = 0; i + 2 < n; i++)
        if (u[i] == ':' && u[i + 1] == '/' && u[i + 2] == '/') {
            sep = u + i;
            break;
        }
    if (!sep || !scheme_ok(u, (size_t)(sep - u)))
        return 0;
    const char *auth = sep + 3;
    size_t alen = 0;
    while (auth + alen < u + n && auth[alen] != '/' && auth[alen] != '?' && auth[alen] != '#')
        alen++;
    if (auth + alen < u + n && auth[alen] == '/')
        return 0;          /* "URL must not contain a path" */
    const char *at = NULL; /* userinfo@host:port */
    for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@')
            at = auth + i;
    if (at) {
        alen -= (size_t)(at + 1 - auth);
        auth = at + 1;
    }
    for (size_t i = 0; i < alen; i++)
        if (isspace((unsigned char)auth[i]) || iscntrl((unsigned char)auth[i]))
            return 0;
    return host_port_ok(auth, alen);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void kv_member_urls_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i]);
        v[i] = NULL;
    }
}

int kv_member_urls_parse(char *const *in, size_t n, char **out, size_t cap)
{
    if (n == 0 || !in)
        return -EINVAL; /* "no valid URLs given" */
    if (out && n > cap)
        return -E2BIG;
    for (size_t i = 0; i < n; i++) {
        const char *s = in[i];
        if (!s)
            return -EINVAL;
        while (isspace((unsigned char)*s))
            s++;
        size_t len = strlen(s);
        while (len && isspace((unsigned char)s[len - 1]))
            len--;
        if (!url_ok(s, len)) {
            if (out)
                kv_member_urls_free(out, i);
            return -EINVAL;
        }
        if (out && !(out[i] = strndup(s, len))) {
            kv_member_urls_free(out, i);
            return -ENOMEM;
        }
    }
    if (out)
        qsort(out, n, sizeof(*out), cmp_str);
    return 0;
}
