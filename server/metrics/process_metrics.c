/* process_metrics.c - process_* series from /proc/self (see process_metrics.h). */
#include "metrics/process_metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Fields 14 (utime), 15 (stime), 22 (starttime), 23 (vsize), 24 (rss) of /proc/self/stat.
 * Returns 0 or -1. */
static int read_stat(unsigned long long *utime, unsigned long long *stime,
                     unsigned long long *start, unsigned long long *vsize, long long *rss)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p)
        return -1;
    /* after ") ": field 3 (state) onwards */
    if (sscanf(p + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%llu %llu %lld",
               utime, stime, start, vsize, rss) != 5)
        return -1;
    return 0;
}

static double cpu_seconds(void *arg)
{
    (void)arg;
    unsigned long long u, s, st, vs;
    long long rss;
    if (read_stat(&u, &s, &st, &vs, &rss) != 0)
        return 0;
    return (double)(u + s) / (double)sysconf(_SC_CLK_TCK);
}

static double virtual_bytes(void *arg)
{
    (void)arg;
    unsigned long long u, s, st, vs;
    long long rss;
    return read_stat(&u, &s, &st, &vs, &rss) == 0 ? (double)vs : 0;
}

static double resident_bytes(void *arg)
{
    (void)arg;
    unsigned long long u, s, st, vs;
    long long rss;
    if (read_stat(&u, &s, &st, &vs, &rss) != 0)
        return 0;
    return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

static double start_time(void *arg)
{
    (void)arg;
    unsigned long long u, s, st, vs, btime = 0;
    long long rss;
    if (read_stat(&u, &s, &st, &vs, &rss) != 0)
        return 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return 0;
    char line[256];
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %llu", &btime) == 1)
            break;
    fclose(f);
    return (double)btime + (double)st / (double)sysconf(_SC_CLK_TCK);
}

static double open_fds(void *arg)
{
    (void)arg;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    double n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n > 0 ? n - 1 : 0; /* minus the directory stream's own descriptor */
}

static double max_fds(void *arg)
{
    (void)arg;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    return rl.rlim_cur == RLIM_INFINITY ? 1.8446744073709552e19 : (double)rl.rlim_cur;
}

int kv_process_metrics_register(kv_metrics *m)
{
    int rc;
    if ((rc = kv_metrics_counter_fn(m, "process_cpu_seconds_total",
                                    "Total user and system CPU time spent in seconds.", cpu_seconds,
                                    NULL)) != 0 ||
        (rc = kv_metrics_gauge_fn(m, "process_max_fds", "Maximum number of open file descriptors.",
                                  max_fds, NULL)) != 0 ||
        (rc = kv_metrics_gauge_fn(m, "process_open_fds", "Number of open file descriptors.",
                                  open_fds, NULL)) != 0 ||
        (rc = kv_metrics_gauge_fn(m, "process_resident_memory_bytes",
                                  "Resident memory size in bytes.", resident_bytes, NULL)) != 0 ||
        (rc = kv_metrics_gauge_fn(m, "process_start_time_seconds",
                                  "Start time of the process since unix epoch in seconds.",
                                  start_time, NULL)) != 0 ||
        (rc = kv_metrics_gauge_fn(m, "process_virtual_memory_bytes",
                                  "Virtual memory size in bytes.", virtual_bytes, NULL)) != 0)
        return rc;
    return 0;
}
