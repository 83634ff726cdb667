/*
 * kvctl usage texts (etcdctl 3.4's help output for the implemented commands).
 */
#ifndef KVCTL_USAGE_H
#define KVCTL_USAGE_H

#include <stdio.h>

/* Writes the help of command `path` ("get", "lease grant", ...) to f. Returns 0, or -1 when
 * kvctl has no such command. */
int kvctl_usage(const char *path, FILE *f);

#endif
