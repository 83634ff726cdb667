/*
 * spawn: runs a user's command with extra environment variables, as `kvctl lock <name> cmd`
 * and `kvctl watch ... -- cmd` do (etcdctl's exec.Command with cmd.Env appended).
 *
 * kvctl has threads (libkvclient's I/O thread), so between fork and exec the child may only
 * call async-signal-safe functions: the environment and the command's path are built in the
 * parent, and the child only resets its signal mask, execs (execve), or reports the exec's
 * errno through a close-on-exec pipe and exits. An allocation in the child (the putenv this
 * replaces) can block forever on a lock another thread held at the fork.
 */
#ifndef KVCTL_SPAWN_H
#define KVCTL_SPAWN_H

struct kvctl_buf;

/* Runs args[0] with args and the environment plus env_add (NULL-terminated "NAME=value"
 * strings, which replace variables of the same name), and waits for it. args[0] is found as
 * Go's exec.Command finds it (exec.LookPath, in the parent before the fork): a name with a
 * '/' as it is, else the first non-directory with an exec bit in $PATH. stdout is flushed
 * first. Returns the command's wait status (waitpid's); or -1 when it could not be started,
 * with Go's error text appended to err (the caller owns it): `exec: "x": executable file not
 * found in $PATH`, or `fork/exec /path/x: exec format error` (os.StartProcess's, the errno as
 * Go spells it; no shell fallback on ENOEXEC, unlike execvp). */
int kvctl_spawn_wait(char *const *args, const char *const *env_add, struct kvctl_buf *err);

/* Appends Go's exec.ExitError text for a wait status that is not a clean exit 0:
 * "exit status 3", "signal: killed", "signal: aborted (core dumped)". */
void kvctl_spawn_status_error(struct kvctl_buf *b, int status);

#endif
