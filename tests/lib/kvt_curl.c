/*
 * kvt_curl.c - one curl run for the tests (kvt_curl.h).
 */
#include "kvt_curl.h"

#include "kvt_proc.h"

#include <errno.h>
#include <stdio.h>

int kvt_curl(const kvt_curl_req *req, char *out, size_t cap)
{
    char max_time[16];
    snprintf(max_time, sizeof max_time, "%d", req->max_time_s);
    const char *argv[32] = {"/usr/bin/curl", "-sS", "--max-time", max_time};
    size_t n = 4;
    const char *const flags[][2] = {
        {"--cacert", req->cacert}, {"--cert", req->cert}, {"--key", req->key}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (flags[i][1]) {
            argv[n++] = flags[i][0];
            argv[n++] = flags[i][1];
        }
    }
    for (size_t i = 0; req->args && req->args[i]; i++) {
        if (n >= sizeof argv / sizeof argv[0] - 2)
            return -E2BIG;
        argv[n++] = req->args[i];
    }
    argv[n++] = req->url;
    argv[n] = NULL;
    kvt_cmd_result r;
    int rc = kvt_run(argv, NULL, NULL, 0, (uint32_t)req->max_time_s * 1000 + 10000, &r);
    if (rc < 0)
        return rc;
    int code = r.timed_out ? 999 : r.exit_code;
    if (out)
        snprintf(out, cap, "%s%s", r.out, r.err);
    kvt_cmd_result_free(&r);
    return code;
}
