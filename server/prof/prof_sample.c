/* prof_sample: SIGPROF sampling of the running thread's stack (contract: prof.h). */
#include "prof/prof.h"
#include "prof/prof_int.h"

#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

struct kv_prof {
    uintptr_t *words;
    size_t cap;               /* words */
    _Atomic size_t used;      /* words reserved (may pass cap: those samples are dropped) */
    _Atomic uint64_t taken;   /* samples recorded */
    _Atomic uint64_t dropped; /* samples that did not fit */
    _Atomic size_t fill_end;  /* where the reservation that crossed cap began (cap: none) */
    uint64_t period_ns;
    int64_t start_ns;
    uint64_t t0_mono_ns;
    struct itimerval old_it;
};

/*
 * The one piece of process-wide state here: a signal handler gets no argument, so it finds
 * the running profile through this pointer (set while a profile runs, NULL otherwise), and
 * stop waits for handlers in flight through the counter before it frees the profile. It
 * stands for the process-wide timer and signal disposition themselves, which exist once.
 */
static _Atomic(kv_prof *) active_prof;
static _Atomic int handlers_in_flight;

static int64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The interrupted instruction, from the signal's context. */
static uintptr_t context_pc(void *uc)
{
    ucontext_t *u = uc;
#if defined(__x86_64__)
    return (uintptr_t)u->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uintptr_t)u->uc_mcontext.pc;
#else
    (void)u;
    return 0;
#endif
}

static void on_sigprof(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    int saved = errno;
    atomic_fetch_add(&handlers_in_flight, 1); /* before the load: see stop_sampling */
    kv_prof *p = atomic_load(&active_prof);
    if (p) {
        void *frames[KV_PROF_MAX_DEPTH + 8];
        int n = backtrace(frames, (int)(sizeof(frames) / sizeof(frames[0])));
        uintptr_t pc = context_pc(uc);
        /* the unwinder starts here, in the handler: skip to the interrupted frame (the one
         * past the signal trampoline, whose address is the context's pc) */
        int first = -1;
        for (int i = 0; i < n && pc; i++)
            if ((uintptr_t)frames[i] == pc) {
                first = i;
                break;
            }
        void *leaf_only[1] = {(void *)pc};
        void **fr = first >= 0 ? frames + first : leaf_only;
        size_t depth = first >= 0 ? (size_t)(n - first) : (pc ? 1 : 0);
        if (depth > KV_PROF_MAX_DEPTH)
            depth = KV_PROF_MAX_DEPTH;
        if (depth > 0) {
            size_t at = atomic_fetch_add(&p->used, depth + 1);
            if (at + depth + 1 <= p->cap) {
                p->words[at] = depth;
                for (size_t i = 0; i < depth; i++)
                    p->words[at + 1 + i] = (uintptr_t)fr[i];
                atomic_fetch_add(&p->taken, 1);
            } else {
                if (at <= p->cap) /* the one reservation that crossed the end */
                    atomic_store(&p->fill_end, at);
                atomic_fetch_add(&p->dropped, 1);
            }
        }
    }
    atomic_fetch_sub(&handlers_in_flight, 1);
    errno = saved;
}

int kv_prof_start(kv_prof **out, unsigned hz, size_t buf_bytes)
{
    *out = NULL;
    if (hz < 1 || hz > 1000 || buf_bytes < 4096 || buf_bytes > (1u << 30))
        return -EINVAL;
    kv_prof *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    int rc = -ENOMEM;
    p->cap = buf_bytes / sizeof(uintptr_t);
    p->words = malloc(p->cap * sizeof(uintptr_t));
    if (!p->words)
        goto fail_free;
    atomic_init(&p->fill_end, p->cap);
    p->period_ns = 1000000000ull / hz;
    kv_prof *none = NULL;
    if (!atomic_compare_exchange_strong(&active_prof, &none, p)) {
        rc = -EBUSY;
        goto fail_free;
    }
    /* The first backtrace() loads the unwinder (a dlopen, which allocates): not in the
     * handler. */
    void *warm[4];
    (void)backtrace(warm, 4);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0) {
        rc = -errno;
        goto fail_inactive;
    }
    p->start_ns = now_ns(CLOCK_REALTIME);
    p->t0_mono_ns = (uint64_t)now_ns(CLOCK_MONOTONIC);
    struct itimerval it;
    memset(&it, 0, sizeof(it));
    it.it_interval.tv_sec = (time_t)(p->period_ns / 1000000000ull);
    it.it_interval.tv_usec = (suseconds_t)(p->period_ns % 1000000000ull / 1000);
    it.it_value = it.it_interval;
    if (setitimer(ITIMER_PROF, &it, &p->old_it) != 0) {
        rc = -errno;
        goto fail_inactive;
    }
    *out = p;
    return 0;
fail_inactive:
    atomic_store(&active_prof, NULL);
fail_free:
    free(p->words);
    free(p);
    return rc;
}

/* Stops the timer, then waits until no handler can still be writing into p. */
static void stop_sampling(kv_prof *p)
{
    setitimer(ITIMER_PROF, &p->old_it, NULL);
    atomic_store(&active_prof, NULL);
    /* A handler increments the counter before it loads the pointer, so one that saw p is
     * counted now, and any later one sees NULL. Handlers are short (one backtrace). */
    while (atomic_load(&handlers_in_flight) != 0) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    /* The handler stays installed: a SIGPROF still pending from the last tick, on some other
     * thread, finds no profile and is dropped, where SIGPROF's default action would end the
     * process. */
}

void kv_prof_counts(const kv_prof *p, uint64_t *taken, uint64_t *dropped)
{
    *taken = atomic_load(&p->taken);
    *dropped = atomic_load(&p->dropped);
}

void kv_prof_discard(kv_prof *p)
{
    if (!p)
        return;
    stop_sampling(p);
    free(p->words);
    free(p);
}

int kv_prof_stop(kv_prof *p, uint8_t **pb, size_t *len)
{
    stop_sampling(p);
    size_t used = atomic_load(&p->used);
    /* past the end, the samples written in full end where the crossing reservation began */
    kv_prof_stacks st = {
        .words = p->words,
        .n_words = used <= p->cap ? used : atomic_load(&p->fill_end),
        .dropped = atomic_load(&p->dropped),
        .period_ns = p->period_ns,
        .start_ns = p->start_ns,
        .duration_ns = now_ns(CLOCK_MONOTONIC) - (int64_t)p->t0_mono_ns,
    };
    int rc = kv_prof__encode(&st, pb, len);
    free(p->words);
    free(p);
    return rc;
}
