/*
 * clock: the monotonic clock (CLOCK_MONOTONIC), read in one place. For deadlines, durations
 * and rate limits; never for wall time, never persisted. Header-only, any thread.
 * Modules whose time must be injectable (the lessor, lessor.h) take a clock function and use
 * these only as its default.
 */
#ifndef KV_COMMON_CLOCK_H
#define KV_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t kv_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t kv_mono_us(void)
{
    return kv_mono_ns() / 1000u;
}

static inline uint64_t kv_mono_ms(void)
{
    return kv_mono_ns() / 1000000u;
}

#endif
