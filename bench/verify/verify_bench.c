/*
 * verify_bench: how fast the startup structure check (kv_lmdb_verify_path, the whole file
 * before LMDB opens it) runs on a given data file.
 *   verify_bench <data.mdb> [runs]
 * Run 1 is cold: the file's page cache is dropped first (posix_fadvise DONTNEED; clean pages
 * only, no root needed). The other runs are warm. Prints file size, pages reached, bytes read,
 * wall and CPU time and MB/s (bytes read / time, file size / time, bytes read / CPU time: the
 * figure that does not depend on the machine's load). Figures: docs/corruption.md.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mvcc/lmdb_verify.h"

static double clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: verify_bench <data.mdb> [runs]\n");
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 3;
    struct stat sb;
    if (stat(argv[1], &sb) != 0) {
        perror(argv[1]);
        return 1;
    }
    for (int r = 0; r < runs; r++) {
        if (r == 0) {
            int fd = open(argv[1], O_RDONLY);
            if (fd >= 0) {
                fdatasync(fd);
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                close(fd);
            }
        }
        char err[512];
        kv_lmdb_verify_stats st;
        double t0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
        int rc = kv_lmdb_verify_path(argv[1], 0, &st, err, sizeof err);
        double ms = clock_ms(CLOCK_MONOTONIC) - t0, cpu = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (rc != 0) {
            fprintf(stderr, "verify failed (%d): %s\n", rc, err);
            return 1;
        }
        printf(
            "%s run %d: file %.1f MB, %llu of %llu pages reached, %llu entries, %.1f MB read "
            "in %.1f ms (%.1f ms CPU): %.0f MB/s read, %.0f MB/s of file, %.0f MB/s read per CPU "
            "second\n",
            r == 0 ? "cold" : "warm", r + 1, (double)sb.st_size / 1e6, (unsigned long long)st.pages,
            (unsigned long long)st.last_pg + 1, (unsigned long long)st.entries,
            (double)st.bytes_read / 1e6, ms, cpu, (double)st.bytes_read / 1e3 / ms,
            (double)sb.st_size / 1e3 / ms, (double)st.bytes_read / 1e3 / cpu);
    }
    return 0;
}
