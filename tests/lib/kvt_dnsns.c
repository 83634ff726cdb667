/* kvt_dnsns: a test's DNS records in a private mount namespace (see kvt_dnsns.h). */
#include "kvt_dnsns.h"

#include "kvt_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define UNSHARE "/usr/bin/unshare"

static int responder_path(char *out, size_t cap)
{
    const char *bd = getenv("KV_BUILD_DIR");
    int n = snprintf(out, cap, "%s/tests/lib/kvt_dns", bd ? bd : "build");
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

const char *kvt_dnsns_missing(void)
{
    char bin[PATH_MAX];
    if (geteuid() != 0)
        return "needs root (port 53 and a private mount namespace for /etc/resolv.conf)";
    if (access(UNSHARE, X_OK) != 0)
        return "unshare not installed (util-linux)";
    if (responder_path(bin, sizeof bin) < 0 || access(bin, X_OK) != 0)
        return "tests/lib/kvt_dns not built";
    return NULL;
}

int kvt_dnsns_start(kvt_dnsns *d, const char *dir, uint16_t seed, const char *const *records)
{
    char bin[PATH_MAX], log[PATH_MAX + 32];
    int rc = responder_path(bin, sizeof bin);
    if (rc)
        return rc;
    snprintf(d->addr, sizeof d->addr, "127.53.%u.%u", (seed >> 8) & 255u, seed & 255u);
    snprintf(d->resolv, sizeof d->resolv, "%.4000s/resolv.conf", dir);
    snprintf(log, sizeof log, "%.4000s/dns.log", dir);
    const char *argv[48] = {bin, "--addr", d->addr, "--resolv-conf", d->resolv, "--life", "600"};
    int a = 7;
    for (int k = 0; records && records[k] && a < 47; k++)
        argv[a++] = records[k];
    argv[a] = NULL;
    kvt_proc_init(&d->proc, log);
    if ((rc = kvt_proc_spawn(&d->proc, argv)) != 0)
        return rc;
    struct stat st;
    for (int i = 0; i < 100 && stat(d->resolv, &st) != 0; i++) {
        if (!kvt_proc_alive(&d->proc))
            return -ECHILD; /* e.g. 53 taken on that address: see dns.log */
        kvt_sleep_ms(50);
    }
    if (stat(d->resolv, &st) != 0)
        return -ETIMEDOUT;
    const char *wrap[] = {
        UNSHARE,   "--mount", "sh", "-c", "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"",
        d->resolv, NULL};
    memcpy(d->wrap, wrap, sizeof wrap);
    return 0;
}

void kvt_dnsns_stop(kvt_dnsns *d)
{
    kvt_proc_kill9(&d->proc);
}
