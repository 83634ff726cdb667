/*
 * disk_failpoint.c: slow and failing fsync of the raft ready commits (see disk_failpoint.h).
 * The functional suite (functional/cases.c FAILPOINT_SLOW_FSYNC_LEADER,
 * FAILPOINT_FSYNC_ERROR_ONE_FOLLOWER) and tests/cluster/test_disk_failpoint.c drive it.
 */
#include "node/disk_failpoint.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct kv_disk_fp {
    uv_signal_t slow_sig; /* SIGRTMIN+1: toggles the delay (when delay_ms > 0) */
    uv_signal_t eio_sig;  /* SIGRTMIN+2: arms the failure (when eio_enabled) */
    int n_open;           /* signal handles not closed yet */
    uint32_t delay_ms;
    int eio_enabled;
    atomic_int slow_on;
    atomic_int eio_armed;
};

static uint32_t env_u32(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    return *end == '\0' && n <= 3600000ul ? (uint32_t)n : 0;
}

static void on_slow(uv_signal_t *sig, int signum)
{
    (void)signum;
    kv_disk_fp *fp = sig->data;
    int on = !atomic_load(&fp->slow_on);
    atomic_store(&fp->slow_on, on);
    fprintf(stderr, "kvd: failpoint: slow fsync %s (%u ms per durable commit)\n", on ? "on" : "off",
            fp->delay_ms);
}

static void on_eio(uv_signal_t *sig, int signum)
{
    (void)signum;
    kv_disk_fp *fp = sig->data;
    atomic_store(&fp->eio_armed, 1);
    fprintf(stderr, "kvd: failpoint: the next durable commit fails (fsync EIO)\n");
}

static void on_closed(uv_handle_t *h)
{
    kv_disk_fp *fp = h->data;
    if (--fp->n_open == 0)
        free(fp);
}

int kv_disk_fp_open(kv_disk_fp **out, uv_loop_t *loop)
{
    *out = NULL;
    uint32_t delay = env_u32("KVD_FAILPOINT_FSYNC_DELAY_MS");
    int eio = env_u32("KVD_FAILPOINT_FSYNC_EIO") != 0;
    if (delay == 0 && !eio)
        return 0;
    kv_disk_fp *fp = calloc(1, sizeof(*fp));
    if (fp == NULL)
        return -ENOMEM;
    fp->delay_ms = delay;
    fp->eio_enabled = eio;
    atomic_init(&fp->slow_on, 0);
    atomic_init(&fp->eio_armed, 0);
    int rc = 0;
    if (delay) {
        rc = uv_signal_init(loop, &fp->slow_sig);
        if (rc < 0)
            goto fail;
        fp->slow_sig.data = fp;
        fp->n_open++;
        rc = uv_signal_start(&fp->slow_sig, on_slow, SIGRTMIN + 1);
        if (rc < 0)
            goto fail;
    }
    if (eio) {
        rc = uv_signal_init(loop, &fp->eio_sig);
        if (rc < 0)
            goto fail;
        fp->eio_sig.data = fp;
        fp->n_open++;
        rc = uv_signal_start(&fp->eio_sig, on_eio, SIGRTMIN + 2);
        if (rc < 0)
            goto fail;
    }
    fprintf(stderr,
            "kvd: failpoint: disk failpoints armed (slow fsync %u ms: SIGRTMIN+1; "
            "failing fsync: %s)\n",
            delay, eio ? "SIGRTMIN+2" : "off");
    *out = fp;
    return 0;
fail:
    if (fp->n_open == 0)
        free(fp);
    else
        kv_disk_fp_close(fp);
    return rc;
}

void kv_disk_fp_close(kv_disk_fp *fp)
{
    if (fp == NULL)
        return;
    int had_slow = fp->delay_ms != 0, had_eio = fp->eio_enabled;
    int open = fp->n_open;
    /* handles were opened in order slow, eio; close the ones that were initialised */
    if (had_slow && open > 0) {
        uv_close((uv_handle_t *)&fp->slow_sig, on_closed);
        open--;
    }
    if (had_eio && open > 0)
        uv_close((uv_handle_t *)&fp->eio_sig, on_closed);
}

int kv_disk_fp_commit(kv_disk_fp *fp, int durable)
{
    if (fp == NULL || !durable)
        return 0;
    if (atomic_exchange(&fp->eio_armed, 0)) {
        fprintf(stderr, "kvd: failpoint: fsync of a raft ready commit returned EIO\n");
        return -EIO;
    }
    if (atomic_load(&fp->slow_on)) {
        struct timespec ts = {fp->delay_ms / 1000u, (long)(fp->delay_ms % 1000u) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}
