/*
 * test_prof: the CPU profiler behind --enable-pprof (server/prof/prof.h). The profile is
 * decoded here field by field (profile.proto's numbers, pb/pb_wire.h), not trusted to be
 * well-formed: a busy function of this test shows as the leaf of most samples; identical
 * stacks fold into one sample; one profile per process; a full buffer drops and says so; the
 * timer is stopped and a late tick is harmless.
 */
#include "common/varint.h"
#include "pb/pb_wire.h"
#include "prof/prof.h"
#include "prof/prof_int.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* ---- a decoded profile ---- */

#define MAXN 4096
typedef struct decoded {
    char *strs[MAXN];
    size_t n_strs;
    /* samples: location ids (leaf first) and values */
    uint64_t s_locs[MAXN][KV_PROF_MAX_DEPTH];
    size_t s_depth[MAXN];
    int64_t s_vals[MAXN][2];
    size_t n_samples;
    uint64_t loc_id[MAXN], loc_func[MAXN], loc_addr[MAXN];
    size_t n_locs;
    uint64_t fn_id[MAXN], fn_name[MAXN];
    size_t n_fns;
    uint64_t period, n_types, n_mappings;
    int64_t comment[8];
    size_t n_comments;
} decoded;

/* The varint at *p (common/varint.h's reader), advancing *p; fails the test if malformed. */
static uint64_t varint(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    size_t n = kv_varint_get(*p, end, &v);
    cr_assert(n > 0, "bad varint");
    *p += n;
    return v;
}

/* The next field of [*p, end) into f, advancing *p; 0 at the end. Asserts well-formedness. */
static int next_field(const uint8_t **p, const uint8_t *end, kv_pb_field *f)
{
    if (*p >= end)
        return 0;
    size_t n = kv_pb_read_field(*p, end, f);
    cr_assert(n > 0, "malformed field at offset");
    *p += n;
    return 1;
}

static uint64_t fval(const kv_pb_field *f)
{
    cr_assert_eq(f->wt, KV_PB_WT_VARINT, "field %u is a varint", f->tag);
    const uint8_t *p = f->val;
    return varint(&p, p + 10);
}

#define FOR_FIELDS(f, p0, len)                                                                     \
    kv_pb_field f;                                                                                 \
    for (const uint8_t *f##_p = (p0), *f##_e = (p0) + (len); next_field(&f##_p, f##_e, &f);)

static void decode(const uint8_t *pb, size_t len, decoded *d)
{
    memset(d, 0, sizeof(*d));
    FOR_FIELDS(f, pb, len)
    {
        if (f.tag == 6) {
            cr_assert(d->n_strs < MAXN);
            char *str = malloc(f.vlen + 1); /* not strndup: the bytes are not NUL-terminated */
            cr_assert(str);
            memcpy(str, f.val, f.vlen);
            str[f.vlen] = '\0';
            d->strs[d->n_strs++] = str;
        } else if (f.tag == 1) {
            d->n_types++;
        } else if (f.tag == 3) {
            d->n_mappings++;
        } else if (f.tag == 12) {
            d->period = fval(&f);
        } else if (f.tag == 13) {
            d->comment[d->n_comments++] = (int64_t)fval(&f);
        } else if (f.tag == 2) {
            size_t i = d->n_samples++;
            cr_assert(i < MAXN);
            FOR_FIELDS(g, f.val, f.vlen)
            {
                cr_assert_eq(g.wt, KV_PB_WT_LEN, "packed");
                const uint8_t *p = g.val, *e = g.val + g.vlen;
                size_t k = 0;
                while (p < e) {
                    uint64_t v = varint(&p, e);
                    if (g.tag == 1) {
                        cr_assert(k < KV_PROF_MAX_DEPTH);
                        d->s_locs[i][k++] = v;
                    } else if (g.tag == 2 && k < 2) {
                        d->s_vals[i][k++] = (int64_t)v;
                    }
                }
                if (g.tag == 1)
                    d->s_depth[i] = k;
            }
        } else if (f.tag == 4) {
            size_t i = d->n_locs++;
            cr_assert(i < MAXN);
            FOR_FIELDS(g, f.val, f.vlen)
            {
                if (g.tag == 1)
                    d->loc_id[i] = fval(&g);
                else if (g.tag == 3)
                    d->loc_addr[i] = fval(&g);
                else if (g.tag == 4) {
                    FOR_FIELDS(h, g.val, g.vlen)
                    {
                        if (h.tag == 1)
                            d->loc_func[i] = fval(&h);
                    }
                }
            }
        } else if (f.tag == 5) {
            size_t i = d->n_fns++;
            cr_assert(i < MAXN);
            FOR_FIELDS(g, f.val, f.vlen)
            {
                if (g.tag == 1)
                    d->fn_id[i] = fval(&g);
                else if (g.tag == 2)
                    d->fn_name[i] = fval(&g);
            }
        }
    }
    cr_assert(d->n_strs > 0 && d->strs[0][0] == '\0', "string_table[0] is \"\"");
}

static void decoded_free(decoded *d)
{
    for (size_t i = 0; i < d->n_strs; i++)
        free(d->strs[i]);
}

/* The function name of location id, or NULL. */
static const char *loc_name(const decoded *d, uint64_t id)
{
    for (size_t i = 0; i < d->n_locs; i++) {
        if (d->loc_id[i] != id)
            continue;
        for (size_t j = 0; j < d->n_fns; j++)
            if (d->fn_id[j] == d->loc_func[i] && d->loc_func[i]) {
                cr_assert(d->fn_name[j] < d->n_strs);
                return d->strs[d->fn_name[j]];
            }
        return NULL;
    }
    cr_assert_fail("sample names location %llu, which is not in the profile",
                   (unsigned long long)id);
    return NULL;
}

/* Samples (counts) whose stack holds name anywhere / at the leaf. */
static void count_named(const decoded *d, const char *name, int64_t *any, int64_t *leaf,
                        int64_t *total)
{
    *any = *leaf = *total = 0;
    for (size_t i = 0; i < d->n_samples; i++) {
        *total += d->s_vals[i][0];
        if (getenv("KVT_PROF_DUMP")) {
            fprintf(stderr, "sample x%lld:", (long long)d->s_vals[i][0]);
            for (size_t k = 0; k < d->s_depth[i]; k++) {
                const char *n = loc_name(d, d->s_locs[i][k]);
                fprintf(stderr, " %s", n ? n : "?");
            }
            fprintf(stderr, "\n");
        }
        for (size_t k = 0; k < d->s_depth[i]; k++) {
            const char *n = loc_name(d, d->s_locs[i][k]);
            if (n && strcmp(n, name) == 0) {
                *any += d->s_vals[i][0];
                if (k == 0)
                    *leaf += d->s_vals[i][0];
                break;
            }
        }
    }
}

/* ---- the work to be sampled ---- */

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Not static, never inlined: the symbol the profile must name. */
__attribute__((noinline, noclone)) uint64_t kvt_prof_busy_loop(double seconds)
{
    volatile uint64_t x = 1;
    double t0 = cpu_seconds();
    while (cpu_seconds() - t0 < seconds)
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

/* noclone: no kvt_prof_caller.isra.0 */
__attribute__((noinline, noclone)) static uint64_t kvt_prof_caller(double seconds)
{
    uint64_t r = kvt_prof_busy_loop(seconds);
    __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays on the stack */
    return r;
}

Test(prof, a_busy_function_is_the_leaf_of_most_samples)
{
    kv_prof *p;
    /* 100 Hz, Go's rate: a rate above the kernel's tick (250 Hz on Debian) undercounts */
    cr_assert_eq(kv_prof_start(&p, 100, KV_PROF_DEFAULT_BUF_BYTES), 0);
    kvt_prof_caller(0.6);
    uint64_t taken, dropped;
    kv_prof_counts(p, &taken, &dropped);
    uint8_t *pb;
    size_t len;
    cr_assert_eq(kv_prof_stop(p, &pb, &len), 0);
    decoded *d = calloc(1, sizeof(*d));
    decode(pb, len, d);
    cr_assert_eq(d->period, 10000000, "100 Hz: 10 ms of CPU per sample");
    cr_assert_eq(d->n_types, 2, "samples/count and cpu/nanoseconds");
    cr_assert_gt(d->n_mappings, 0);
    int64_t any, leaf, total, in_caller, leaf2, total2;
    count_named(d, "kvt_prof_busy_loop", &any, &leaf, &total);
    count_named(d, "kvt_prof_caller", &in_caller, &leaf2, &total2);
    cr_log_info("taken %llu dropped %llu; %lld samples, %lld in the busy loop (%lld at its "
                "leaf, %lld under its caller)",
                (unsigned long long)taken, (unsigned long long)dropped, (long long)total,
                (long long)any, (long long)leaf, (long long)in_caller);
    /* 0.6 s of CPU at 100 Hz: about 60 samples */
    cr_assert_geq(total, 40, "samples: %lld", (long long)total);
    cr_assert_eq((uint64_t)total, taken, "every sample taken is in the profile");
    cr_assert_geq(any * 10, total * 8, "the busy loop in %lld of %lld", (long long)any,
                  (long long)total);
    /* its caller is found by unwinding through the signal frame */
    cr_assert_geq(in_caller * 10, total * 8, "its caller in %lld of %lld", (long long)in_caller,
                  (long long)total);
    for (size_t i = 0; i < d->n_samples; i++) /* cpu = count x period */
        cr_assert_eq(d->s_vals[i][1], d->s_vals[i][0] * 10000000);
    decoded_free(d);
    free(d);
    free(pb);
}

__attribute__((noinline)) static int kvt_prof_sym_a(int x)
{
    return x * 3 + 1;
}

__attribute__((noinline)) static int kvt_prof_sym_b(int x)
{
    return x * 5 + 2;
}

Test(prof, identical_stacks_fold_and_every_pc_is_symbolized)
{
    uintptr_t a = (uintptr_t)&kvt_prof_sym_a + 1, b = (uintptr_t)&kvt_prof_sym_b + 1;
    /* stacks: [a], [a, b] twice, [b, a]; b as a caller is a return address (pc - 1) */
    uintptr_t w[] = {1, a, 2, a, b + 1, 2, a, b + 1, 2, b, a + 1};
    kv_prof_stacks st = {.words = w, .n_words = sizeof(w) / sizeof(w[0]), .period_ns = 10000000};
    uint8_t *pb;
    size_t len;
    cr_assert_eq(kv_prof__encode(&st, &pb, &len), 0);
    decoded *d = calloc(1, sizeof(*d));
    decode(pb, len, d);
    cr_assert_eq(d->n_samples, 3, "4 stacks, 3 distinct: %zu", d->n_samples);
    cr_assert_eq(d->n_locs, 2, "a, and b (the callers' b + 1 - 1 and a + 1 - 1): %zu", d->n_locs);
    int found_pair = 0;
    for (size_t i = 0; i < d->n_samples; i++) {
        const char *n0 = loc_name(d, d->s_locs[i][0]);
        cr_assert(n0);
        if (d->s_depth[i] == 2 && strcmp(n0, "kvt_prof_sym_a") == 0) {
            cr_assert_str_eq(loc_name(d, d->s_locs[i][1]), "kvt_prof_sym_b");
            cr_assert_eq(d->s_vals[i][0], 2);
            cr_assert_eq(d->s_vals[i][1], 20000000);
            found_pair = 1;
        }
    }
    cr_assert(found_pair);
    cr_assert_eq(d->n_fns, 2, "one function per name");
    decoded_free(d);
    free(d);
    free(pb);
}

Test(prof, one_profile_per_process)
{
    kv_prof *p, *q;
    cr_assert_eq(kv_prof_start(&p, 100, 4096), 0);
    cr_assert_eq(kv_prof_start(&q, 100, 4096), -EBUSY);
    cr_assert_null(q);
    kv_prof_discard(p);
    cr_assert_eq(kv_prof_start(&q, 100, 4096), 0, "free again once stopped");
    kv_prof_discard(q);
    cr_assert_eq(kv_prof_start(&q, 0, 4096), -EINVAL);
    cr_assert_eq(kv_prof_start(&q, 100, 16), -EINVAL);
}

Test(prof, a_full_buffer_drops_samples_and_says_so)
{
    kv_prof *p;
    cr_assert_eq(kv_prof_start(&p, 1000, 4096), 0); /* 512 words */
    kvt_prof_caller(0.3);
    uint64_t taken, dropped;
    kv_prof_counts(p, &taken, &dropped);
    uint8_t *pb;
    size_t len;
    cr_assert_eq(kv_prof_stop(p, &pb, &len), 0);
    decoded *d = calloc(1, sizeof(*d));
    decode(pb, len, d);
    int64_t any, leaf, total;
    count_named(d, "kvt_prof_busy_loop", &any, &leaf, &total);
    cr_log_info("taken %llu, dropped %llu, in the profile %lld", (unsigned long long)taken,
                (unsigned long long)dropped, (long long)total);
    cr_assert_gt(dropped, 0);
    cr_assert_eq((uint64_t)total, taken, "the samples that fit, all of them");
    cr_assert_eq(d->n_comments, 1);
    cr_assert(strstr(d->strs[d->comment[0]], "samples dropped (profile buffer full)"));
    decoded_free(d);
    free(d);
    free(pb);
}

Test(prof, the_timer_is_off_after_and_a_late_tick_is_harmless)
{
    kv_prof *p;
    cr_assert_eq(kv_prof_start(&p, 100, 4096), 0);
    kvt_prof_caller(0.05);
    kv_prof_discard(p);
    struct itimerval it;
    getitimer(ITIMER_PROF, &it);
    cr_assert(it.it_interval.tv_sec == 0 && it.it_interval.tv_usec == 0 &&
                  it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0,
              "the timer is off again");
    /* a tick that was pending at stop: dropped, the process lives (the default would end it) */
    raise(SIGPROF);
    struct sigaction sa;
    sigaction(SIGPROF, NULL, &sa);
    cr_assert(sa.sa_handler != SIG_DFL);
}
