/*
 * kvt_util: small helpers shared by the test fixtures: clocks, free loopback ports (kvt_port.c),
 * temporary directories, a bounded HTTP/1.0 GET and Prometheus sample lookup.
 * No global state; every function is thread-safe. Functions return 0 or a negative errno.
 */
#ifndef KVT_UTIL_H
#define KVT_UTIL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Monotonic clocks (arbitrary origin). */
int64_t kvt_now_us(void);
uint64_t kvt_now_ms(void);
void kvt_sleep_ms(uint32_t ms);

/* A free TCP port for a server on 127.0.0.1, not in the kernel's ephemeral range, and not
 * handed out again (to this or any other test process on the machine) while this process
 * lives; see kvt_port.c. -EADDRINUSE if the range is exhausted. */
int kvt_port_free(uint16_t *port);
/* 1 if a server's log text says it could not bind because a port was taken (kvd: "address
 * already in use" or strerror's "Address already in use"; etcd: the same; "EADDRINUSE"). */
int kvt_log_port_taken(const char *text);

/* A private directory created with mkdtemp under $TMPDIR (else /tmp), named
 * <prefix>.XXXXXX. kvt_tmpdir_destroy() removes it recursively unless the environment sets
 * KV_TEST_KEEP_DIRS=1 (then it prints the path to stderr so a failed run can be inspected). */
typedef struct kvt_tmpdir {
    char path[PATH_MAX];
} kvt_tmpdir;

int kvt_tmpdir_create(kvt_tmpdir *d, const char *prefix);
void kvt_tmpdir_destroy(kvt_tmpdir *d);
/* rm -rf path: removes path and everything under it without following symlinks; a no-op
 * (0) if path does not exist. Best effort: it goes on past entries it cannot remove, then
 * returns -ENOTEMPTY if path is still there (or the walk's -errno). -EINVAL for an empty
 * path. The one recursive removal of tests/, bench/ and functional/: no private nftw or
 * system("rm -rf"). */
int kvt_rmtree(const char *path);
/* The whole file at path (at most 16 MiB) as a malloc'd NUL-terminated string; NULL (errno)
 * when it cannot be read. */
char *kvt_file_read(const char *path);
/* The last max bytes of the NUL-terminated s (s itself when it is shorter): a pointer into
 * s, for a failure message that quotes the end of a log. */
const char *kvt_str_tail(const char *s, size_t max);

/* A non-blocking TCP socket connected to 127.0.0.1:port within timeout_ms, or -errno. */
int kvt_connect_loopback(uint16_t port, uint32_t timeout_ms);
/* Sends all of data on a non-blocking socket before deadline (kvt_now_ms() clock): 0, 1 if
 * the peer closed/reset the connection meanwhile, or -errno (-ETIMEDOUT). */
int kvt_send_all(int fd, const char *data, size_t len, uint64_t deadline);

/* HTTP GET http://127.0.0.1:<port><path>, HTTP/1.0, bounded by timeout_ms. *status is the
 * HTTP status, *body (malloc'd, NUL-terminated, caller frees) the body. */
int kvt_http_get(uint16_t port, const char *path, uint32_t timeout_ms, int *status, char **body);

/* Value of Prometheus sample `series` (metric name, optionally with its exact label set as
 * printed) in text. -ENOENT if absent. */
int kvt_metric_value(const char *text, const char *series, double *value);

#endif
