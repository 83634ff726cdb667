/* config_file: etcd's YAML configuration file into kvd's flags (see config_file.h). */
#include "daemon/config_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The nested maps etcd's configYAML holds (etcd 3.4 embed/config.go securityConfig). */
typedef struct tls_key {
    const char *yaml, *client_flag, *peer_flag;
} tls_key;

static const tls_key TLS_KEYS[] = {
    {"cert-file", "cert-file", "peer-cert-file"},
    {"key-file", "key-file", "peer-key-file"},
    {"client-cert-auth", "client-cert-auth", "peer-client-cert-auth"},
    {"trusted-ca-file", "trusted-ca-file", "peer-trusted-ca-file"},
    {"auto-tls", "auto-tls", "peer-auto-tls"},
    {"crl-file", "client-crl-file", "peer-crl-file"},
};

enum { SEC_NONE, SEC_CLIENT, SEC_PEER };

typedef struct reader {
    const char *path;
    int (*known)(const char *name);
    char **args;
    int n, cap;
    /* a key whose value is a block sequence ("- item" lines below it) */
    char list_flag[96];
    char *list;     /* the items so far, joined with ',' (malloc'd) */
    bool skip_list; /* the items belong to a key that is ignored */
    int list_line;
    char *err;
    size_t errlen;
} reader;

static int fail(reader *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(reader *r, int line, const char *fmt, ...)
{
    int o = snprintf(r->err, r->errlen, "config file %s line %d: ", r->path, line);
    if (o >= 0 && (size_t)o < r->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err + o, r->errlen - (size_t)o, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int add_arg(reader *r, const char *flag, const char *value)
{
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 16;
        char **a = realloc(r->args, (size_t)cap * sizeof(*a));
        if (!a)
            return -ENOMEM;
        r->args = a;
        r->cap = cap;
    }
    size_t len = strlen(flag) + strlen(value) + 4;
    if (!(r->args[r->n] = malloc(len)))
        return -ENOMEM;
    snprintf(r->args[r->n++], len, "--%s=%s", flag, value);
    return 0;
}

/* Ends the block sequence being read, if any: its items become one flag. */
static int end_list(reader *r)
{
    int rc = 0;
    if (r->list_flag[0] && r->list)
        rc = add_arg(r, r->list_flag, r->list);
    free(r->list);
    r->list = NULL;
    r->list_flag[0] = '\0';
    r->skip_list = false;
    return rc;
}

static char *trim(char *s)
{
    while (*s == ' ')
        s++;
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ')
        s[--n] = '\0';
    return s;
}

/* Parses a scalar in place: quotes removed (and their escapes), a trailing comment dropped.
 * *null: the value is YAML null (empty, "~", "null"). */
static int scalar(reader *r, int line, char *v, char **out, bool *null)
{
    v = trim(v);
    *null = false;
    if (*v == '\'' || *v == '"') {
        char q = *v, *w = v, *p = v + 1;
        for (;; p++) {
            if (*p == '\0')
                return fail(r, line, "unterminated %s-quoted string",
                            q == '"' ? "double" : "single");
            if (q == '\'' && p[0] == '\'' && p[1] == '\'') { /* '' is one quote */
                *w++ = '\'';
                p++;
            } else if (q == '"' && p[0] == '\\' && (p[1] == '"' || p[1] == '\\')) {
                *w++ = p[1];
                p++;
            } else if (*p == q) {
                break;
            } else {
                *w++ = *p;
            }
        }
        char *rest = trim(p + 1);
        if (*rest && *rest != '#')
            return fail(r, line, "text after a quoted value");
        *w = '\0';
        *out = v;
        return 0;
    }
    for (char *p = v; *p; p++) /* " #" starts a comment */
        if (*p == '#' && (p == v || p[-1] == ' ')) {
            *p = '\0';
            break;
        }
    v = trim(v);
    if (*v && strchr("&*!|>{@`%", *v)) /* anchors, aliases, tags, block scalars, flow maps */
        return fail(r, line,
                    "'%c' starts a YAML construct this reader does not take (quote the "
                    "value if it is text)",
                    *v);
    if (*v == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
        strcmp(v, "NULL") == 0) {
        *null = true;
        return 0;
    }
    if (strcmp(v, "True") == 0 || strcmp(v, "TRUE") == 0)
        v = "true";
    else if (strcmp(v, "False") == 0 || strcmp(v, "FALSE") == 0)
        v = "false";
    *out = v;
    return 0;
}

/* "[a, b, c]" -> "a,b,c" in place (items are scalars). */
static int flow_seq(reader *r, int line, char *v, char **out)
{
    size_t n = strlen(v);
    if (n < 2 || v[n - 1] != ']')
        return fail(r, line, "a flow sequence must end with ']' on the same line");
    v[n - 1] = '\0';
    char *w = v, *item = v + 1;
    bool first = true;
    while (item) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        char *s;
        bool null;
        int rc = scalar(r, line, item, &s, &null);
        if (rc)
            return rc;
        if (!null) {
            if (!first)
                *w++ = ',';
            size_t l = strlen(s);
            memmove(w, s, l);
            w += l;
            first = false;
        }
        item = comma ? comma + 1 : NULL;
    }
    *w = '\0';
    *out = v;
    return 0;
}

/* A plain number v for a duration key is nanoseconds (etcd: JSON into a time.Duration): the
 * same in milliseconds, "<ms>ms" or "<ms>.<fraction>ms", in out. Any other v is returned as it
 * is (a unit, or too many digits for any duration: refused by the flag's parser). NULL when v
 * is above 0 but under a millisecond, kvd's resolution: it would read as 0, which turns such a
 * setting off. A sign is kept ("-5000000" is "-5ms": the flag's parser refuses a negative
 * duration where kvd holds the setting). */
static const char *ns_to_ms(const char *v, char *out, size_t cap)
{
    const char *sign = ""; /* a YAML integer may carry one: "+5000000" is 5 ms, as in etcd */
    const char *v0 = v;
    if (*v == '+' || *v == '-')
        sign = *v++ == '-' ? "-" : "";
    size_t n = strlen(v);
    if (n == 0 || n > 30 || strspn(v, "0123456789") != n)
        return v0;
    if (n <= 6 && strspn(v, "0") != n && !*sign)
        return NULL; /* a negative one goes on: the flag's parser says what it makes of it */
    char ms[32] = "0", frac[7] = "000000";
    if (n > 6) {
        memcpy(ms, v, n - 6);
        ms[n - 6] = '\0';
        memcpy(frac, v + n - 6, 6);
    } else {
        memcpy(frac + 6 - n, v, n);
    }
    for (size_t i = 6; i > 0 && frac[i - 1] == '0'; i--)
        frac[i - 1] = '\0';
    snprintf(out, cap, "%s%s%s%sms", sign, ms, frac[0] ? "." : "", frac);
    return out;
}

/* YAML 1.1's other spellings of a boolean (etcd's decoder, yaml.v2, reads them so for a bool
 * key): "true" or "false"; any other v as it is. */
static const char *yaml_bool(const char *v)
{
    static const char *const yes[] = {"yes", "Yes", "YES", "on", "On", "ON", "y", "Y"};
    static const char *const no[] = {"no", "No", "NO", "off", "Off", "OFF", "n", "N"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(v, yes[i]) == 0)
            return "true";
        if (strcmp(v, no[i]) == 0)
            return "false";
    }
    return v;
}

/* One "key: value" of the top level (section NONE) or of a transport section. */
static int key_value(reader *r, int line, int section, char *key, char *rest, int *open_section)
{
    *open_section = SEC_NONE;
    const char *flag = key;
    if (section != SEC_NONE) {
        flag = NULL;
        for (size_t i = 0; i < sizeof(TLS_KEYS) / sizeof(TLS_KEYS[0]); i++)
            if (strcmp(TLS_KEYS[i].yaml, key) == 0)
                flag = section == SEC_PEER ? TLS_KEYS[i].peer_flag : TLS_KEYS[i].client_flag;
    }
    char *v = trim(rest);
    bool empty = *v == '\0' || *v == '#';
    if (section == SEC_NONE && empty) {
        if (strcmp(key, "client-transport-security") == 0) {
            *open_section = SEC_CLIENT;
            return 0;
        }
        if (strcmp(key, "peer-transport-security") == 0) {
            *open_section = SEC_PEER;
            return 0;
        }
    }
    int kind = flag ? r->known(flag) : 0;
    if (!kind || strcmp(flag, "config-file") == 0) {
        if (empty) { /* a null setting of etcd's sample (wal-dir:, cors:, ...): nothing to say */
            r->skip_list = true; /* and any "- item" lines under it */
            return 0;
        }
        fprintf(stderr,
                "kvd: warning: config file %s line %d: '%s%s' is not a kvd setting; "
                "ignored\n",
                r->path, line,
                section == SEC_CLIENT ? "client-transport-security."
                : section == SEC_PEER ? "peer-transport-security."
                                      : "",
                key);
        return 0;
    }
    if (empty) { /* null, or a block sequence on the next lines */
        snprintf(r->list_flag, sizeof(r->list_flag), "%s", flag);
        r->list_line = line;
        return 0;
    }
    char *s = NULL;
    bool null = false;
    const char first = *v; /* flow_seq and scalar rewrite v in place */
    int rc = first == '[' ? flow_seq(r, line, v, &s) : scalar(r, line, v, &s, &null);
    if (rc)
        return rc;
    if (null)
        return 0;
    const char *val = s;
    char ms[48];
    if (kind == KV_CONFIG_FILE_DURATION && first != '[' &&
        (val = ns_to_ms(s, ms, sizeof(ms))) == NULL)
        return fail(r, line,
                    "'%s: %s': a plain number is nanoseconds here, as in etcd's file, and this "
                    "is under 1 ms, kvd's resolution (write it with a unit: 1s, 500ms)",
                    key, s);
    if (kind == KV_CONFIG_FILE_BOOL && first != '[' && first != '\'' && first != '"')
        val = yaml_bool(s);
    return add_arg(r, flag, val);
}

static int parse(reader *r, char *text)
{
    int section = SEC_NONE, line = 0, rc = 0;
    int section_indent = -1; /* indentation of the current section's keys */
    for (char *p = text; p && rc == 0;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        line++;
        char *s = p;
        p = nl ? nl + 1 : NULL;
        size_t n = strlen(s);
        if (n && s[n - 1] == '\r')
            s[--n] = '\0';
        int indent = 0;
        while (s[indent] == ' ')
            indent++;
        if (s[indent] == '\t')
            return fail(r, line, "a tab in the indentation (YAML allows spaces only)");
        char *body = s + indent;
        if (*body == '\0' || *body == '#')
            continue;
        if (line == 1 && strcmp(trim(body), "---") == 0)
            continue;
        if (body[0] == '-' && (body[1] == ' ' || body[1] == '\0')) { /* a block sequence item */
            if (r->skip_list)
                continue;
            if (!r->list_flag[0])
                return fail(r, line, "a sequence item without a key above it");
            char *item;
            bool null;
            if ((rc = scalar(r, line, body + 1, &item, &null)))
                return rc;
            if (null)
                continue;
            size_t have = r->list ? strlen(r->list) : 0;
            char *l = realloc(r->list, have + strlen(item) + 2);
            if (!l)
                return -ENOMEM;
            if (have)
                l[have++] = ',';
            strcpy(l + have, item);
            r->list = l;
            continue;
        }
        if ((rc = end_list(r)))
            return rc;
        if (indent == 0) {
            section = SEC_NONE;
            section_indent = -1;
        } else if (section == SEC_NONE) {
            return fail(r, line,
                        "unexpected indentation (only client-transport-security and "
                        "peer-transport-security hold nested keys)");
        } else if (section_indent < 0) {
            section_indent = indent;
        } else if (indent != section_indent) {
            return fail(r, line, "inconsistent indentation in the section");
        }
        char *colon = strstr(body, ": ");
        if (!colon) {
            size_t bl = strlen(body);
            if (bl && body[bl - 1] == ':')
                colon = body + bl - 1;
        }
        if (!colon || colon == body)
            return fail(r, line, "want 'key: value'");
        *colon = '\0';
        char *key = trim(body);
        if (*key == '\'' || *key == '"' || strchr(key, ' '))
            return fail(r, line, "want a plain key, got '%s'", key);
        int open = SEC_NONE;
        if ((rc = key_value(r, line, indent ? section : SEC_NONE, key, colon + 1, &open)))
            return rc;
        if (open != SEC_NONE) {
            section = open;
            section_indent = -1;
        }
    }
    return rc ? rc : end_list(r);
}

int kv_config_file_read(const char *path, int (*known)(const char *name), char ***args, int *n,
                        char *err, size_t errlen)
{
    *args = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "config file %s: %s", path, strerror(e));
        return -e;
    }
    char *text = malloc(KV_CONFIG_FILE_MAX + 1);
    size_t len = text ? fread(text, 1, KV_CONFIG_FILE_MAX + 1, f) : 0;
    int bad = text && ferror(f);
    fclose(f);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    if (bad || len > KV_CONFIG_FILE_MAX) {
        free(text);
        snprintf(err, errlen, "config file %s: %s", path, bad ? "read error" : "larger than 1 MiB");
        return bad ? -EIO : -EFBIG;
    }
    text[len] = '\0';
    if (memchr(text, '\0', len)) {
        free(text);
        snprintf(err, errlen, "config file %s: a NUL byte (not a YAML text file)", path);
        return -EINVAL;
    }
    reader r = {.path = path, .known = known, .err = err, .errlen = errlen};
    int rc = parse(&r, text);
    free(text);
    free(r.list);
    if (rc) {
        if (rc == -ENOMEM)
            snprintf(err, errlen, "out of memory");
        kv_config_file_free(r.args, r.n);
        return rc;
    }
    *args = r.args;
    *n = r.n;
    return 0;
}

void kv_config_file_free(char **args, int n)
{
    for (int i = 0; i < n; i++)
        free(args[i]);
    free(args);
}
