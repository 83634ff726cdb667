/*
 * envmerge: the environment of a command about to be started, built BEFORE the fork.
 *
 * The child of a process with threads may only call async-signal-safe functions until it
 * execs: an allocation there (putenv's) can block forever on an allocator lock another thread
 * held at the fork (ASan's allocator has no fork handler). So the caller builds the array
 * here, forks, and the child only calls execve/execvpe with it. Used by kvctl's `lock`/`watch
 * -- cmd` (client/kvctl/spawn.c) and the tests' process launcher (tests/lib/kvt_proc.c).
 */
#ifndef KV_COMMON_ENVMERGE_H
#define KV_COMMON_ENVMERGE_H

/* environ with add's entries (NULL-terminated; may be NULL): a "NAME=value" replaces NAME or
 * is appended, a bare "NAME" removes NAME. Returns a malloc'd NULL-terminated array of
 * borrowed strings (environ's and add's: both must outlive it; free only the array), or NULL
 * when out of memory. */
char **kv_env_merge(const char *const *add);

#endif
