/*
 * watch_failpoint: a testing failpoint that drops ONE watch event, so that the functional
 * suite's watch checker can be shown to catch a server that loses an event
 * (functional/run --inject-bug server-drop-watch-event). Off unless kvd runs with
 * --enable-failpoints and KVD_FAILPOINT_WATCH_DROP_EVENT=N (N > 0) is in its environment:
 * the Nth event the member would send to a watcher (counted over all watchers, from process
 * start) is skipped while the watcher's revision still advances past it.
 * Threads: the hub's loop thread only (state lives in the hub).
 */
#include "watch_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t kv_watch_fp_env(void)
{
    const char *v = getenv("KVD_FAILPOINT_WATCH_DROP_EVENT");
    if (!v || !*v)
        return 0;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    return *end == '\0' ? (uint64_t)n : 0;
}

size_t kv_watch_fp_filter(kv_watch_hub *h, size_t n)
{
    uint64_t at = h->cfg.fp_drop_event_at;
    if (h->fp_dropped || at == 0 || n == 0)
        return n;
    if (h->fp_events + n < at) {
        h->fp_events += n;
        return n;
    }
    size_t i = (size_t)(at - h->fp_events - 1);
    fprintf(stderr, "kvd: warning: failpoint: watch event at revision %" PRId64 " dropped\n",
            h->outs[i]->kv ? h->outs[i]->kv->mod_revision : (int64_t)0);
    memmove(&h->outs[i], &h->outs[i + 1], (n - i - 1) * sizeof(*h->outs));
    memmove(&h->out[i], &h->out[i + 1], (n - i - 1) * sizeof(*h->out));
    h->fp_dropped = true;
    h->fp_events = at;
    return n - 1;
}
