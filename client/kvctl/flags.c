/* kvctl flags: see flags.h. */
#include "flags.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct kvctl_flag *find_long(struct kvctl_flag *const *sets, size_t n_sets, const char *name,
                                    size_t name_len)
{
    for (size_t s = 0; s < n_sets; s++) {
        for (struct kvctl_flag *f = sets[s]; f->name; f++) {
            if (strlen(f->name) == name_len && memcmp(f->name, name, name_len) == 0)
                return f;
        }
    }
    return NULL;
}

static struct kvctl_flag *find_short(struct kvctl_flag *const *sets, size_t n_sets, char c)
{
    for (size_t s = 0; s < n_sets; s++) {
        for (struct kvctl_flag *f = sets[s]; f->name; f++) {
            if (f->shorthand && f->shorthand == c)
                return f;
        }
    }
    return NULL;
}

int kvctl_parse_int64(const char *s, int base, int64_t *out)
{
    const char *p = s;
    bool neg = false;
    if (*p == '+' || *p == '-') {
        neg = *p == '-';
        p++;
    }
    if (*p == '\0')
        return -EINVAL;
    uint64_t v = 0;
    bool overflow = false;
    for (; *p; p++) {
        int d;
        if (*p >= '0' && *p <= '9')
            d = *p - '0';
        else if (*p >= 'a' && *p <= 'z')
            d = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'Z')
            d = *p - 'A' + 10;
        else
            return -EINVAL;
        if (d >= base)
            return -EINVAL;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            overflow = true;
        else
            v = v * (uint64_t)base + (uint64_t)d;
    }
    if (overflow)
        return -ERANGE;
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1)
            return -ERANGE;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX)
            return -ERANGE;
        *out = (int64_t)v;
    }
    return 0;
}

void kvctl_parse_int_err(char *buf, size_t len, const char *s, int rc)
{
    snprintf(buf, len, "strconv.ParseInt: parsing \"%s\": %s", s,
             rc == -ERANGE ? "value out of range" : "invalid syntax");
}

static int parse_bool(const char *s, bool *out)
{
    static const char *const t[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const f[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < 6; i++) {
        if (strcmp(s, t[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcmp(s, f[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

int kvctl_parse_duration(const char *s, uint32_t *ms)
{
    const char *p = s;
    double total_ns = 0;
    if (*p == '+')
        p++;
    else if (*p == '-')
        return -EINVAL; /* negative timeouts make no sense here */
    if (strcmp(p, "0") == 0) {
        *ms = 0;
        return 0;
    }
    if (*p == '\0')
        return -EINVAL;
    while (*p) {
        if (!isdigit((unsigned char)*p) && *p != '.')
            return -EINVAL;
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno)
            return -EINVAL;
        p = end;
        static const struct {
            const char *unit;
            double ns;
        } units[] = {{"ns", 1},   {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3},
                     {"ms", 1e6}, {"s", 1e9},  {"m", 60e9},        {"h", 3600e9}};
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t l = strlen(units[i].unit);
            if (strncmp(p, units[i].unit, l) == 0 && l > best_len) {
                best = i;
                best_len = l;
            }
        }
        if (best_len == 0)
            return -EINVAL;
        total_ns += v * units[best].ns;
        p += best_len;
    }
    double m = total_ns / 1e6;
    if (m > (double)UINT32_MAX)
        m = (double)UINT32_MAX;
    *ms = (uint32_t)m;
    return 0;
}

static int set_value(struct kvctl_flag *f, const char *val, const char *shown, char *errbuf,
                     size_t errlen)
{
    int rc;
    switch (f->type) {
    case KVCTL_FLAG_BOOL:
        if (parse_bool(val, (bool *)f->dst) < 0) {
            snprintf(errbuf, errlen,
                     "invalid argument \"%s\" for \"%s\" flag: strconv.ParseBool: parsing \"%s\": "
                     "invalid syntax",
                     val, shown, val);
            return -EINVAL;
        }
        break;
    case KVCTL_FLAG_STRING:
        *(const char **)f->dst = val;
        break;
    case KVCTL_FLAG_SLICE: {
        /* pflag StringSlice: the first use replaces the default, later uses append */
        char *d = f->dst;
        size_t l = f->changed ? strlen(d) : 0;
        if (l + strlen(val) + 2 > KVCTL_SLICE_MAX) {
            snprintf(errbuf, errlen, "invalid argument for \"%s\" flag: list too long", shown);
            return -EINVAL;
        }
        if (l)
            d[l++] = ',';
        memcpy(d + l, val, strlen(val) + 1);
        break;
    }
    case KVCTL_FLAG_INT64:
        rc = kvctl_parse_int64(val, 10, (int64_t *)f->dst);
        if (rc < 0) {
            char m[256];
            kvctl_parse_int_err(m, sizeof(m), val, rc);
            snprintf(errbuf, errlen, "invalid argument \"%s\" for \"%s\" flag: %s", val, shown, m);
            return -EINVAL;
        }
        break;
    case KVCTL_FLAG_DURATION:
        if (kvctl_parse_duration(val, (uint32_t *)f->dst) < 0) {
            snprintf(errbuf, errlen,
                     "invalid argument \"%s\" for \"%s\" flag: time: invalid duration \"%s\"", val,
                     shown, val);
            return -EINVAL;
        }
        break;
    }
    f->changed = true;
    return 0;
}

int kvctl_flags_parse(int argc, char **argv, struct kvctl_flag *const *sets, size_t n_sets,
                      char **pos, size_t *n_pos, char *errbuf, size_t errlen)
{
    size_t np = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            for (i++; i < argc; i++)
                pos[np++] = argv[i];
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            pos[np++] = a;
            continue;
        }
        char shown[128];
        struct kvctl_flag *f;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t nl = eq ? (size_t)(eq - name) : strlen(name);
            f = find_long(sets, n_sets, name, nl);
            if (!f) {
                snprintf(errbuf, errlen, "unknown flag: --%.*s", (int)nl, name);
                return -EINVAL;
            }
            snprintf(shown, sizeof(shown), "--%s", f->name);
            if (eq)
                val = eq + 1;
        } else {
            f = find_short(sets, n_sets, a[1]);
            if (!f) {
                snprintf(errbuf, errlen, "unknown shorthand flag: '%c' in %s", a[1], a);
                return -EINVAL;
            }
            snprintf(shown, sizeof(shown), "-%c, --%s", f->shorthand, f->name);
            if (a[2] == '=')
                val = a + 3;
            else if (a[2] != '\0') {
                if (f->type == KVCTL_FLAG_BOOL) {
                    snprintf(errbuf, errlen, "unknown shorthand flag: '%c' in %s", a[2], a);
                    return -EINVAL;
                }
                val = a + 2;
            }
        }
        if (!val) {
            if (f->type == KVCTL_FLAG_BOOL) {
                val = "true";
            } else if (i + 1 < argc) {
                val = argv[++i];
            } else {
                snprintf(errbuf, errlen, "flag needs an argument: %s", a);
                return -EINVAL;
            }
        }
        if (set_value(f, val, shown, errbuf, errlen) < 0)
            return -EINVAL;
    }
    *n_pos = np;
    return 0;
}

int kvctl_flags_from_env(struct kvctl_flag *set, char *errbuf, size_t errlen)
{
    for (struct kvctl_flag *f = set; f->name; f++) {
        if (f->changed)
            continue;
        char env[128] = "ETCDCTL_";
        size_t o = strlen(env);
        for (const char *p = f->name; *p && o + 1 < sizeof(env); p++)
            env[o++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        env[o] = '\0';
        const char *v = getenv(env);
        if (!v || !*v)
            continue;
        char shown[128];
        snprintf(shown, sizeof(shown), "--%s", f->name);
        /* etcdctl ignores what flags.SetPflagsFromEnv reports: a bad value leaves the default */
        (void)set_value(f, v, shown, errbuf, errlen);
    }
    return 0;
}
