/* Go formatting helpers (humanize.Bytes, time.Duration.String): see out.h. */
#include "out.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void kvctl_humanize_bytes(char *buf, size_t len, uint64_t n)
{
    static const char *const sizes[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    if (n < 10) {
        snprintf(buf, len, "%" PRIu64 " B", n);
        return;
    }
    double e = floor(log((double)n) / log(1000.0));
    if (e > 6)
        e = 6;
    double val = floor((double)n / pow(1000.0, e) * 10 + 0.5) / 10;
    snprintf(buf, len, val < 10 ? "%.1f %s" : "%.0f %s", val, sizes[(int)e]);
}

/* Formats v / 10^prec with trailing zeros (and a bare point) removed, like Go's fmtFrac+fmtInt. */
static void frac(char *out, size_t len, uint64_t v, int prec)
{
    uint64_t p = 1;
    for (int i = 0; i < prec; i++)
        p *= 10;
    uint64_t ip = v / p, fp = v % p;
    if (fp == 0) {
        snprintf(out, len, "%" PRIu64, ip);
        return;
    }
    char f[32];
    snprintf(f, sizeof(f), "%0*" PRIu64, prec, fp);
    size_t l = strlen(f);
    while (l > 0 && f[l - 1] == '0')
        f[--l] = '\0';
    snprintf(out, len, "%" PRIu64 ".%s", ip, f);
}

void kvctl_go_duration(char *buf, size_t len, int64_t ns)
{
    const char *sign = ns < 0 ? "-" : "";
    uint64_t u = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    char num[64];
    if (u == 0) {
        snprintf(buf, len, "0s");
    } else if (u < 1000) {
        snprintf(buf, len, "%s%" PRIu64 "ns", sign, u);
    } else if (u < 1000000) {
        frac(num, sizeof(num), u, 3);
        snprintf(buf, len, "%s%s\xc2\xb5s", sign, num);
    } else if (u < 1000000000) {
        frac(num, sizeof(num), u, 6);
        snprintf(buf, len, "%s%sms", sign, num);
    } else {
        uint64_t secs = u / 1000000000, sub = u % 1000000000;
        uint64_t h = secs / 3600, m = (secs / 60) % 60, s = secs % 60;
        frac(num, sizeof(num), s * 1000000000 + sub, 9);
        if (h)
            snprintf(buf, len, "%s%" PRIu64 "h%" PRIu64 "m%ss", sign, h, m, num);
        else if (m)
            snprintf(buf, len, "%s%" PRIu64 "m%ss", sign, m, num);
        else
            snprintf(buf, len, "%s%ss", sign, num);
    }
}
