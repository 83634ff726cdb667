/*
 * heap_trim (server/daemon/heap_trim.h): malloc_trim runs on the thread pool only after the
 * activity counter moved, and it gives the free pages between live chunks back to the kernel.
 */
#include "daemon/config.h"
#include "daemon/heap_trim.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define KVT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVT_ASAN 1
#endif
#endif

static uint64_t activity(void *arg)
{
    return *(uint64_t *)arg;
}

static void stop_loop(uv_timer_t *h)
{
    uv_stop(h->loop);
}

/* Runs loop for ms milliseconds. */
static void run_for(uv_loop_t *loop, uint64_t ms)
{
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, stop_loop, ms, 0);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

/* Runs loop until t has run want trims (at most 5 s; a busy CI machine may be slow to run the
 * pool's work), then 50 ms more; returns the count. */
static uint64_t run_until(uv_loop_t *loop, const kv_heap_trim *t, uint64_t want)
{
    for (int i = 0; i < 500 && kv_heap_trim_count(t) < want; i++)
        run_for(loop, 10);
    run_for(loop, 50);
    return kv_heap_trim_count(t);
}

Test(heap_trim, trims_only_after_activity)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    uint64_t applied = 7;
    kv_heap_trim *t = NULL;
    cr_assert_eq(kv_heap_trim_start(&t, &loop, 10, activity, &applied, NULL), 0);
    cr_assert_not_null(t);
    run_for(&loop, 80);
    cr_assert_eq(kv_heap_trim_count(t), 0, "no activity, no trim");
    applied++;
    cr_assert_eq(run_until(&loop, t, 1), 1, "one trim per change of the counter");
    applied += 5;
    cr_assert_eq(run_until(&loop, t, 2), 2);
    kv_heap_trim_stop(t);
    uv_run(&loop, UV_RUN_DEFAULT); /* frees it */
    cr_assert_eq(uv_loop_close(&loop), 0);

    cr_assert_eq(kv_heap_trim_start(&t, &loop, 0, activity, &applied, NULL), 0);
    cr_assert_null(t, "interval 0: off");
}

#ifndef KVT_ASAN
/* Resident bytes of this process (/proc/self/statm). */
static long resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    long size = 0, res = 0;
    cr_assert_eq(fscanf(f, "%ld %ld", &size, &res), 2);
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

#endif

/* 2,000 blocks of 16 KiB with a small live chunk after each: once the blocks are freed the heap
 * cannot shrink from its top, and the pages stay resident until a trim. */
Test(heap_trim, gives_free_pages_between_live_chunks_back)
{
#ifdef KVT_ASAN
    cr_skip_test("ASan's allocator replaces glibc malloc: malloc_trim has nothing to trim");
#else
    enum { N = 2000, BLOCK = 16 << 10 };
    static void *block[N], *pin[N];
    for (int i = 0; i < N; i++) {
        block[i] = malloc(BLOCK);
        pin[i] = malloc(64);
        cr_assert(block[i] && pin[i]);
        for (size_t o = 0; o < BLOCK; o += 1024)
            ((volatile char *)block[i])[o] = 1; /* resident */
    }
    for (int i = 0; i < N; i++)
        free(block[i]);
    long before = resident_bytes();

    uv_loop_t loop;
    uv_loop_init(&loop);
    uint64_t applied = 1;
    kv_heap_trim *t = NULL;
    cr_assert_eq(kv_heap_trim_start(&t, &loop, 10, activity, &applied, NULL), 0);
    applied++;
    cr_assert_eq(run_until(&loop, t, 1), 1);
    long after = resident_bytes();
    kv_heap_trim_stop(t);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    for (int i = 0; i < N; i++)
        free(pin[i]);
    cr_log_info("resident %ld -> %ld KiB", before >> 10, after >> 10);
    /* Each hole holds 3 whole pages: 2,000 x 12 KiB = 23 MiB; at least 16 MiB must go. */
    cr_assert_geq(before - after, 16L << 20, "resident %ld -> %ld KiB", before >> 10, after >> 10);
#endif
}

Test(heap_trim, flag_defaults_and_parsing)
{
    kv_config cfg;
    kv_config_default(&cfg);
    cr_assert_eq(cfg.malloc_trim_interval_ms, 1000, "on by default (1 s)");
    char *argv[] = {"kvd", "--malloc-trim-interval=250ms", NULL};
    char err[256];
    cr_assert_eq(kv_config_parse(&cfg, 2, argv, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cfg.malloc_trim_interval_ms, 250);
    char *off[] = {"kvd", "--malloc-trim-interval", "0", NULL};
    cr_assert_eq(kv_config_parse(&cfg, 3, off, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cfg.malloc_trim_interval_ms, 0);
}
