/*
 * The crash report (server/daemon/crash_report.h): a fatal signal's name and stack on fd 2, then
 * the process still dies of that signal. Unit part: a forked child installs the handler, then
 * aborts, overflows its stack or raises SIGBUS; the parent reads the child's stderr through a pipe.
 * Process part: a real kvd sent SIGSEGV writes the report into its log, with frames that name
 * kvd's exported functions (main), and dies of SIGSEGV.
 * Sanitizer builds: the sanitizer keeps its handlers; install reports 1 and kvd prints no
 * report of its own.
 */
#include "daemon/crash_report.h"

#include "kvt_proc.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

#ifndef SANITIZED
enum { HOW_ABORT, HOW_OVERFLOW, HOW_SIGBUS };

/* Deep enough to pass any stack limit; the n == -1 exit keeps it from being infinite to the
 * compiler. */
static int deep(int n)
{
    volatile char pad[4096];
    pad[0] = (char)n;
    if (n == -1)
        return 0;
    return deep(n + 1) + pad[0];
}

/* Runs `how` in a child with the handler; returns the child's stderr (malloc'd) and its wait
 * status. */
static char *crash_child(int how, int *status)
{
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        signal(SIGABRT, SIG_DFL); /* Criterion's own handlers are not the subject */
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        if (kv_crash_report_install() != 0)
            _exit(3);
        if (how == HOW_ABORT)
            abort();
        if (how == HOW_OVERFLOW)
            _exit(deep(0) == 0 ? 4 : 5);
        raise(SIGBUS);
        _exit(6);
    }
    close(pfd[1]);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    cr_assert(out);
    for (;;) {
        ssize_t n = read(pfd[0], out + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len + 1 == cap)
            break;
    }
    out[len] = '\0';
    close(pfd[0]);
    cr_assert_eq(waitpid(pid, status, 0), pid);
    return out;
}

static int count_frames(const char *out)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, ")[0x")) != NULL; p++)
        n++;
    return n;
}

/* where: "at address 0x" (a fault) or "sent by pid " (raise, abort, kill) */
static void expect_report(int how, int sig, const char *name, const char *where)
{
    int st = 0;
    char *out = crash_child(how, &st);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == sig,
              "the child must still die of signal %d, status %#x; stderr:\n%s", sig, st, out);
    char want[96];
    snprintf(want, sizeof(want), "kvd: fatal: signal %d (%s) %s", sig, name, where);
    cr_expect(strstr(out, want) != NULL, "no '%s' line in:\n%s", want, out);
    cr_expect(strstr(out, "kvd: fatal: end of stack\n") != NULL, "no end line in:\n%s", out);
    cr_expect_geq(count_frames(out), 3, "frames in:\n%s", out);
    free(out);
}

Test(crash_report, abort_is_reported_and_still_kills)
{
    expect_report(HOW_ABORT, SIGABRT, "SIGABRT", "sent by pid ");
}

Test(crash_report, a_stack_overflow_is_reported_from_the_alternate_stack)
{
    expect_report(HOW_OVERFLOW, SIGSEGV, "SIGSEGV", "at address 0x");
}

Test(crash_report, sigbus_is_reported)
{
    expect_report(HOW_SIGBUS, SIGBUS, "SIGBUS", "sent by pid ");
}
#else
Test(crash_report, sanitizer_builds_keep_the_sanitizer_handlers)
{
    struct sigaction before, after;
    sigaction(SIGSEGV, NULL, &before);
    cr_assert_eq(kv_crash_report_install(), 1);
    sigaction(SIGSEGV, NULL, &after);
    cr_expect(before.sa_sigaction == after.sa_sigaction, "the SIGSEGV handler changed");
}
#endif

static char *read_log(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    size_t cap = 1 << 20;
    char *b = malloc(cap);
    cr_assert(b);
    size_t n = fread(b, 1, cap - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

Test(crash_report, kvd_reports_a_fatal_signal_in_its_log, .timeout = 120)
{
    const char *b = getenv("KV_BUILD_DIR");
    cr_assert(b && *b, "KV_BUILD_DIR not set");
    char kvd[PATH_MAX];
    snprintf(kvd, sizeof(kvd), "%s/server/kvd", b);
    cr_assert_eq(access(kvd, X_OK), 0, "%s not built", kvd);
    kvt_tmpdir d;
    cr_assert_eq(kvt_tmpdir_create(&d, "crash-kvd"), 0);
    char data[PATH_MAX + 16], log[PATH_MAX + 16];
    snprintf(data, sizeof(data), "%s/data", d.path);
    snprintf(log, sizeof(log), "%s/kvd.log", d.path);
    uint16_t cport, pport;
    cr_assert_eq(kvt_port_free(&cport), 0);
    cr_assert_eq(kvt_port_free(&pport), 0);
    char curl[64], purl[64];
    snprintf(curl, sizeof(curl), "--listen-client-urls=http://127.0.0.1:%u", cport);
    snprintf(purl, sizeof(purl), "--listen-peer-urls=http://127.0.0.1:%u", pport);
    /* json: the report is plain text whatever the log format */
    const char *argv[] = {kvd, "--data-dir", data, curl, purl, "--log-format", "json", NULL};
    kvt_proc p;
    kvt_proc_init(&p, log);
    cr_assert_eq(kvt_proc_spawn(&p, argv), 0);
    int c = -1;
    for (uint64_t end = kvt_now_ms() + 60000; c < 0 && kvt_now_ms() < end;) {
        c = kvt_connect_loopback(cport, 1000);
        if (c < 0)
            kvt_sleep_ms(100);
    }
    cr_assert_geq(c, 0, "kvd did not serve within 60 s (log %s)", log);
    close(c);
    cr_assert_eq(kvt_proc_signal(&p, SIGSEGV), 0);
    cr_assert_eq(kvt_proc_wait(&p, 30000), 0, "kvd survived SIGSEGV");
    int st = p.last_status;
    char *out = read_log(log);
#ifndef SANITIZED
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "status %#x; log:\n%s", st, out);
    cr_expect(strstr(out, "\nkvd: fatal: signal 11 (SIGSEGV) sent by pid ") != NULL,
              "no report in the log:\n%s", out);
    cr_expect(strstr(out, "kvd: fatal: end of stack\n") != NULL, "log:\n%s", out);
    /* -rdynamic: the stripped package's frames still name kvd's exported functions */
    cr_expect(strstr(out, "(main+0x") != NULL, "no frame names main:\n%s", out);
#else
    cr_expect(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "status %#x", st);
    cr_expect(strstr(out, "kvd: fatal: signal") == NULL, "a report beside the sanitizer's");
#endif
    free(out);
    kvt_proc_kill9(&p);
    kvt_tmpdir_destroy(&d);
}
