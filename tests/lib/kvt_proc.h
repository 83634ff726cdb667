/*
 * kvt_proc: child processes for tests. A server is fork/exec'd with stdout+stderr appended
 * to a log file, gets PR_SET_PDEATHSIG(SIGKILL) (a crashed test never leaks a server), and is
 * reaped by these functions only. kvt_run() runs a command to completion with captured
 * output and a timeout.
 *
 * Ownership: a kvt_proc is a plain struct owned by the caller (zero it, or kvt_proc_init).
 * Threads: not thread-safe; one thread drives a given kvt_proc. Every wait is bounded.
 * Functions return 0 or a negative errno.
 */
#ifndef KVT_PROC_H
#define KVT_PROC_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct kvt_proc {
    pid_t pid;       /* 0 when not running */
    int stopped;     /* SIGSTOP'd by kvt_proc_pause */
    int last_status; /* wait status of the last reaped process, -1 if none */
    int no_banner;   /* 1: kvt_proc_spawn writes no "=== kvt: start" line to the log */
    char log_path[PATH_MAX];
} kvt_proc;

void kvt_proc_init(kvt_proc *p, const char *log_path);

/* fork/exec argv[0] (absolute path) with argv; stdin is /dev/null, stdout and stderr are
 * appended to p->log_path (a "=== kvt: start <argv0>" line is written first unless
 * p->no_banner); the child gets its own process group. -EBUSY if p
 * is running. */
int kvt_proc_spawn(kvt_proc *p, const char *const *argv);
/* kvt_proc_spawn with extra environment entries env_add ("NAME=value", NULL-terminated, may
 * be NULL; an entry replaces the inherited variable of the same name, and an entry "NAME"
 * without '=' removes it) for this child only:
 * the environment is built before the fork, the caller's is not modified. */
int kvt_proc_spawn_env(kvt_proc *p, const char *const *argv, const char *const *env_add);

/* 1 if running (reaps the child if it exited), 0 otherwise. */
int kvt_proc_alive(kvt_proc *p);

/* Waits up to timeout_ms for the child to exit and reaps it; -ETIMEDOUT if still running. */
int kvt_proc_wait(kvt_proc *p, uint32_t timeout_ms);

/* kill -9 and reap. No-op if not running. */
int kvt_proc_kill9(kvt_proc *p);
/* SIGTERM (after SIGCONT if paused), wait up to grace_ms, then SIGKILL; reaps. */
int kvt_proc_term(kvt_proc *p, uint32_t grace_ms);
/* SIGSTOP / SIGCONT. */
int kvt_proc_pause(kvt_proc *p);
int kvt_proc_resume(kvt_proc *p);
/* Any other signal (SIGUSR2 ...). */
int kvt_proc_signal(kvt_proc *p, int sig);
/* VmRSS of process pid (0: this process) in KiB, from /proc; -1 if unreadable. */
long kvt_proc_rss_kib(pid_t pid);

typedef struct kvt_cmd_result {
    int exit_code; /* exit status, or 128+signal if killed by a signal */
    int timed_out; /* 1 if the command was killed because of the timeout */
    char *out;     /* NUL-terminated stdout (owned; kvt_cmd_result_free) */
    size_t out_len;
    char *err; /* NUL-terminated stderr (owned) */
    size_t err_len;
} kvt_cmd_result;

/* Runs argv[0] (absolute path) with argv, extra environment entries env_add ("NAME=value",
 * NULL-terminated, may be NULL; "NAME" without '=' removes NAME) and optional stdin data, for at
 * most timeout_ms; captures stdout/stderr (each capped at 64 MiB). 0 if the command ran (check
 * exit_code/timed_out). Side effect: SIGPIPE at its default disposition is set to SIG_IGN. */
int kvt_run(const char *const *argv, const char *const *env_add, const void *stdin_data,
            size_t stdin_len, uint32_t timeout_ms, kvt_cmd_result *res);
void kvt_cmd_result_free(kvt_cmd_result *res);

#endif
