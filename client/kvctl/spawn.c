/* spawn: a user's command with extra environment variables (see spawn.h). execvpe needs
 * _GNU_SOURCE, which the build defines (CMakeLists.txt). */
#include "spawn.h"

#include "common/envmerge.h"
#include "out.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* exec.LookPath: a name with a '/' is used as it is; else the first entry of $PATH (an empty
 * one is ".") holding a non-directory with an exec bit. Returns a malloc'd path, NULL when
 * none (errno ENOENT) or out of memory. */
static char *look_path(const char *file)
{
    if (strchr(file, '/'))
        return strdup(file);
    const char *dirs = getenv("PATH");
    for (const char *d = dirs && *dirs ? dirs : NULL; d;) { /* "a::b:" has 2 empty entries */
        const char *end = strchr(d, ':');
        size_t dl = end ? (size_t)(end - d) : strlen(d);
        char *p = malloc(dl + strlen(file) + 3);
        if (!p)
            return NULL;
        sprintf(p, "%.*s/%s", dl ? (int)dl : 1, dl ? d : ".", file);
        struct stat st;
        if (stat(p, &st) == 0 && !S_ISDIR(st.st_mode) && (st.st_mode & 0111))
            return p;
        free(p);
        if (!end)
            break;
        d = end + 1;
    }
    errno = ENOENT;
    return NULL;
}

/* Go's text for an errno: glibc's with a lower-case first letter ("permission denied"). */
static void put_errno(struct kvctl_buf *b, int e)
{
    char msg[128];
    snprintf(msg, sizeof msg, "%s", strerror(e));
    msg[0] = (char)tolower((unsigned char)msg[0]);
    kvctl_buf_puts(b, msg);
}

void kvctl_spawn_status_error(struct kvctl_buf *b, int status)
{
    if (WIFEXITED(status)) {
        char n[32];
        snprintf(n, sizeof n, "exit status %d", WEXITSTATUS(status));
        kvctl_buf_puts(b, n);
        return;
    }
    char sig[128]; /* Go spells signals in lower case: "killed", "interrupt" */
    snprintf(sig, sizeof sig, "%s", strsignal(WTERMSIG(status)));
    sig[0] = (char)tolower((unsigned char)sig[0]);
    kvctl_buf_puts(b, "signal: ");
    kvctl_buf_puts(b, sig);
    if (WCOREDUMP(status))
        kvctl_buf_puts(b, " (core dumped)");
}

static int start_failed(struct kvctl_buf *err, const char *path, int e)
{
    kvctl_buf_puts(err, "fork/exec ");
    kvctl_buf_puts(err, path);
    kvctl_buf_puts(err, ": ");
    put_errno(err, e);
    return -1;
}

int kvctl_spawn_wait(char *const *args, const char *const *env_add, struct kvctl_buf *err)
{
    char *path = look_path(args[0]);
    if (!path) {
        if (errno == ENOMEM)
            return start_failed(err, args[0], ENOMEM);
        kvctl_buf_puts(err, "exec: ");
        kvctl_go_quote(err, (const uint8_t *)args[0], strlen(args[0]));
        kvctl_buf_puts(err, ": executable file not found in $PATH");
        return -1;
    }
    int p[2];
    char **env = kv_env_merge(env_add);
    if (!env) {
        start_failed(err, path, ENOMEM);
        goto fail_path;
    }
    if (pipe2(p, O_CLOEXEC) < 0) {
        start_failed(err, path, errno);
        goto fail_env;
    }
    sigset_t none;
    sigemptyset(&none);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        pthread_sigmask(SIG_SETMASK, &none, NULL);
        execve(path, args, env); /* no shell fallback on ENOEXEC, as Go */
        int e = errno;           /* the exec failed: tell the parent, which prints the error */
        ssize_t w = write(p[1], &e, sizeof e);
        (void)w; /* the parent then sees EOF and reports the exit status instead */
        _exit(127);
    }
    int fe = errno;
    free(env);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        start_failed(err, path, fe);
        goto fail_path;
    }
    int e = 0;
    ssize_t r;
    do /* EOF at the exec (close-on-exec), or the child's errno */
        r = read(p[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            start_failed(err, path, errno);
            goto fail_path;
        }
    }
    if (r == (ssize_t)sizeof e) {
        start_failed(err, path, e);
        goto fail_path;
    }
    free(path);
    return st;

fail_env:
    free(env);
fail_path:
    free(path);
    return -1;
}
