/*
 * kvt_port: kvt_port_free() (kvt_util.h), free loopback ports that no other test process is
 * handed while the one that picked it lives.
 *
 * Why not bind(port 0): the kernel then picks from its ephemeral range, the same range its
 * connect() uses for every outgoing connection on the machine, and a port released after the
 * probe may be handed to another test's probe or taken as a client's local port before our
 * server binds it. Under `ctest -j` that happened (the server exits with "address already in
 * use", or the test waits on a port nobody will serve). So:
 *   - ports come from [10000, 20000) cut below the kernel's ip_local_port_range, where
 *     neither connect() nor bind(0) ever lands (etcd's e2e suite uses 20000 and up);
 *   - each port picked is recorded as <dir>/<port> holding the picking process's pid and
 *     start time (/proc/<pid>/stat), under an flock on <dir>/.lock; a port whose file names a
 *     live process is skipped, a file naming a dead process (or a pid now reused by another
 *     process: its start time differs) is taken over (a test worker's servers die with it:
 *     PR_SET_PDEATHSIG in kvt_proc);
 *   - the port must also bind on 0.0.0.0 without SO_REUSEADDR, so a listener on any address,
 *     or a connection still in TIME_WAIT, rules it out.
 * <dir> is $KV_TEST_PORT_DIR or /tmp/kvt-ports (one per machine, whatever $TMPDIR a test
 * sets). $KV_TEST_PORT_RANGE="lo-hi" narrows the range (kvt_lib's own test). Should the
 * directory be unusable, the lock and records are skipped and only the bind check remains.
 */
#include "kvt_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define PORT_LO 10000
#define PORT_HI 20000 /* exclusive */

/* [*lo, *hi): the configured range, else PORT_LO..PORT_HI cut at the kernel's ephemeral low
 * end. -ERANGE if fewer than 100 ports remain (then the caller falls back to bind(0)). */
static int port_range(unsigned *lo, unsigned *hi)
{
    const char *r = getenv("KV_TEST_PORT_RANGE");
    if (r && *r) {
        unsigned a = 0, b = 0;
        if (sscanf(r, "%u-%u", &a, &b) != 2 || a < 1024 || b > 65536 || a >= b)
            return -EINVAL;
        *lo = a;
        *hi = b;
        return 0;
    }
    *lo = PORT_LO;
    *hi = PORT_HI;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    unsigned eph_lo = 0, eph_hi = 0;
    if (f) {
        if (fscanf(f, "%u %u", &eph_lo, &eph_hi) == 2 && eph_lo < *hi)
            *hi = eph_lo;
        fclose(f);
    }
    return *hi >= *lo + 100 ? 0 : -ERANGE;
}

/* 0 if port binds on 0.0.0.0 (nothing listens on it, nothing holds it in TIME_WAIT). */
static int port_binds(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

/* The kernel's pick (bind to port 0), the fallback when no range or record is usable. */
static int port_from_kernel(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        rc = -errno;
    else
        *port = ntohs(a.sin_port);
    close(fd);
    return rc;
}

/* The start time of process pid (field 22 of /proc/<pid>/stat, clock ticks since boot), or 0
 * when it cannot be read (no such process, no /proc). */
static unsigned long long proc_start(long pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    char *buf = kvt_file_read(path);
    char *p = buf ? strrchr(buf, ')') : NULL; /* the command name may hold spaces and ')' */
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    unsigned long long start = p ? strtoull(p + 1, NULL, 10) : 0;
    free(buf);
    return start;
}

/* 1 if the record <dirfd>/<name> names a live process, or cannot be opened (then it is not
 * taken over on a guess); 0 if there is none, its process is dead, its pid now belongs to a
 * process started at another time, or it holds no pid (its writer died mid-claim: records
 * are written under the lock the caller holds). */
static int record_live(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    unsigned long long start = strtoull(end, NULL, 10); /* 0: not recorded */
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
        return 0;
    unsigned long long now = start ? proc_start(pid) : 0;
    return !(start && now && now != start);
}

/* Writes this process's pid and start time as the record <dirfd>/<name> (replacing a dead
 * owner's). */
static int record_claim(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return -errno;
    char buf[64];
    int n = snprintf(buf, sizeof buf, "%ld %llu\n", (long)getpid(), proc_start((long)getpid()));
    int rc = write(fd, buf, (size_t)n) == n ? 0 : -EIO;
    close(fd);
    return rc;
}

/* The records' directory, opened (created mode 1777 if missing); -errno if unusable. */
static int records_open(void)
{
    const char *d = getenv("KV_TEST_PORT_DIR");
    if (!d || !*d)
        d = "/tmp/kvt-ports";
    if (mkdir(d, 01777) == 0)
        (void)chmod(d, 01777); /* past the umask: every user's tests share it */
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int kvt_log_port_taken(const char *text)
{
    return text &&
           (strstr(text, "address already in use") || strstr(text, "Address already in use") ||
            strstr(text, "Address in use") || strstr(text, "EADDRINUSE"));
}

int kvt_port_free(uint16_t *port)
{
    unsigned lo, hi;
    int rc = port_range(&lo, &hi);
    if (rc == -ERANGE)
        return port_from_kernel(port);
    if (rc < 0)
        return rc;
    int dirfd = records_open();
    int lockfd = dirfd < 0 ? -1 : openat(dirfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lockfd >= 0 && flock(lockfd, LOCK_EX) != 0) {
        close(lockfd);
        lockfd = -1;
    }
    /* a different start per call and per process, so that concurrent pickers rarely contend */
    uint64_t x = (uint64_t)kvt_now_us() ^ ((uint64_t)getpid() << 32);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    unsigned span = hi - lo, start = (unsigned)(x % span);
    rc = -EADDRINUSE;
    for (unsigned k = 0; k < span; k++) {
        unsigned p = lo + (start + k) % span;
        char name[16];
        snprintf(name, sizeof name, "%u", p);
        if (lockfd >= 0 && record_live(dirfd, name))
            continue;
        if (port_binds(p) != 0)
            continue;
        if (lockfd >= 0 && record_claim(dirfd, name) != 0)
            continue;
        *port = (uint16_t)p;
        rc = 0;
        break;
    }
    if (lockfd >= 0)
        close(lockfd); /* releases the flock */
    if (dirfd >= 0)
        close(dirfd);
    return rc;
}
