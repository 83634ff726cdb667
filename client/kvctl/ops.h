/*
 * kvctl request builders for put/get/del, shared by the commands and by txn's op lines
 * (etcdctl's getPutOp/getGetOp/getDelOp, with their validation and error messages).
 *
 * A builder fills a protobuf-c request whose byte fields point into the positional arguments
 * (caller keeps them alive) or into memory recorded in `mem`; release that with
 * kvctl_mem_free(). Builders return 0, or an exit status after printing "Error: ...".
 */
#ifndef KVCTL_OPS_H
#define KVCTL_OPS_H

#include "kvctl.h"
#include "rpc.pb-c.h"

struct kvctl_mem {
    void *p[8];
    size_t n;
};
void kvctl_mem_free(struct kvctl_mem *m);

struct kvctl_put_flags {
    const char *lease;
    bool prev_kv, ignore_value, ignore_lease;
    struct kvctl_flag table[5];
};
struct kvctl_get_flags {
    const char *consistency, *order, *sort_by;
    int64_t limit, rev;
    bool prefix, from_key, keys_only, count_only, print_value_only;
    struct kvctl_flag table[11];
};
struct kvctl_del_flags {
    bool prefix, prev_kv, from_key;
    struct kvctl_flag table[4];
};

/* Reset flags to their defaults and build their flag tables (f->table). */
void kvctl_put_flags_init(struct kvctl_put_flags *f);
void kvctl_get_flags_init(struct kvctl_get_flags *f);
void kvctl_del_flags_init(struct kvctl_del_flags *f);

/* args: the positional arguments after the command word. allow_stdin: read a missing put value
 * from stdin (false inside txn, where stdin holds the txn itself). */
int kvctl_put_op(size_t nargs, char **args, const struct kvctl_put_flags *f, bool allow_stdin,
                 Etcdserverpb__PutRequest *req, struct kvctl_mem *mem);
int kvctl_get_op(size_t nargs, char **args, const struct kvctl_get_flags *f,
                 Etcdserverpb__RangeRequest *req, struct kvctl_mem *mem);
int kvctl_del_op(size_t nargs, char **args, const struct kvctl_del_flags *f,
                 Etcdserverpb__DeleteRangeRequest *req, struct kvctl_mem *mem);

#endif
