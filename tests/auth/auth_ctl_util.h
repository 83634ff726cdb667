/*
 * auth_ctl_util: the etcdctl plumbing shared by the auth integration tests (test_auth_ctl.c,
 * test_auth_leaseperm.c, test_auth_cluster.c), whichever process harness runs the command
 * (tests/integration/harness.h or tests/lib/kvt_proc.h). Pure string work, no I/O.
 */
#ifndef KV_TESTS_AUTH_CTL_UTIL_H
#define KV_TESTS_AUTH_CTL_UTIL_H

#include <stddef.h>

/* Splits cmd (words separated by single spaces; copied into buf of cap bytes) into
 * argv[n..], keeping argv[0..n) (the binary, --endpoints...). At most max entries in all,
 * NULL included. Returns the new count (argv[count] == NULL). */
int acu_argv(const char *cmd, char *buf, size_t cap, const char **argv, int n, int max);

/* dst = stdout then stderr of a command, without etcdctl's JSON log lines ({"level"...}),
 * truncated at whole lines to fit cap (dst is always NUL-terminated; cap > 0). */
void acu_output(const char *out, const char *err, char *dst, size_t cap);

/* auth_ctl_it.c (links kvit_support, tests/integration/harness.h): runs etcdctl `bin` with
 * ETCDCTL_API=3, --endpoints=endpoint and the words of cmd, stdin_data (NULL: none) on its
 * stdin, for at most 30 s; out as acu_output. Returns the exit code, 999 on a timeout.
 * Criterion assertion if it cannot be started. */
int acu_etcdctl(const char *bin, const char *endpoint, const char *stdin_data, const char *cmd,
                char *out, size_t cap);

#endif
