/*
 * kvctl tables: renders what github.com/olekukonko/tablewriter (the 2017 revision etcdctl 3.4
 * vendors) renders with etcdctl's settings: borders, centred upper-cased headers, right-aligned
 * cells, cells wrapped at spaces to 30 columns.
 *
 * Ownership: the table copies every string it is given; kvctl_table_free() releases them.
 */
#ifndef KVCTL_TABLE_H
#define KVCTL_TABLE_H

#include <stddef.h>

#include "out.h"

struct kvctl_table {
    size_t ncols;
    char **hdr;   /* ncols */
    char ***rows; /* nrows x ncols */
    size_t nrows;
    size_t cap;
};

/* Returns 0 or -ENOMEM. */
int kvctl_table_init(struct kvctl_table *t, const char *const *hdr, size_t ncols);
/* Appends a row of t->ncols cells. Returns 0 or -ENOMEM. */
int kvctl_table_add(struct kvctl_table *t, const char *const *cells);
/* Renders the table into b. */
void kvctl_table_render(const struct kvctl_table *t, struct kvctl_buf *b);
void kvctl_table_free(struct kvctl_table *t);

#endif
