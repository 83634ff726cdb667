/* pcmember: a member started under the powercut shim (contract in pcmember.h). */
#include "pcmember.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KV_POWERCUT_SO
#error "KV_POWERCUT_SO must name libkvd_powercut.so"
#endif

const char *kv_pc_shim_path(void)
{
    return KV_POWERCUT_SO;
}

int kv_pc_member_start(kv_it_server *m, const char *journal, uint64_t kill_at,
                       uint32_t ready_timeout_ms)
{
    const char *asan = getenv("ASAN_OPTIONS");
    char *asan_saved = asan ? strdup(asan) : NULL;
    char asan_new[1024], ka[32];
    /* A sanitized kvd refuses a preloaded library ahead of its runtime unless told not to. */
    snprintf(asan_new, sizeof asan_new, "%s%sverify_asan_link_order=0", asan ? asan : "",
             asan && *asan ? ":" : "");
    snprintf(ka, sizeof ka, "%" PRIu64, kill_at);
    setenv("ASAN_OPTIONS", asan_new, 1);
    setenv("LD_PRELOAD", KV_POWERCUT_SO, 1);
    setenv("POWERCUT_DIR", m->data_dir, 1);
    setenv("POWERCUT_JOURNAL", journal, 1);
    setenv("POWERCUT_KILL_AT", ka, 1);
    int rc = kv_it_server_start(m, ready_timeout_ms);
    unsetenv("POWERCUT_KILL_AT");
    unsetenv("POWERCUT_JOURNAL");
    unsetenv("POWERCUT_DIR");
    unsetenv("LD_PRELOAD");
    if (asan_saved)
        setenv("ASAN_OPTIONS", asan_saved, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(asan_saved);
    return rc;
}
