/* fixture.c - see fixture.h. */
#include "fixture.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint8_t fx_pattern(uint64_t seq, uint64_t k)
{
    uint64_t x = seq * 0x9E3779B97F4A7C15ull + k / 8;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)(x >> (8 * (k % 8)));
}

static void tick_cb(uv_timer_t *t)
{
    (void)t;
}

void fx_init(fx *f)
{
    memset(f, 0, sizeof(*f));
    signal(SIGPIPE, SIG_IGN); /* as kvd's main(): peer_net.h's contract */
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    uv_timer_init(&f->loop, &f->tick);
    uv_timer_start(&f->tick, tick_cb, 5, 5);
    snprintf(f->dir, sizeof(f->dir), "/tmp/kv-peer-test-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    for (int i = 0; i < FX_MAX; i++) {
        f->n[i].f = f;
        f->n[i].id = (uint64_t)i + 1;
    }
}

static void walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    fprintf(stderr, "leaked handle type %s\n", uv_handle_type_name(h->type));
}

void fx_fini(fx *f)
{
    for (int i = 0; i < FX_MAX; i++)
        if (f->n[i].net)
            fx_stop(f, i);
    uv_close((uv_handle_t *)&f->tick, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_walk(&f->loop, walk_cb, NULL);
    cr_assert_eq(uv_loop_close(&f->loop), 0, "handles leaked");
    for (int i = 0; i < FX_MAX; i++)
        kv_metrics_free(f->n[i].m);
    cr_assert_eq(kvt_rmtree(f->dir), 0);
}

static void on_message(void *arg, uint64_t from, uint32_t type, const uint8_t *buf, size_t len)
{
    fx_node *n = arg;
    (void)type;
    n->msgs++;
    n->bytes += len;
    if (len < 8 || from < 1 || from > FX_MAX) {
        n->content_errors++;
        return;
    }
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++)
        seq = (seq << 8) | buf[i];
    if (seq != n->next_seq[from])
        n->order_errors++;
    n->next_seq[from] = seq + 1;
    for (size_t k = 8; k < len; k++)
        if (buf[k] != fx_pattern(seq, k)) {
            n->content_errors++;
            break;
        }
}

static void on_snapshot(void *arg, uint64_t from, const uint8_t *hdr, size_t hdr_len,
                        const char *path)
{
    fx_node *n = arg;
    (void)from;
    n->snaps++;
    snprintf(n->snap_path, sizeof(n->snap_path), "%s", path);
    n->snap_hdr_len = hdr_len < sizeof(n->snap_hdr) ? hdr_len : sizeof(n->snap_hdr);
    memcpy(n->snap_hdr, hdr, n->snap_hdr_len);
}

static void on_peer_state(void *arg, uint64_t id, int up)
{
    fx_node *n = arg;
    if (id >= 1 && id <= FX_MAX) {
        n->up[id] = up;
        if (!up)
            n->downs[id]++;
    }
}

void fx_config(fx *f, int i, uint64_t cluster)
{
    fx_node *n = &f->n[i];
    kv_peer_net_config_default(&n->cfg);
    n->cluster = cluster;
    n->cfg.self_id = n->id;
    n->cfg.cluster_id = cluster;
    n->cfg.ping_interval_ms = 100;
    n->cfg.dial_backoff_min_ms = 20;
    n->cfg.dial_backoff_max_ms = 200;
    n->cfg.seed = 42 + (uint64_t)i;
}

static int members_json(void *arg, char **json, size_t *len)
{
    fx_node *n = arg;
    *json = strdup(n->members_json);
    *len = *json ? strlen(*json) : 0;
    return *json ? 0 : -ENOMEM;
}

void fx_start(fx *f, int i)
{
    fx_node *n = &f->n[i];
    static char urls[FX_MAX][64];
    static char dirs[FX_MAX][300];
    snprintf(urls[i], sizeof(urls[i]), "http://%s:%d",
             n->listen_host ? n->listen_host : "127.0.0.1", n->port);
    snprintf(dirs[i], sizeof(dirs[i]), "%s/snap%d", f->dir, i);
    n->cfg.listen_urls[0] = urls[i];
    n->cfg.n_listen = 1;
    n->cfg.snap_dir = dirs[i];
    if (!n->m)
        cr_assert_eq(kv_metrics_new(&n->m, 0), 0);
    memset(n->up, 0, sizeof(n->up));
    memset(n->next_seq, 0, sizeof(n->next_seq));
    kv_peer_handler h = {.arg = n,
                         .on_message = on_message,
                         .on_snapshot = on_snapshot,
                         .on_peer_state = on_peer_state,
                         .members_json = n->members_json ? members_json : NULL};
    int rc = kv_peer_net_start(&n->net, &f->loop, &n->cfg, &h, n->m);
    cr_assert_eq(rc, 0, "start member %d: %d", i, rc);
    n->port = kv_peer_net_listen_port(n->net, 0);
    cr_assert_gt(n->port, 0);
}

void fx_stop(fx *f, int i)
{
    kv_peer_net_close(f->n[i].net);
    f->n[i].net = NULL;
    for (int k = 0; k < 5; k++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
}

void fx_add(fx *f, int i, int j)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->n[j].port);
    cr_assert_eq(kv_peer_net_add_peer(f->n[i].net, f->n[j].id, url), 0);
}

int fx_run_until(fx *f, int (*cond)(void *), void *arg, int timeout_ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)timeout_ms * 1000000ull;
    int ok;
    while (!(ok = cond(arg)) && uv_hrtime() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
    return ok;
}

void fx_run_for(fx *f, int ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000ull;
    while (uv_hrtime() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
}

int fx_send(fx *f, int i, int j, uint32_t type, uint64_t seq, size_t len)
{
    static uint8_t buf[1 << 20];
    cr_assert(len >= 8 && len <= sizeof(buf));
    for (int k = 0; k < 8; k++)
        buf[k] = (uint8_t)(seq >> (56 - 8 * k));
    for (size_t k = 8; k < len; k++)
        buf[k] = fx_pattern(seq, k);
    return kv_peer_net_send(f->n[i].net, f->n[j].id, type, buf, len);
}

double fx_metric(fx *f, int i, const char *name, uint64_t peer)
{
    char l[64];
    snprintf(l, sizeof(l), "peer=\"%llx\"", (unsigned long long)peer);
    kv_metric *m = strstr(name, "_total") ? kv_metrics_counter(f->n[i].m, name, "x", l)
                                          : kv_metrics_gauge(f->n[i].m, name, "x", l);
    return kv_metric_value(m);
}

static int count_established(int port, int remote)
{
    FILE *fp = fopen("/proc/net/tcp", "r");
    cr_assert_not_null(fp);
    char line[512];
    int n = 0;
    /* each socket once: a listing read page by page can show one twice when others open or
     * close sockets meanwhile (tests/client/testutil.c count_in) */
    unsigned long seen[256];
    if (!fgets(line, sizeof(line), fp)) {
        fclose(fp);
        return 0;
    }
    while (fgets(line, sizeof(line), fp)) {
        unsigned lport, rport, st;
        unsigned long ino;
        if (sscanf(line, " %*d: %*8x:%x %*8x:%x %x %*s %*s %*s %*s %*s %lu", &lport, &rport, &st,
                   &ino) != 4)
            continue;
        if (st != 1 || (int)(remote ? rport : lport) != port)
            continue;
        int dup = 0;
        for (int i = 0; i < n && i < 256 && !dup; i++)
            dup = seen[i] == ino;
        if (dup)
            continue;
        if (n < 256)
            seen[n] = ino;
        n++;
    }
    fclose(fp);
    return n;
}

int fx_established_local(int port)
{
    return count_established(port, 0);
}

int fx_established_remote(int port)
{
    return count_established(port, 1);
}

static uint64_t status_kb(const char *key)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (fp && fgets(line, sizeof(line), fp))
        if (strncmp(line, key, kl) == 0)
            v = strtoull(line + kl, NULL, 10);
    if (fp)
        fclose(fp);
    return v * 1024;
}

uint64_t fx_rss(void)
{
    return status_kb("VmRSS:");
}

uint64_t fx_hwm(void)
{
    return status_kb("VmHWM:");
}

void fx_reset_hwm(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "5", 1) != 1)
            fprintf(stderr, "cannot reset VmHWM\n");
        close(fd);
    }
}

typedef struct pair_arg {
    fx *f;
    int a, b;
} pair_arg;

static int both_up(void *arg)
{
    pair_arg *p = arg;
    fx *f = p->f;
    return kv_peer_net_is_up(f->n[p->a].net, f->n[p->b].id) &&
           kv_peer_net_is_up(f->n[p->b].net, f->n[p->a].id);
}

void fx_wait_up(fx *f, int a, int b)
{
    pair_arg p = {f, a, b};
    cr_assert(fx_run_until(f, both_up, &p, 10000), "members %d and %d never connected", a, b);
}

void fx_start_pair(fx *f)
{
    fx_init(f);
    fx_config(f, 0, 0xc1);
    fx_config(f, 1, 0xc1);
    fx_start(f, 0);
    fx_start(f, 1);
    fx_add(f, 0, 1);
    fx_add(f, 1, 0);
    fx_wait_up(f, 0, 1);
}
