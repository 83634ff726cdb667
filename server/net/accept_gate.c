#include "net/accept_gate.h"

#include <string.h>

/* After the iteration's poll phase: a new iteration's budget, and the listeners paused in
 * this one resume (their owner's callback accepts the socket libuv kept, which re-arms the
 * listener's watcher). */
static void on_check(uv_check_t *h)
{
    kv_accept_gate *g = (kv_accept_gate *)h;
    uv_stream_t *resume[KV_ACCEPT_GATE_MAX_LISTENERS];
    size_t k = g->n_deferred;
    memcpy(resume, g->deferred, k * sizeof(resume[0]));
    g->n_deferred = 0;
    g->n = 0;
    for (size_t i = 0; i < k; i++)
        g->cb(resume[i], 0);
    /* the resumed accepts count towards the next iteration; keep resetting until idle */
    if (g->n == 0 && g->n_deferred == 0)
        uv_check_stop(h);
}

int kv_accept_gate_init(kv_accept_gate *g, uv_loop_t *loop, unsigned burst, uv_connection_cb cb,
                        void *data)
{
    memset(g, 0, sizeof(*g));
    g->cb = cb;
    g->burst = burst ? burst : KV_ACCEPT_BURST;
    int rc = uv_check_init(loop, &g->check);
    if (rc != 0)
        return rc;
    g->check.data = data;
    uv_unref((uv_handle_t *)&g->check);
    return 0;
}

int kv_accept_gate_admit(kv_accept_gate *g, uv_stream_t *server)
{
    if (g->n < g->burst) {
        if (g->n++ == 0 && !uv_is_closing((uv_handle_t *)&g->check))
            uv_check_start(&g->check, on_check);
        return 1;
    }
    for (size_t i = 0; i < g->n_deferred; i++)
        if (g->deferred[i] == server)
            return 0;
    if (g->n_deferred == KV_ACCEPT_GATE_MAX_LISTENERS)
        return 1; /* more listeners than the gate tracks: never strand one */
    g->deferred[g->n_deferred++] = server;
    g->deferrals++;
    return 0;
}

void kv_accept_gate_close(kv_accept_gate *g, uv_close_cb close_cb)
{
    g->n_deferred = 0;
    uv_close((uv_handle_t *)&g->check, close_cb);
}
