/* floor.c - the disk's fdatasync floor (floor.h). */
#include "floor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FLOOR_FILE_BYTES (64 << 20)

double kv_bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int kv_bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int kv_bench_fsync_floor(const char *dir, int iters, double *v)
{
    char p[4096];
    char buf[4096];
    int rc = 0;
    snprintf(p, sizeof p, "%s/floor", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        rc = -errno;
        fprintf(stderr, "fsync floor: %s: %s\n", p, strerror(errno));
        return rc;
    }
    int e = posix_fallocate(fd, 0, FLOOR_FILE_BYTES);
    if (e != 0 || fsync(fd) != 0) {
        rc = e ? -e : -errno;
        fprintf(stderr, "fsync floor: preallocating %s: %s\n", p, strerror(-rc));
        goto out;
    }
    memset(buf, 0x5a, sizeof buf);
    for (int i = 0; i < iters; i++) {
        off_t off = (off_t)i * (off_t)sizeof buf % FLOOR_FILE_BYTES;
        double t = kv_bench_now_us();
        if (pwrite(fd, buf, sizeof buf, off) != (ssize_t)sizeof buf || fdatasync(fd) != 0) {
            rc = errno ? -errno : -EIO;
            fprintf(stderr, "fsync floor: writing %s: %s\n", p, strerror(-rc));
            goto out;
        }
        v[i] = kv_bench_now_us() - t;
    }
    qsort(v, (size_t)iters, sizeof *v, kv_bench_cmp_double);
out:
    close(fd);
    unlink(p);
    return rc;
}
