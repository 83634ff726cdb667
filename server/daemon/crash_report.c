/* crash_report: a fatal signal's name and stack on fd 2 (contract: crash_report.h). */
#include "daemon/crash_report.h"

#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define KV_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KV_SANITIZED 1
#endif
#endif

#ifdef KV_SANITIZED
int kv_crash_report_install(void)
{
    return 1; /* the sanitizer's handlers report (crash_report.h) */
}
#else
#define MAX_FRAMES 64

static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV";
    case SIGBUS:
        return "SIGBUS";
    case SIGFPE:
        return "SIGFPE";
    case SIGILL:
        return "SIGILL";
    case SIGABRT:
        return "SIGABRT";
    default:
        return "?";
    }
}

/* Async-signal-safe appends: no stdio in the handler. */
static size_t put_str(char *buf, size_t at, size_t cap, const char *s)
{
    while (*s && at + 1 < cap)
        buf[at++] = *s++;
    return at;
}

static size_t put_uint(char *buf, size_t at, size_t cap, uintmax_t v, unsigned base)
{
    char tmp[32];
    size_t n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v && n < sizeof(tmp));
    while (n && at + 1 < cap)
        buf[at++] = tmp[--n];
    return at;
}

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(2, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void on_fatal(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    int saved = errno;
    char line[192];
    size_t n = put_str(line, 0, sizeof(line), "\nkvd: fatal: signal ");
    n = put_uint(line, n, sizeof(line), (uintmax_t)sig, 10);
    n = put_str(line, n, sizeof(line), " (");
    n = put_str(line, n, sizeof(line), signal_name(sig));
    if (si && si->si_code <= 0) { /* kill(2), raise(3), abort(3): no faulting address */
        n = put_str(line, n, sizeof(line), ") sent by pid ");
        n = put_uint(line, n, sizeof(line), (uintmax_t)si->si_pid, 10);
    } else {
        n = put_str(line, n, sizeof(line), ") at address 0x");
        n = put_uint(line, n, sizeof(line), (uintmax_t)(uintptr_t)(si ? si->si_addr : NULL), 16);
    }
    n = put_str(line, n, sizeof(line),
                "; stack follows (addr2line -f -e kvd <+offset>; README.md \"A crash\")\n");
    write_all(line, n);
    void *frames[MAX_FRAMES];
    int nf = backtrace(frames, MAX_FRAMES);
    backtrace_symbols_fd(frames, nf, 2);
    write_all("kvd: fatal: end of stack\n", 25);
    /* SA_RESETHAND restored the default action: die of the same signal (status, core). */
    signal(sig, SIG_DFL);
    errno = saved;
    raise(sig);
}

int kv_crash_report_install(void)
{
    /* The first backtrace() loads the unwinder (libgcc_s), which allocates: do it now. */
    void *warm[2];
    (void)backtrace(warm, 2);
    stack_t ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_size = (size_t)SIGSTKSZ + 64 * 1024;
    ss.ss_sp = malloc(ss.ss_size); /* kept for the life of the process */
    if (ss.ss_sp == NULL)
        return -ENOMEM;
    if (sigaltstack(&ss, NULL) != 0) {
        int e = errno;
        free(ss.ss_sp);
        return -e;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++)
        if (sigaction(fatal_signals[i], &sa, NULL) != 0)
            return -errno;
    return 0;
}
#endif
