/* kvt_proc: see kvt_proc.h. */

#include "kvt_proc.h"
#include "kvt_util.h"

#include "common/envmerge.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void kvt_proc_init(kvt_proc *p, const char *log_path)
{
    memset(p, 0, sizeof(*p));
    p->last_status = -1;
    snprintf(p->log_path, sizeof(p->log_path), "%s", log_path ? log_path : "/dev/null");
}

int kvt_proc_spawn(kvt_proc *p, const char *const *argv)
{
    return kvt_proc_spawn_env(p, argv, NULL);
}

int kvt_proc_spawn_env(kvt_proc *p, const char *const *argv, const char *const *env_add)
{
    if (p->pid > 0)
        return -EBUSY;
    extern char **environ;
    char **env = environ;
    if (env_add && env_add[0] && !(env = kv_env_merge(env_add)))
        return -ENOMEM;
    int logfd = open(p->log_path[0] ? p->log_path : "/dev/null",
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0) {
        int e = -errno;
        if (env != environ)
            free(env);
        return e;
    }
    if (!p->no_banner)
        dprintf(logfd, "=== kvt: start %s\n", argv[0]);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(logfd);
        if (env != environ)
            free(env);
        return e;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        setpgid(0, 0);
        execve(argv[0], (char *const *)argv, env);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(logfd);
    if (env != environ)
        free(env);
    p->pid = pid;
    p->stopped = 0;
    return 0;
}

/* 1 if reaped (or already gone). */
static int reap(kvt_proc *p, int options)
{
    int st;
    pid_t r = waitpid(p->pid, &st, options);
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        p->last_status = r == p->pid ? st : -1;
        p->pid = 0;
        p->stopped = 0;
        return 1;
    }
    return 0;
}

int kvt_proc_alive(kvt_proc *p)
{
    if (p->pid <= 0)
        return 0;
    return !reap(p, WNOHANG);
}

int kvt_proc_wait(kvt_proc *p, uint32_t timeout_ms)
{
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    while (p->pid > 0) {
        if (reap(p, WNOHANG))
            return 0;
        if (kvt_now_ms() >= deadline)
            return -ETIMEDOUT;
        kvt_sleep_ms(5);
    }
    return 0;
}

long kvt_proc_rss_kib(pid_t pid)
{
    char path[64], line[256];
    if (pid > 0)
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

int kvt_proc_kill9(kvt_proc *p)
{
    if (p->pid <= 0)
        return 0;
    kill(p->pid, SIGKILL);
    reap(p, 0);
    return 0;
}

int kvt_proc_term(kvt_proc *p, uint32_t grace_ms)
{
    if (p->pid <= 0)
        return 0;
    if (p->stopped)
        kill(p->pid, SIGCONT);
    kill(p->pid, SIGTERM);
    if (kvt_proc_wait(p, grace_ms) == 0)
        return 0;
    return kvt_proc_kill9(p);
}

int kvt_proc_signal(kvt_proc *p, int sig)
{
    if (p->pid <= 0)
        return -ESRCH;
    if (kill(p->pid, sig) != 0)
        return -errno;
    return 0;
}

int kvt_proc_pause(kvt_proc *p)
{
    int r = kvt_proc_signal(p, SIGSTOP);
    if (r == 0)
        p->stopped = 1;
    return r;
}

int kvt_proc_resume(kvt_proc *p)
{
    int r = kvt_proc_signal(p, SIGCONT);
    if (r == 0)
        p->stopped = 0;
    return r;
}

/* Appends n bytes to a growing NUL-terminated buffer, capped at 64 MiB. */
static int append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    const size_t limit = 64u << 20;
    if (*len >= limit)
        n = 0;
    else if (n > limit - *len)
        n = limit - *len;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n + 1)
            c *= 2;
        char *np = realloc(*buf, c);
        if (!np)
            return -ENOMEM;
        *buf = np;
        *cap = c;
    }
    if (n > 0)
        memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

int kvt_run(const char *const *argv, const char *const *env_add, const void *stdin_data,
            size_t stdin_len, uint32_t timeout_ms, kvt_cmd_result *res)
{
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    int rc = 0;
    extern char **environ;
    char **env = environ; /* or kv_env_merge's copy until the fork */
    memset(res, 0, sizeof(*res));
    /* A command that exits without reading its stdin must not kill us with SIGPIPE. */
    struct sigaction old_pipe;
    if (sigaction(SIGPIPE, NULL, &old_pipe) == 0 && old_pipe.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    size_t out_cap = 0, err_cap = 0;
    if (append(&res->out, &res->out_len, &out_cap, "", 0) ||
        append(&res->err, &res->err_len, &err_cap, "", 0)) {
        rc = -ENOMEM;
        goto fail;
    }
    if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC)) {
        rc = -errno;
        goto fail;
    }
    /* The environment is built here, before the fork: the child of a process with other
     * threads may only call async-signal-safe functions until it execs. An allocation there
     * (putenv's, before) can block forever on a malloc lock another thread held at the fork
     * (seen under ASan: a kvctl snapshot save that never started, killed at its timeout). */
    if (env_add && env_add[0] && !(env = kv_env_merge(env_add))) {
        rc = -ENOMEM;
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        rc = -errno;
        goto fail;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(perr[1], 2);
        execve(argv[0], (char *const *)argv, env);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (env != environ)
        free(env);
    env = environ;
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    pin[0] = pout[1] = perr[1] = -1;
    fcntl(pin[1], F_SETFL, O_NONBLOCK);
    size_t in_off = 0;
    if (!stdin_data || stdin_len == 0) {
        close(pin[1]);
        pin[1] = -1;
    }
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    while (pout[0] >= 0 || perr[0] >= 0) {
        struct pollfd p[3];
        int np = 0, iout = -1, ierr = -1, iin = -1;
        if (pout[0] >= 0) {
            iout = np;
            p[np++] = (struct pollfd){.fd = pout[0], .events = POLLIN};
        }
        if (perr[0] >= 0) {
            ierr = np;
            p[np++] = (struct pollfd){.fd = perr[0], .events = POLLIN};
        }
        if (pin[1] >= 0) {
            iin = np;
            p[np++] = (struct pollfd){.fd = pin[1], .events = POLLOUT};
        }
        uint64_t t = kvt_now_ms();
        if (t >= deadline) {
            res->timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int pr = poll(p, (nfds_t)np, (int)(deadline - t));
        if (pr < 0 && errno != EINTR)
            break;
        char buf[65536];
        if (iout >= 0 && p[iout].revents) {
            ssize_t r = read(pout[0], buf, sizeof(buf));
            if (r > 0)
                append(&res->out, &res->out_len, &out_cap, buf, (size_t)r);
            else if (r == 0 || errno != EINTR) {
                close(pout[0]);
                pout[0] = -1;
            }
        }
        if (ierr >= 0 && p[ierr].revents) {
            ssize_t r = read(perr[0], buf, sizeof(buf));
            if (r > 0)
                append(&res->err, &res->err_len, &err_cap, buf, (size_t)r);
            else if (r == 0 || errno != EINTR) {
                close(perr[0]);
                perr[0] = -1;
            }
        }
        if (iin >= 0 && p[iin].revents) {
            ssize_t w = write(pin[1], (const char *)stdin_data + in_off, stdin_len - in_off);
            if (w > 0)
                in_off += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == stdin_len) {
                close(pin[1]);
                pin[1] = -1;
            }
        }
    }
    int st = 0;
    /* The pipes are closed (or we timed out and killed it); wait, bounded. */
    uint64_t wdl = kvt_now_ms() + 5000;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0) {
            st = 0;
            break;
        }
        if (kvt_now_ms() >= wdl) {
            res->timed_out = 1;
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        kvt_sleep_ms(5);
    }
    res->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
fail:
    if (env != environ)
        free(env);
    for (int i = 0; i < 2; i++) {
        if (pin[i] >= 0)
            close(pin[i]);
        if (pout[i] >= 0)
            close(pout[i]);
        if (perr[i] >= 0)
            close(perr[i]);
    }
    if (rc)
        kvt_cmd_result_free(res);
    return rc;
}

void kvt_cmd_result_free(kvt_cmd_result *res)
{
    free(res->out);
    free(res->err);
    res->out = res->err = NULL;
    res->out_len = res->err_len = 0;
}
