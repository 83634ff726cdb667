/*
 * spawn: runs a user's command with extra environment variables, as `kvctl lock <name> cmd`
 * and `kvctl watch ... -- cmd` do (etcdctl's exec.Command with cmd.Env appended).
 *
 * kvctl has threads (libkvclient's I/O thread), so between fork and exec the child may only
 * call async-signal-safe functions: the environment is built in the parent, and the child
 * only resets its signal mask, execs (execvpe: $PATH is searched, as etcdctl's
 * exec.LookPath), or reports the exec's errno through a close-on-exec pipe and exits. An
 * allocation in the child (the putenv this replaces) can block forever on a lock another
 * thread held at the fork.
 */
#ifndef KVCTL_SPAWN_H
#define KVCTL_SPAWN_H

/* Runs args[0] (searched in $PATH) with args and the environment plus env_add
 * (NULL-terminated "NAME=value" strings, which replace variables of the same name), and waits
 * for it. stdout is flushed first. Returns the command's wait status (waitpid's); or -1 with
 * errno when it could not be started (*exec_errno set when the exec itself failed, e.g.
 * ENOENT: no such command in $PATH; 0 for a fork, pipe or memory failure). */
int kvctl_spawn_wait(char *const *args, const char *const *env_add, int *exec_errno);

#endif
