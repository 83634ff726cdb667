/* hash: every member must report the same HashKV at the same revision (lesson 5). */
#include "check.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

kv_fn_verdict kv_fn_hash_check(const kv_fn_hash_obs *obs, size_t n, char *report, size_t cap)
{
    if (report && cap)
        report[0] = '\0';
    if (n == 0) {
        snprintf(report, cap, "no member answered");
        return KV_FN_FAIL;
    }
    int bad = 0;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!obs[i].ok || obs[i].revision != obs[0].revision || obs[i].hash != obs[0].hash ||
            !obs[0].ok)
            bad = 1;
    }
    for (size_t i = 0; i < n && len + 1 < cap; i++) {
        int w;
        if (!obs[i].ok)
            w = snprintf(report + len, cap - len, "m%d:no answer ", obs[i].member);
        else
            w = snprintf(report + len, cap - len, "m%d:rev %" PRId64 " hash %08x ", obs[i].member,
                         obs[i].revision, obs[i].hash);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (bad && len + 1 < cap)
        snprintf(report + len, cap - len, "MISMATCH");
    return bad ? KV_FN_FAIL : KV_FN_PASS;
}
