/*
 * flushprobe: how many flushes the disk gives to several writers at once. A 3-member cluster
 * on one machine shares one disk: per raft ready, every member flushes its WAL (one page or
 * a few) and commits LMDB (the random pages the ready dirtied, then a flush). This probe
 * measures what that disk allows, with no server: W threads, each with its own preallocated,
 * written 64 MiB file, each loop writing P 4 KiB pages and then fdatasync, for --seconds;
 * the P pages are either random (one pwrite each, as an LMDB commit's scattered pages are
 * written) or adjacent (one pwrite of P pages at a random start, as a commit whose pages were
 * all new would be). For each (layout, W, P) it prints the flushes per second of all writers
 * together and the median flush (writes + fdatasync) of one writer. bench/README.md ("What
 * bounds a cluster on one disk", "Where a commit's pages land") reads the figures.
 * Usage: flushprobe [--seconds S] [--dir DIR] (DIR on the disk under test, not tmpfs;
 * default /var/tmp). Not a test: it prints figures.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "floor.h"

#define FILE_PAGES 16384 /* 64 MiB */
#define MAX_WRITERS 8
#define MAX_SAMPLES 200000

typedef struct writer {
    pthread_t t;
    const char *dir;
    int idx, pages;
    int adjacent; /* 1: the pages in one run, one pwrite */
    double seconds;
    double *lat; /* flush latencies, microseconds */
    size_t n;
    int err; /* 0 or a positive errno */
} writer;

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Fills the file so that its pages exist on disk, as a long-lived data.mdb's do. */
static int prepare(int fd, const char *buf)
{
    if (fallocate(fd, 0, 0, (off_t)FILE_PAGES * 4096) != 0)
        return errno;
    for (int i = 0; i < FILE_PAGES; i++)
        if (pwrite(fd, buf, 4096, (off_t)i * 4096) != 4096)
            return errno ? errno : EIO;
    return fdatasync(fd) != 0 ? errno : 0;
}

static void *run(void *arg)
{
    writer *w = arg;
    char path[512];
    snprintf(path, sizeof path, "%s/flushprobe.%d.%d", w->dir, (int)getpid(), w->idx);
    char *buf = aligned_alloc(4096, (size_t)w->pages * 4096);
    int fd = buf ? open(path, O_CREAT | O_RDWR | O_TRUNC, 0600) : -1;
    if (fd < 0) {
        w->err = buf ? errno : ENOMEM;
        goto out;
    }
    memset(buf, 0x5a, (size_t)w->pages * 4096);
    if ((w->err = prepare(fd, buf)) != 0)
        goto out_close;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)(w->idx + 1);
    double end = kv_bench_now_us() + w->seconds * 1e6;
    while (w->n < MAX_SAMPLES) {
        double t0 = kv_bench_now_us();
        if (t0 >= end)
            break;
        for (int k = 0; k < (w->adjacent ? 1 : w->pages); k++) {
            size_t len = w->adjacent ? (size_t)w->pages * 4096 : 4096;
            uint64_t span = w->adjacent ? FILE_PAGES - (uint64_t)w->pages + 1 : FILE_PAGES;
            off_t at = (off_t)(next_rand(&x) % span) * 4096;
            if (pwrite(fd, buf, len, at) != (ssize_t)len) {
                w->err = errno ? errno : EIO;
                goto out_close;
            }
        }
        if (fdatasync(fd) != 0) {
            w->err = errno;
            goto out_close;
        }
        w->lat[w->n++] = kv_bench_now_us() - t0;
    }
out_close:
    close(fd);
    unlink(path);
out:
    free(buf);
    return NULL;
}

/* One (writers, pages) cell: 0, or a positive errno (printed). */
static int cell(const char *dir, int adjacent, int writers, int pages, double seconds)
{
    writer w[MAX_WRITERS];
    memset(w, 0, sizeof w);
    int rc = 0, started = 0;
    for (int i = 0; i < writers; i++) {
        w[i] = (writer){
            .dir = dir, .idx = i, .pages = pages, .adjacent = adjacent, .seconds = seconds};
        if (!(w[i].lat = malloc(MAX_SAMPLES * sizeof(double)))) {
            rc = ENOMEM;
            goto out;
        }
    }
    for (; started < writers; started++)
        if ((rc = pthread_create(&w[started].t, NULL, run, &w[started])) != 0)
            goto out;
out:
    for (int i = 0; i < started; i++)
        pthread_join(w[i].t, NULL);
    size_t total = 0;
    for (int i = 0; i < writers && !rc; i++) {
        rc = w[i].err;
        total += w[i].n;
    }
    if (rc) {
        fprintf(stderr, "flushprobe: %d writers x %d pages in %s: %s\n", writers, pages, dir,
                strerror(rc));
    } else if (w[0].n > 0) {
        qsort(w[0].lat, w[0].n, sizeof(double), kv_bench_cmp_double);
        printf("| %s | %d | %d | %.0f | %.3f |\n", adjacent ? "adjacent" : "random", writers, pages,
               (double)total / seconds, w[0].lat[w[0].n / 2] / 1000.0);
    }
    for (int i = 0; i < writers; i++)
        free(w[i].lat);
    return rc;
}

int main(int argc, char **argv)
{
    double seconds = 3;
    const char *dir = "/var/tmp";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else {
            fprintf(stderr, "usage: flushprobe [--seconds S] [--dir DIR]\n");
            return 2;
        }
    }
    if (seconds <= 0 || seconds > 600) {
        fprintf(stderr, "flushprobe: --seconds must be in (0, 600]\n");
        return 2;
    }
    static const int writers[] = {1, 3, 6};
    static const int pages[] = {1, 10, 50};
    printf("flushprobe: %s, %.1f s per cell\n", dir, seconds);
    printf("| pages | writers | pages per flush | flushes/s, all writers | median flush of one "
           "writer (ms) |\n|---|---|---|---|---|\n");
    for (int adjacent = 0; adjacent < 2; adjacent++)
        for (size_t p = 0; p < sizeof pages / sizeof pages[0]; p++) {
            if (adjacent && pages[p] == 1)
                continue; /* one page is one page either way */
            for (size_t w = 0; w < sizeof writers / sizeof writers[0]; w++)
                if (cell(dir, adjacent, writers[w], pages[p], seconds))
                    return 1;
        }
    return 0;
}
