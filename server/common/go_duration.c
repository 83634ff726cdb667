/* go_duration: Go's time.ParseDuration (contract in go_duration.h). */
#include "common/go_duration.h"

#include <errno.h>
#include <string.h>

int kv_go_duration_parse(const char *s, int64_t bare_unit_ns, int64_t *ns)
{
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {{"ns", 1},
                 {"us", 1000},
                 {"\xc2\xb5s", 1000},
                 {"\xce\xbcs", 1000},
                 {"ms", KV_NS_PER_MS},
                 {"s", KV_NS_PER_S},
                 {"m", 60 * KV_NS_PER_S},
                 {"h", 3600 * KV_NS_PER_S}};
    const char *p = s;
    int neg = 0;
    uint64_t d = 0;
    if (bare_unit_ns < 0)
        return -EINVAL;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    const char *first = p; /* the first number */
    if (strcmp(p, "0") == 0) {
        *ns = 0;
        return 0;
    }
    if (*p == '\0')
        return -EINVAL;
    while (*p) {
        const char *start = p;
        uint64_t v = 0, f = 0, unit = 0;
        double scale = 1;
        int post = 0, overflow = 0;
        if (*p != '.' && (*p < '0' || *p > '9'))
            return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (v > INT64_MAX / 10)
                return -EINVAL;
            v = v * 10 + (uint64_t)(*p - '0');
            if (v > INT64_MAX)
                return -EINVAL;
        }
        int pre = p != start;
        if (*p == '.') {
            const char *frac = ++p;
            /* digits past int64's precision are dropped, as Go drops them */
            for (; *p >= '0' && *p <= '9'; p++) {
                if (overflow || f > INT64_MAX / 10 || f * 10 + (uint64_t)(*p - '0') > INT64_MAX) {
                    overflow = 1;
                    continue;
                }
                f = f * 10 + (uint64_t)(*p - '0');
                scale *= 10;
            }
            post = p != frac;
        }
        if (!pre && !post)
            return -EINVAL; /* ".s", "-." */
        size_t ulen = 0;
        while (p[ulen] && p[ulen] != '.' && (p[ulen] < '0' || p[ulen] > '9'))
            ulen++;
        if (ulen == 0 && start == first && p[0] == '\0' && bare_unit_ns > 0) {
            unit = (uint64_t)bare_unit_ns; /* the whole value is one plain number */
        } else {
            for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
                if (strlen(units[i].name) == ulen && strncmp(units[i].name, p, ulen) == 0)
                    unit = units[i].ns;
            if (unit == 0)
                return -EINVAL; /* no unit, or an unknown one ("1m30", "5S", "1e3ms") */
        }
        p += ulen;
        if (v > INT64_MAX / unit)
            return -EINVAL;
        v *= unit;
        if (f > 0) {
            /* in double, as Go: nanosecond-exact for fractions of hours */
            v += (uint64_t)((double)f * ((double)unit / scale));
            if (v > INT64_MAX)
                return -EINVAL;
        }
        d += v;
        if (d > INT64_MAX)
            return -EINVAL;
    }
    *ns = neg ? -(int64_t)d : (int64_t)d;
    return 0;
}
