/*
 * kvctl txn (etcdctl's txn_command.go): reads three blank-line-terminated sections from stdin
 * (compares, success ops, failure ops), optionally prompting for each (-i), and commits them as
 * one Txn.
 *
 * Deviations from etcdctl 3.4, where etcdctl crashes (Go panic, exit 2): `lease("k") = "<hex>"`
 * compares the key's lease with the hex id, and an unknown comparison operator is reported as a
 * malformed comparison (exit 3). Single-quoted op arguments have their quotes stripped (etcdctl
 * 3.4 slices them with the wrong length).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "out.h"
#include "print_kv.h"
#include "common/hex.h"

/* Everything a txn owns until it is sent. */
struct txn {
    Etcdserverpb__TxnRequest req;
    Etcdserverpb__Compare **cmps;
    size_t n_cmps;
    Etcdserverpb__RequestOp **ops[2];
    size_t n_ops[2];
    void **owned; /* every malloc'd block referenced by the request */
    size_t n_owned, cap_owned;
};

static void *own(struct txn *t, void *p)
{
    if (!p)
        return NULL;
    if (t->n_owned == t->cap_owned) {
        size_t nc = t->cap_owned ? t->cap_owned * 2 : 32;
        void **no = realloc(t->owned, nc * sizeof(*no));
        if (!no) {
            free(p);
            return NULL;
        }
        t->owned = no;
        t->cap_owned = nc;
    }
    t->owned[t->n_owned++] = p;
    return p;
}

static void txn_free(struct txn *t)
{
    for (size_t i = 0; i < t->n_owned; i++)
        free(t->owned[i]);
    free(t->owned);
    free(t->cmps);
    free(t->ops[0]);
    free(t->ops[1]);
}

static int push(void ***arr, size_t *n, void *item)
{
    void **na = realloc(*arr, (*n + 1) * sizeof(void *));
    if (!na)
        return -ENOMEM;
    na[(*n)++] = item;
    *arr = na;
    return 0;
}

/* Go's strings.TrimSpace (ASCII whitespace), in place. */
static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t l = strlen(s);
    while (l && isspace((unsigned char)s[l - 1]))
        s[--l] = '\0';
    return s;
}

/* bufio.Reader.ReadString('\n'): a line without its newline, or NULL at EOF (including a last
 * line that has no newline, which Go reports as io.EOF). Caller frees. */
static char *read_line(void)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n <= 0 || line[n - 1] != '\n') {
        free(line);
        return NULL;
    }
    line[n - 1] = '\0';
    return line;
}

static void put_utf8(struct kvctl_buf *b, uint32_t r)
{
    char o[4];
    if (r < 0x80) {
        o[0] = (char)r;
        kvctl_buf_putn(b, o, 1);
    } else if (r < 0x800) {
        o[0] = (char)(0xc0 | (r >> 6));
        o[1] = (char)(0x80 | (r & 0x3f));
        kvctl_buf_putn(b, o, 2);
    } else if (r < 0x10000) {
        o[0] = (char)(0xe0 | (r >> 12));
        o[1] = (char)(0x80 | ((r >> 6) & 0x3f));
        o[2] = (char)(0x80 | (r & 0x3f));
        kvctl_buf_putn(b, o, 3);
    } else {
        o[0] = (char)(0xf0 | (r >> 18));
        o[1] = (char)(0x80 | ((r >> 12) & 0x3f));
        o[2] = (char)(0x80 | ((r >> 6) & 0x3f));
        o[3] = (char)(0x80 | (r & 0x3f));
        kvctl_buf_putn(b, o, 4);
    }
}

/*
 * Go's %q scanning: a double-quoted Go string literal (with escapes) or a back-quoted raw
 * string at *pp. On success appends the unquoted bytes to out, advances *pp, returns 0.
 */
static int scan_quoted(const char **pp, struct kvctl_buf *out)
{
    const char *p = *pp;
    if (*p == '`') {
        const char *e = strchr(p + 1, '`');
        if (!e)
            return -EINVAL;
        kvctl_buf_putn(out, p + 1, (size_t)(e - p - 1));
        *pp = e + 1;
        return 0;
    }
    if (*p != '"')
        return -EINVAL;
    p++;
    while (*p && *p != '"') {
        if (*p != '\\') {
            kvctl_buf_putn(out, p, 1);
            p++;
            continue;
        }
        p++;
        int n = 0, base = 16;
        switch (*p) {
        case 'a':
            kvctl_buf_puts(out, "\a");
            p++;
            continue;
        case 'b':
            kvctl_buf_puts(out, "\b");
            p++;
            continue;
        case 'f':
            kvctl_buf_puts(out, "\f");
            p++;
            continue;
        case 'n':
            kvctl_buf_puts(out, "\n");
            p++;
            continue;
        case 'r':
            kvctl_buf_puts(out, "\r");
            p++;
            continue;
        case 't':
            kvctl_buf_puts(out, "\t");
            p++;
            continue;
        case 'v':
            kvctl_buf_puts(out, "\v");
            p++;
            continue;
        case '\\':
            kvctl_buf_puts(out, "\\");
            p++;
            continue;
        case '"':
            kvctl_buf_puts(out, "\"");
            p++;
            continue;
        case 'x':
            n = 2;
            p++;
            break;
        case 'u':
            n = 4;
            p++;
            break;
        case 'U':
            n = 8;
            p++;
            break;
        default:
            if (*p >= '0' && *p <= '7') {
                n = 3;
                base = 8;
                break;
            }
            return -EINVAL;
        }
        uint32_t v = 0;
        for (int i = 0; i < n; i++, p++) {
            int d = kv_hex_digit((unsigned char)*p);
            if (d < 0 || d >= base)
                return -EINVAL;
            v = v * (uint32_t)base + (uint32_t)d;
        }
        if (base == 8 || n == 2) {
            if (v > 255)
                return -EINVAL;
            char c = (char)v;
            kvctl_buf_putn(out, &c, 1);
        } else {
            put_utf8(out, v);
        }
    }
    if (*p != '"')
        return -EINVAL;
    *pp = p + 1;
    return 0;
}

static int add_cmp(struct txn *t, const char *line)
{
    struct kvctl_buf key = {0}, val = {0}, msg = {0};
    char op[64] = "";
    int rc = 0;
    const char *lp = strchr(line, '(');
    if (!lp) {
        rc = kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "malformed comparison: %s", line);
        goto out;
    }
    char target[64];
    snprintf(target, sizeof(target), "%.*s", (int)(lp - line), line);
    /* fmt.Sscanf(rest, "%q) %s %q", &key, &op, &val) */
    const char *p = lp + 1;
    int n = 0;
    if (scan_quoted(&p, &key) == 0) {
        n = 1;
        if (*p == ')') {
            p++;
            while (*p == ' ' || *p == '\t')
                p++;
            size_t l = 0;
            while (p[l] && !isspace((unsigned char)p[l]))
                l++;
            if (l > 0 && l < sizeof(op)) {
                memcpy(op, p, l);
                op[l] = '\0';
                n = 2;
                p += l;
                while (*p == ' ' || *p == '\t')
                    p++;
                if (scan_quoted(&p, &val) == 0)
                    n = 3;
            }
        }
    }
    if (n != 3) {
        kvctl_buf_printf(&msg, "malformed comparison: %s; got %s(", line, target);
        kvctl_go_quote(&msg, (const uint8_t *)kvctl_buf_str(&key), key.len);
        kvctl_buf_printf(&msg, ") %s ", op);
        kvctl_go_quote(&msg, (const uint8_t *)kvctl_buf_str(&val), val.len);
        rc = kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "%s", kvctl_buf_str(&msg));
        goto out;
    }
    Etcdserverpb__Compare *c = own(t, malloc(sizeof(*c)));
    if (!c) {
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        goto out;
    }
    etcdserverpb__compare__init(c);
    if (strcmp(op, "=") == 0)
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    else if (strcmp(op, "!=") == 0)
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL;
    else if (strcmp(op, "<") == 0)
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__LESS;
    else if (strcmp(op, ">") == 0)
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER;
    else {
        rc = kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "malformed comparison: %s (unknown op %s)", line,
                        op);
        goto out;
    }
    /* the key and value buffers become owned by the txn */
    c->key.len = key.len;
    c->key.data = own(t, key.p ? (void *)key.p : calloc(1, 1));
    key.p = NULL;
    int64_t v = 0;
    int prc = 0;
    const char *sval = kvctl_buf_str(&val);
    if (strcmp(target, "ver") == 0 || strcmp(target, "version") == 0) {
        prc = kvctl_parse_int64(sval, 10, &v);
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
        c->version = v;
    } else if (strcmp(target, "c") == 0 || strcmp(target, "create") == 0) {
        prc = kvctl_parse_int64(sval, 10, &v);
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        c->create_revision = v;
    } else if (strcmp(target, "m") == 0 || strcmp(target, "mod") == 0) {
        prc = kvctl_parse_int64(sval, 10, &v);
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
        c->mod_revision = v;
    } else if (strcmp(target, "val") == 0 || strcmp(target, "value") == 0) {
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
        c->value.len = val.len;
        c->value.data = own(t, val.p ? (void *)val.p : calloc(1, 1));
        val.p = NULL;
    } else if (strcmp(target, "lease") == 0) {
        prc = kvctl_parse_int64(sval, 16, &v);
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
        c->lease = v;
    } else {
        rc = kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "malformed comparison: %s (unknown target %s)",
                        line, target);
        goto out;
    }
    if (prc < 0) {
        rc = kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "invalid txn compare request: %s", line);
        goto out;
    }
    if (push((void ***)&t->cmps, &t->n_cmps, c) < 0)
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
out:
    kvctl_buf_free(&key);
    kvctl_buf_free(&val);
    kvctl_buf_free(&msg);
    return rc;
}

/* etcdctl's argify(): double-quoted Go strings, single-quoted strings and bare words. The
 * returned words are owned by t. */
static int argify(struct txn *t, const char *line, char ***out, size_t *n_out)
{
    const char *p = line;
    char **args = NULL;
    size_t n = 0;
    while (*p) {
        if (strchr(" \t\n\f\r", *p)) {
            p++;
            continue;
        }
        struct kvctl_buf w = {0};
        if (*p == '"') {
            /* only a complete "..." literal matches; otherwise the quote is skipped */
            const char *q = p + 1;
            while (*q && *q != '"')
                q += (*q == '\\' && q[1]) ? 2 : 1;
            if (*q != '"') {
                p++;
                continue;
            }
            const char *s = p;
            if (scan_quoted(&s, &w) < 0) {
                kvctl_buf_free(&w);
                free(args);
                return kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "invalid syntax");
            }
            p = q + 1;
        } else if (*p == '\'') {
            const char *q = strchr(p + 1, '\'');
            if (!q) {
                p++;
                continue;
            }
            kvctl_buf_putn(&w, p + 1, (size_t)(q - p - 1));
            p = q + 1;
        } else {
            const char *q = p;
            while (*q && !strchr(" \t\n\f\r", *q))
                q++;
            kvctl_buf_putn(&w, p, (size_t)(q - p));
            p = q;
        }
        char *word = own(t, w.p ? w.p : calloc(1, 1));
        if (!word || push((void ***)&args, &n, word) < 0) {
            free(args);
            return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        }
    }
    *out = args;
    *n_out = n;
    return 0;
}

static int add_op(struct txn *t, int branch, char *line)
{
    char **args = NULL;
    size_t n = 0;
    int rc = argify(t, line, &args, &n);
    if (rc)
        return rc;
    if (n < 2) {
        free(args);
        return kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "invalid txn compare request: %s", line);
    }
    Etcdserverpb__RequestOp *op = own(t, malloc(sizeof(*op)));
    char **pos = calloc(n + 1, sizeof(char *));
    size_t np = 0;
    struct kvctl_mem mem = {0};
    char err[512];
    if (!op || !pos) {
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        goto out;
    }
    etcdserverpb__request_op__init(op);
    static const char *const names[] = {"put", "get", "del"};
    int which = kvctl_match(args[0], names, 3);
    struct kvctl_put_flags pf;
    struct kvctl_get_flags gf;
    struct kvctl_del_flags df;
    kvctl_put_flags_init(&pf);
    kvctl_get_flags_init(&gf);
    kvctl_del_flags_init(&df);
    struct kvctl_flag *table = which == 0 ? pf.table : which == 1 ? gf.table : df.table;
    if (which < 0 ||
        kvctl_flags_parse((int)n - 1, args + 1, &table, 1, pos, &np, err, sizeof(err)) < 0) {
        rc = kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "invalid txn request: %s", line);
        goto out;
    }
    if (which == 0) {
        Etcdserverpb__PutRequest *r = own(t, malloc(sizeof(*r)));
        rc = r ? kvctl_put_op(np, pos, &pf, false, r, &mem) : KVCTL_EXIT_ERROR;
        op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        op->request_put = r;
    } else if (which == 1) {
        Etcdserverpb__RangeRequest *r = own(t, malloc(sizeof(*r)));
        rc = r ? kvctl_get_op(np, pos, &gf, r, &mem) : KVCTL_EXIT_ERROR;
        op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
        op->request_range = r;
    } else {
        Etcdserverpb__DeleteRangeRequest *r = own(t, malloc(sizeof(*r)));
        rc = r ? kvctl_del_op(np, pos, &df, r, &mem) : KVCTL_EXIT_ERROR;
        op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
        op->request_delete_range = r;
    }
    if (rc)
        goto out;
    /* blocks computed by the builders (prefix range ends) now belong to the txn */
    for (size_t i = 0; i < mem.n; i++) {
        if (!own(t, mem.p[i])) {
            for (size_t j = i + 1; j < mem.n; j++)
                free(mem.p[j]);
            mem.n = 0;
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
            goto out;
        }
    }
    mem.n = 0;
    if (push((void ***)&t->ops[branch], &t->n_ops[branch], op) < 0)
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
out:
    kvctl_mem_free(&mem);
    free(pos);
    free(args);
    return rc;
}

/* Reads one section; returns 0 at its blank line, or the exit status after an error. */
static int read_section(struct txn *t, int section)
{
    for (;;) {
        char *raw = read_line();
        if (!raw)
            return kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "EOF");
        char *line = trim(raw);
        if (*line == '\0') {
            free(raw);
            return 0;
        }
        int rc = section == 0 ? add_cmp(t, line) : add_op(t, section - 1, line);
        free(raw);
        if (rc)
            return rc;
    }
}

int kvctl_cmd_txn(struct kvctl *k, int argc, char **argv)
{
    bool interactive = false;
    struct kvctl_flag fl[] = {
        {"interactive", 'i', KVCTL_FLAG_BOOL, &interactive, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    struct txn t;
    memset(&t, 0, sizeof(t));
    ProtobufCMessage *resp = NULL;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    if (np > 1) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "txn command does not accept argument");
        goto out;
    }
    static const char *const prompts[] = {
        "compares:", "success requests (get, put, del):", "failure requests (get, put, del):"};
    for (int s = 0; s < 3; s++) {
        if (interactive) {
            puts(prompts[s]);
            fflush(stdout);
        }
        rc = read_section(&t, s);
        if (rc)
            goto out;
    }
    etcdserverpb__txn_request__init(&t.req);
    t.req.compare = t.cmps;
    t.req.n_compare = t.n_cmps;
    t.req.success = t.ops[0];
    t.req.n_success = t.n_ops[0];
    t.req.failure = t.ops[1];
    t.req.n_failure = t.n_ops[1];
    /* etcdctl commits with context.Background(): no command timeout */
    rc = kvctl_call(k, "/etcdserverpb.KV/Txn", &t.req.base, &etcdserverpb__txn_response__descriptor,
                    &resp, 0, 0, KVCTL_EXIT_ERROR, NULL);
    if (rc)
        goto out;
    rc = kvctl_print_txn(k, (Etcdserverpb__TxnResponse *)resp);
out:
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    txn_free(&t);
    free(pos);
    return rc;
}
