/* kvctl request builders: see ops.h. */
#include "ops.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void kvctl_mem_free(struct kvctl_mem *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->p[i]);
    m->n = 0;
}

static void *mem_keep(struct kvctl_mem *m, void *p)
{
    if (!p)
        return NULL;
    if (m->n == sizeof(m->p) / sizeof(m->p[0])) {
        free(p);
        return NULL;
    }
    m->p[m->n++] = p;
    return p;
}

void kvctl_put_flags_init(struct kvctl_put_flags *f)
{
    f->lease = "0";
    f->prev_kv = f->ignore_value = f->ignore_lease = false;
    struct kvctl_flag t[] = {
        {"lease", 0, KVCTL_FLAG_STRING, &f->lease, false},
        {"prev-kv", 0, KVCTL_FLAG_BOOL, &f->prev_kv, false},
        {"ignore-value", 0, KVCTL_FLAG_BOOL, &f->ignore_value, false},
        {"ignore-lease", 0, KVCTL_FLAG_BOOL, &f->ignore_lease, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    memcpy(f->table, t, sizeof(t));
}

void kvctl_get_flags_init(struct kvctl_get_flags *f)
{
    f->consistency = "l";
    f->order = f->sort_by = "";
    f->limit = f->rev = 0;
    f->prefix = f->from_key = f->keys_only = f->count_only = f->print_value_only = false;
    struct kvctl_flag t[] = {
        {"consistency", 0, KVCTL_FLAG_STRING, &f->consistency, false},
        {"order", 0, KVCTL_FLAG_STRING, &f->order, false},
        {"sort-by", 0, KVCTL_FLAG_STRING, &f->sort_by, false},
        {"limit", 0, KVCTL_FLAG_INT64, &f->limit, false},
        {"prefix", 0, KVCTL_FLAG_BOOL, &f->prefix, false},
        {"from-key", 0, KVCTL_FLAG_BOOL, &f->from_key, false},
        {"rev", 0, KVCTL_FLAG_INT64, &f->rev, false},
        {"keys-only", 0, KVCTL_FLAG_BOOL, &f->keys_only, false},
        {"count-only", 0, KVCTL_FLAG_BOOL, &f->count_only, false},
        {"print-value-only", 0, KVCTL_FLAG_BOOL, &f->print_value_only, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    memcpy(f->table, t, sizeof(t));
}

void kvctl_del_flags_init(struct kvctl_del_flags *f)
{
    f->prefix = f->prev_kv = f->from_key = false;
    struct kvctl_flag t[] = {
        {"prefix", 0, KVCTL_FLAG_BOOL, &f->prefix, false},
        {"prev-kv", 0, KVCTL_FLAG_BOOL, &f->prev_kv, false},
        {"from-key", 0, KVCTL_FLAG_BOOL, &f->from_key, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    memcpy(f->table, t, sizeof(t));
}

static ProtobufCBinaryData bin(const char *s)
{
    ProtobufCBinaryData d = {strlen(s), (uint8_t *)s};
    return d;
}

/* clientv3.GetPrefixRangeEnd: increment the last byte below 0xff, dropping what follows;
 * "\0" (every key) when there is none. */
static int prefix_end(const char *key, ProtobufCBinaryData *end, struct kvctl_mem *mem)
{
    size_t n = strlen(key);
    uint8_t *e = mem_keep(mem, malloc(n + 1));
    if (!e)
        return -ENOMEM;
    memcpy(e, key, n);
    for (size_t i = n; i-- > 0;) {
        if (e[i] < 0xff) {
            e[i]++;
            end->data = e;
            end->len = i + 1;
            return 0;
        }
    }
    e[0] = 0;
    end->data = e;
    end->len = 1;
    return 0;
}

static const char zero_key[1] = {0};

/* argOrStdin: the whole of stdin, which must not be empty. */
static char *read_stdin(size_t *len)
{
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    if (!b)
        return NULL;
    for (;;) {
        if (n == cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - n, stdin);
        n += r;
        if (r == 0)
            break;
    }
    if (n == 0) {
        free(b);
        return NULL;
    }
    *len = n;
    return b;
}

int kvctl_put_op(size_t nargs, char **args, const struct kvctl_put_flags *f, bool allow_stdin,
                 Etcdserverpb__PutRequest *req, struct kvctl_mem *mem)
{
    static const char *const need =
        "put command needs 1 argument and input from stdin or 2 arguments";
    etcdserverpb__put_request__init(req);
    if (nargs == 0)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "%s", need);
    req->key = bin(args[0]);
    if (f->ignore_value && nargs > 1)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                          "put command needs only 1 argument when 'ignore-value' is set");
    if (!f->ignore_value) {
        if (nargs > 1) {
            req->value = bin(args[1]);
        } else {
            size_t len = 0;
            char *v = allow_stdin ? mem_keep(mem, read_stdin(&len)) : NULL;
            if (!v)
                return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "%s", need);
            req->value.data = (uint8_t *)v;
            req->value.len = len;
        }
    }
    int64_t id;
    int rc = kvctl_parse_int64(f->lease, 16, &id);
    if (rc < 0) {
        char m[256];
        kvctl_parse_int_err(m, sizeof(m), f->lease, rc);
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "bad lease ID (%s), expecting ID in Hex", m);
    }
    req->lease = id;
    req->prev_kv = f->prev_kv;
    req->ignore_value = f->ignore_value;
    req->ignore_lease = f->ignore_lease;
    return 0;
}

static int upper_eq(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

int kvctl_get_op(size_t nargs, char **args, const struct kvctl_get_flags *f,
                 Etcdserverpb__RangeRequest *req, struct kvctl_mem *mem)
{
    etcdserverpb__range_request__init(req);
    if (nargs == 0)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "get command needs one argument as key and an "
                                               "optional argument as range_end");
    if (f->prefix && f->from_key)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "`--prefix` and `--from-key` cannot be set at the "
                                               "same time, choose one");
    if (f->keys_only && f->count_only)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "`--keys-only` and `--count-only` cannot be set at "
                                               "the same time, choose one");
    if (strcmp(f->consistency, "s") == 0)
        req->serializable = true;
    else if (strcmp(f->consistency, "l") != 0)
        return kvctl_fail(KVCTL_EXIT_BAD_FEATURE, "unknown consistency flag \"%s\"",
                          f->consistency);
    const char *key = args[0];
    req->key = bin(key);
    if (nargs > 1) {
        if (f->prefix || f->from_key)
            return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "too many arguments, only accept one argument "
                                                   "when `--prefix` or `--from-key` is set");
        req->range_end = bin(args[1]);
    }
    req->limit = f->limit;
    if (f->rev > 0)
        req->revision = f->rev;

    int order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE;
    if (upper_eq(f->order, "ASCEND"))
        order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    else if (upper_eq(f->order, "DESCEND"))
        order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    else if (*f->order)
        return kvctl_fail(KVCTL_EXIT_BAD_FEATURE, "bad sort order %s", f->order);

    int target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY;
    if (upper_eq(f->sort_by, "CREATE"))
        target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    else if (upper_eq(f->sort_by, "KEY"))
        target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY;
    else if (upper_eq(f->sort_by, "MODIFY"))
        target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__MOD;
    else if (upper_eq(f->sort_by, "VALUE"))
        target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
    else if (upper_eq(f->sort_by, "VERSION"))
        target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VERSION;
    else if (*f->sort_by)
        return kvctl_fail(KVCTL_EXIT_BAD_FEATURE, "bad sort target %s", f->sort_by);
    /* clientv3.WithSort: the server already returns keys ascending */
    if (target == ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY &&
        order == ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND)
        order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE;
    req->sort_order = order;
    req->sort_target = target;

    if (f->prefix) {
        if (*key == '\0') {
            req->key.data = (uint8_t *)zero_key;
            req->key.len = 1;
            req->range_end.data = (uint8_t *)zero_key;
            req->range_end.len = 1;
        } else if (prefix_end(key, &req->range_end, mem) < 0) {
            return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        }
    }
    if (f->from_key) {
        if (*key == '\0') {
            req->key.data = (uint8_t *)zero_key;
            req->key.len = 1;
        }
        req->range_end.data = (uint8_t *)zero_key;
        req->range_end.len = 1;
    }
    req->keys_only = f->keys_only;
    req->count_only = f->count_only;
    return 0;
}

int kvctl_del_op(size_t nargs, char **args, const struct kvctl_del_flags *f,
                 Etcdserverpb__DeleteRangeRequest *req, struct kvctl_mem *mem)
{
    etcdserverpb__delete_range_request__init(req);
    if (nargs == 0 || nargs > 2)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "del command needs one argument as key and an "
                                               "optional argument as range_end");
    if (f->prefix && f->from_key)
        return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "`--prefix` and `--from-key` cannot be set at the "
                                               "same time, choose one");
    const char *key = args[0];
    req->key = bin(key);
    if (nargs > 1) {
        if (f->prefix || f->from_key)
            return kvctl_fail(KVCTL_EXIT_BAD_ARGS, "too many arguments, only accept one argument "
                                                   "when `--prefix` or `--from-key` is set");
        req->range_end = bin(args[1]);
    }
    if (f->prefix) {
        if (*key == '\0') {
            req->key.data = (uint8_t *)zero_key;
            req->key.len = 1;
            req->range_end.data = (uint8_t *)zero_key;
            req->range_end.len = 1;
        } else if (prefix_end(key, &req->range_end, mem) < 0) {
            return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        }
    }
    req->prev_kv = f->prev_kv;
    if (f->from_key) {
        if (*key == '\0') {
            req->key.data = (uint8_t *)zero_key;
            req->key.len = 1;
        }
        req->range_end.data = (uint8_t *)zero_key;
        req->range_end.len = 1;
    }
    return 0;
}
