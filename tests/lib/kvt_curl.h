/*
 * kvt_curl: one run of curl on a URL (/usr/bin/curl -sS --max-time <s>), with a test's
 * certificate files and more arguments, for the tests of HTTP endpoints (the JSON gateway,
 * /metrics and /health, over TLS or not).
 *
 * Contract: the run is killed 10 s after curl's own --max-time. Returns curl's exit code (0:
 * done; with "-f" among args an HTTP error status fails too), 999 when it was killed at that
 * deadline, or a negative errno when curl could not be run (the caller asserts >= 0). Its
 * stdout then stderr go to out (NUL-terminated, truncated to cap; out may be NULL).
 * Threads: as kvt_run (kvt_proc.h), which it calls.
 */
#ifndef KVT_CURL_H
#define KVT_CURL_H

#include <stddef.h>

typedef struct kvt_curl_req {
    const char *url;
    int max_time_s;          /* curl's --max-time */
    const char *cacert;      /* --cacert file, or NULL */
    const char *cert, *key;  /* --cert/--key (a client certificate), or NULL */
    const char *const *args; /* more arguments before the URL (NULL-terminated), or NULL */
} kvt_curl_req;

int kvt_curl(const kvt_curl_req *req, char *out, size_t cap);

#endif
