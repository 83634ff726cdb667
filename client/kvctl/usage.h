/*
 * kvctl usage texts (etcdctl 3.4's help output for the implemented commands).
 */
#ifndef KVCTL_USAGE_H
#define KVCTL_USAGE_H

#include <stdio.h>

/* kvctl's own version (the project version, set by client/kvctl/kvctl.cmake). */
#ifndef KVCTL_VERSION
#define KVCTL_VERSION "0.1.0"
#endif

/* Writes the help of command `path` ("get", "lease grant", ...) to f. Returns 0, or -1 when
 * kvctl has no such command. */
int kvctl_usage(const char *path, FILE *f);

#endif
