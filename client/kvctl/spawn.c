/* spawn: a user's command with extra environment variables (see spawn.h). execvpe needs
 * _GNU_SOURCE, which the build defines (CMakeLists.txt). */
#include "spawn.h"

#include "common/envmerge.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int kvctl_spawn_wait(char *const *args, const char *const *env_add, int *exec_errno)
{
    *exec_errno = 0;
    int p[2];
    char **env = kv_env_merge(env_add);
    if (!env) {
        errno = ENOMEM;
        return -1;
    }
    if (pipe2(p, O_CLOEXEC) < 0) {
        free(env);
        return -1;
    }
    sigset_t none;
    sigemptyset(&none);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        pthread_sigmask(SIG_SETMASK, &none, NULL);
        execvpe(args[0], args, env);
        int e = errno; /* the exec failed: tell the parent, which prints the error */
        ssize_t w = write(p[1], &e, sizeof e);
        (void)w; /* the parent then sees EOF and reports the exit status instead */
        _exit(127);
    }
    int fe = errno;
    free(env);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        errno = fe;
        return -1;
    }
    int e = 0;
    ssize_t r;
    do /* EOF at the exec (close-on-exec), or the child's errno */
        r = read(p[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (r == (ssize_t)sizeof e) {
        *exec_errno = e;
        errno = e;
        return -1;
    }
    return st;
}
