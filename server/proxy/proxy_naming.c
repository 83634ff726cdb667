/*
 * proxy_naming.c - etcd's naming.Update record, written and read (contract in
 * proxy_naming.h). A small JSON reader: strings (with \u escapes and surrogate pairs), and
 * any other value skipped after a syntax check, nesting bounded.
 */
#include "proxy/proxy_naming.h"
#include "common/hex.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_DEPTH 64

typedef struct buf {
    char *d;
    size_t n, cap;
} buf;

static int put(buf *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *d = realloc(b->d, cap);
        if (!d)
            return -ENOMEM;
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, s, n);
    b->n += n;
    b->d[b->n] = 0;
    return 0;
}

static int puts_(buf *b, const char *s)
{
    return put(b, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s (n bytes left) and its code point, 0 if invalid. */
static size_t utf8_len(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    size_t l;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        l = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        l = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        l = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < l)
        return 0;
    for (size_t i = 1; i < l; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return l;
}

/* A JSON string as Go's encoding/json writes it (escapeHTML on, Go 1.19). */
static int quote(buf *b, const char *str)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *s = (const uint8_t *)str;
    size_t n = strlen(str);
    int rc = put(b, "\"", 1);
    for (size_t i = 0; i < n && rc == 0;) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (c == '"' || c == '\\') {
                char e[2] = {'\\', (char)c};
                rc = put(b, e, 2);
            } else if (c == '\n') {
                rc = puts_(b, "\\n");
            } else if (c == '\r') {
                rc = puts_(b, "\\r");
            } else if (c == '\t') {
                rc = puts_(b, "\\t");
            } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
                char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                rc = put(b, e, 6);
            } else {
                rc = put(b, &c, 1);
            }
            i++;
            continue;
        }
        uint32_t cp;
        size_t l = utf8_len(s + i, n - i, &cp);
        if (l == 0) {
            rc = puts_(b, "\\ufffd");
            i++;
        } else if (cp == 0x2028 || cp == 0x2029) {
            rc = puts_(b, cp == 0x2028 ? "\\u2028" : "\\u2029");
            i += l;
        } else {
            rc = put(b, s + i, l);
            i += l;
        }
    }
    return rc ? rc : put(b, "\"", 1);
}

int kv_proxy_naming_encode(const char *addr, const char *hostname, char **out, size_t *len)
{
    buf meta = {0}, b = {0};
    int rc = puts_(&meta, "{\"name\":");
    if (!rc)
        rc = quote(&meta, hostname);
    if (!rc)
        rc = puts_(&meta, "}");
    if (!rc)
        rc = puts_(&b, "{\"Op\":0,\"Addr\":");
    if (!rc)
        rc = quote(&b, addr);
    if (!rc)
        rc = puts_(&b, ",\"Metadata\":");
    if (!rc)
        rc = quote(&b, meta.d);
    if (!rc)
        rc = puts_(&b, "}");
    free(meta.d);
    if (rc) {
        free(b.d);
        return rc;
    }
    *out = b.d;
    *len = b.n;
    return 0;
}

/* ---- reading ---- */

typedef struct rd {
    const uint8_t *s, *e;
} rd;

static void ws(rd *r)
{
    while (r->s < r->e && (*r->s == ' ' || *r->s == '\t' || *r->s == '\n' || *r->s == '\r'))
        r->s++;
}

static int hex4(rd *r, uint32_t *v)
{
    if (r->e - r->s < 4 || kv_hex4((const char *)r->s, v) < 0)
        return -EINVAL;
    r->s += 4;
    return 0;
}

static int put_cp(buf *b, uint32_t cp)
{
    uint8_t u[4];
    size_t l;
    if (cp < 0x80) {
        u[0] = (uint8_t)cp, l = 1;
    } else if (cp < 0x800) {
        u[0] = (uint8_t)(0xc0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3f)), l = 2;
    } else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xe0 | cp >> 12), u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (uint8_t)(0x80 | (cp & 0x3f)), l = 3;
    } else {
        u[0] = (uint8_t)(0xf0 | cp >> 18), u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (uint8_t)(0x80 | (cp & 0x3f)), l = 4;
    }
    return put(b, u, l);
}

/* A string at r->s ('"'); decoded into out when out is non-NULL (invalid UTF-8 and lone
 * surrogates become U+FFFD, as Go). */
static int str(rd *r, buf *out)
{
    if (r->s >= r->e || *r->s != '"')
        return -EINVAL;
    r->s++;
    buf tmp = {0};
    buf *b = out ? out : &tmp;
    int rc = put(b, "", 0);
    while (rc == 0) {
        if (r->s >= r->e) {
            rc = -EINVAL;
            break;
        }
        uint8_t c = *r->s;
        if (c == '"') {
            r->s++;
            break;
        }
        if (c < 0x20) {
            rc = -EINVAL;
        } else if (c == '\\') {
            r->s++;
            if (r->s >= r->e) {
                rc = -EINVAL;
                break;
            }
            char e = (char)*r->s++;
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *k = e ? strchr(from, e) : NULL;
            if (k) {
                rc = put(b, to + (k - from), 1);
            } else if (e == 'u') {
                uint32_t v, lo;
                rc = hex4(r, &v);
                if (rc == 0 && v >= 0xd800 && v < 0xdc00 && r->e - r->s >= 6 && r->s[0] == '\\' &&
                    r->s[1] == 'u') {
                    rd save = *r;
                    r->s += 2;
                    if (hex4(r, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000)
                        v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
                    else
                        *r = save;
                }
                if (rc == 0)
                    rc = put_cp(b, v >= 0xd800 && v < 0xe000 ? 0xfffd : v);
            } else {
                rc = -EINVAL;
            }
        } else {
            uint32_t cp;
            size_t l = utf8_len(r->s, (size_t)(r->e - r->s), &cp);
            if (l == 0) {
                rc = put_cp(b, 0xfffd);
                r->s++;
            } else {
                rc = put(b, r->s, l);
                r->s += l;
            }
        }
    }
    free(tmp.d);
    return rc;
}

static int lit(rd *r, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(r->e - r->s) < n || memcmp(r->s, w, n) != 0)
        return -EINVAL;
    r->s += n;
    return 0;
}

/* A JSON number; *is_u8 is set when it is an integer 0..255 (an Operation). */
static int num(rd *r, int *is_u8)
{
    const uint8_t *b = r->s;
    int frac = 0, neg = 0;
    if (r->s < r->e && *r->s == '-')
        r->s++, neg = 1;
    if (r->s >= r->e || *r->s < '0' || *r->s > '9')
        return -EINVAL;
    if (*r->s == '0')
        r->s++;
    else
        while (r->s < r->e && *r->s >= '0' && *r->s <= '9')
            r->s++;
    if (r->s < r->e && *r->s == '.') {
        frac = 1;
        r->s++;
        if (r->s >= r->e || *r->s < '0' || *r->s > '9')
            return -EINVAL;
        while (r->s < r->e && *r->s >= '0' && *r->s <= '9')
            r->s++;
    }
    if (r->s < r->e && (*r->s == 'e' || *r->s == 'E')) {
        frac = 1;
        r->s++;
        if (r->s < r->e && (*r->s == '+' || *r->s == '-'))
            r->s++;
        if (r->s >= r->e || *r->s < '0' || *r->s > '9')
            return -EINVAL;
        while (r->s < r->e && *r->s >= '0' && *r->s <= '9')
            r->s++;
    }
    if (is_u8) {
        size_t l = (size_t)(r->s - b);
        long v = 0;
        for (size_t i = 0; i < l && l <= 3; i++)
            v = v * 10 + (b[i] - '0');
        *is_u8 = !frac && !neg && l <= 3 && v <= 255;
    }
    return 0;
}

static int skip(rd *r, int depth)
{
    ws(r);
    if (r->s >= r->e || depth > MAX_DEPTH)
        return -EINVAL;
    uint8_t c = *r->s;
    if (c == '"')
        return str(r, NULL);
    if (c == 't')
        return lit(r, "true");
    if (c == 'f')
        return lit(r, "false");
    if (c == 'n')
        return lit(r, "null");
    if (c != '{' && c != '[')
        return num(r, NULL);
    uint8_t close = c == '{' ? '}' : ']';
    r->s++;
    ws(r);
    if (r->s < r->e && *r->s == close) {
        r->s++;
        return 0;
    }
    for (;;) {
        int rc;
        if (close == '}') {
            ws(r);
            if ((rc = str(r, NULL)) < 0)
                return rc;
            ws(r);
            if (r->s >= r->e || *r->s++ != ':')
                return -EINVAL;
        }
        if ((rc = skip(r, depth + 1)) < 0)
            return rc;
        ws(r);
        if (r->s >= r->e)
            return -EINVAL;
        c = *r->s++;
        if (c == close)
            return 0;
        if (c != ',')
            return -EINVAL;
    }
}

/* Field match as encoding/json: exact name, else ASCII case-insensitive. */
static int field_is(const char *k, const char *name)
{
    return strcasecmp(k, name) == 0;
}

/* One member of the object being walked: the reader is at its value (after ':' and spaces);
 * the callback reads or skips that value and returns 0 or a negative error. */
typedef int (*field_fn)(void *ctx, const char *key, rd *r);

/* Walks the JSON value at r as json.Unmarshal does for a struct: "null" is a zero value, an
 * object calls `field` once per member in order, anything else (or trailing text) is -EINVAL. */
static int walk_object(rd *r, field_fn field, void *ctx)
{
    buf key = {0};
    int rc = 0;
    ws(r);
    if (lit(r, "null") == 0)
        goto end;
    if (r->s >= r->e || *r->s++ != '{')
        return -EINVAL;
    ws(r);
    if (r->s < r->e && *r->s == '}') {
        r->s++;
        goto end;
    }
    for (;;) {
        ws(r);
        key.n = 0;
        if ((rc = str(r, &key)) < 0)
            goto out;
        ws(r);
        if (r->s >= r->e || *r->s++ != ':') {
            rc = -EINVAL;
            goto out;
        }
        ws(r);
        if ((rc = field(ctx, key.d, r)) < 0)
            goto out;
        ws(r);
        if (r->s >= r->e) {
            rc = -EINVAL;
            goto out;
        }
        uint8_t c = *r->s++;
        if (c == '}')
            break;
        if (c != ',') {
            rc = -EINVAL;
            goto out;
        }
    }
end:
    ws(r);
    if (r->s != r->e)
        rc = -EINVAL;
out:
    free(key.d);
    return rc;
}

typedef struct {
    buf a, m;
    int has_meta;
} update_fields;

static int update_field(void *ctx, const char *key, rd *r)
{
    update_fields *u = ctx;
    int is_null = r->s < r->e && *r->s == 'n';
    if (field_is(key, "Addr") && !is_null) {
        u->a.n = 0;
        return str(r, &u->a); /* not a string: Unmarshal fails, the record is skipped */
    }
    if (field_is(key, "Metadata")) {
        u->m.n = 0;
        u->has_meta = r->s < r->e && *r->s == '"';
        return u->has_meta ? str(r, &u->m) : skip(r, 1);
    }
    if (field_is(key, "Op") && !is_null) {
        int u8 = 0;
        int rc = num(r, &u8);
        return rc == 0 && !u8 ? -EINVAL : rc;
    }
    return skip(r, 1);
}

int kv_proxy_naming_decode(const uint8_t *v, size_t len, char **addr, char **meta)
{
    rd r = {v, v + len};
    update_fields u = {0};
    int rc;
    *addr = NULL;
    *meta = NULL;
    if ((rc = walk_object(&r, update_field, &u)) < 0)
        goto out;
    if ((rc = put(&u.a, "", 0)) < 0 || (u.has_meta && (rc = put(&u.m, "", 0)) < 0))
        goto out;
    *addr = u.a.d;
    u.a.d = NULL;
    if (u.has_meta) {
        *meta = u.m.d;
        u.m.d = NULL;
    }
out:
    free(u.a.d);
    free(u.m.d);
    return rc;
}

static int meta_field(void *ctx, const char *key, rd *r)
{
    buf *n = ctx;
    if (field_is(key, "name") && !(r->s < r->e && *r->s == 'n')) {
        n->n = 0;
        return str(r, n);
    }
    return skip(r, 1);
}

int kv_proxy_naming_meta_name(const char *meta, char **name)
{
    rd r = {(const uint8_t *)meta, (const uint8_t *)meta + strlen(meta)};
    buf n = {0};
    int rc;
    *name = NULL;
    if ((rc = walk_object(&r, meta_field, &n)) < 0)
        goto out;
    if ((rc = put(&n, "", 0)) < 0)
        goto out;
    *name = n.d;
    n.d = NULL;
out:
    free(n.d);
    return rc;
}
