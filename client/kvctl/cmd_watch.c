/*
 * kvctl watch (etcdctl 3.4's watch_command.go and the Watch methods of printer_simple.go,
 * printer_json.go, printer_fields.go).
 *
 * Watch responses arrive on libkvclient's I/O thread (callback) and are printed there, one
 * response at a time, flushed at once (etcdctl writes unbuffered). The main thread waits for
 * a watcher to be canceled by the server, or, with -i, reads `watch ...` / `progress` lines
 * from stdin as etcdctl does.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv.pb-c.h"
#include "out.h"
#include "print_fields.h"
#include "print_kv.h"
#include "spawn.h"

extern char **environ;

struct wflags {
    bool interactive, prefix, prev_kv, progress_notify;
    int64_t rev;
    struct kvctl_flag table[6];
};

static void wflags_init(struct wflags *f)
{
    memset(f, 0, sizeof *f);
    struct kvctl_flag t[] = {
        {"interactive", 'i', KVCTL_FLAG_BOOL, &f->interactive, false},
        {"prefix", 0, KVCTL_FLAG_BOOL, &f->prefix, false},
        {"rev", 0, KVCTL_FLAG_INT64, &f->rev, false},
        {"prev-kv", 0, KVCTL_FLAG_BOOL, &f->prev_kv, false},
        {"progress-notify", 0, KVCTL_FLAG_BOOL, &f->progress_notify, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    memcpy(f->table, t, sizeof t);
}

/* Shared by every watcher of the run (the callbacks run on the one I/O thread). */
struct wstate {
    struct kvctl *k;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int canceled;
    int exit_code; /* set by an exec failure */
};

struct wctx {
    struct wstate *st;
    char **exec_args; /* NULL-terminated, or NULL */
};

static void pb_kv(Mvccpb__KeyValue *o, const kvc_kv *kv)
{
    mvccpb__key_value__init(o);
    o->key.data = (uint8_t *)kv->key;
    o->key.len = kv->key_len;
    o->value.data = (uint8_t *)kv->value;
    o->value.len = kv->value_len;
    o->create_revision = kv->create_revision;
    o->mod_revision = kv->mod_revision;
    o->version = kv->version;
    o->lease = kv->lease;
}

static void put_bytes(struct kvctl_buf *b, bool hex, const uint8_t *p, size_t n)
{
    if (hex)
        for (size_t i = 0; i < n; i++)
            kvctl_buf_printf(b, "\\x%02x", p[i]);
    else
        kvctl_buf_putn(b, p, n);
    kvctl_buf_puts(b, "\n");
}

static void print_simple(struct kvctl_buf *b, const struct kvctl *k, const kvc_watch_response *r)
{
    for (size_t i = 0; i < r->n_events; i++) {
        const kvc_event *e = &r->events[i];
        kvctl_buf_puts(b, e->type == KVC_EVENT_DELETE ? "DELETE\n" : "PUT\n");
        if (e->has_prev_kv) {
            put_bytes(b, k->hex, e->prev_kv.key, e->prev_kv.key_len);
            put_bytes(b, k->hex, e->prev_kv.value, e->prev_kv.value_len);
        }
        put_bytes(b, k->hex, e->kv.key, e->kv.key_len);
        put_bytes(b, k->hex, e->kv.value, e->kv.value_len);
    }
}

static void pb_header(Etcdserverpb__ResponseHeader *h, const kvc_header *kh)
{
    etcdserverpb__response_header__init(h);
    h->cluster_id = kh->cluster_id;
    h->member_id = kh->member_id;
    h->revision = kh->revision;
    h->raft_term = kh->raft_term;
}

/* json.Marshal(clientv3.WatchResponse) */
static void print_json(struct kvctl_buf *b, const kvc_watch_response *r)
{
    Etcdserverpb__ResponseHeader h;
    pb_header(&h, &r->header);
    kvctl_buf_puts(b, "{\"Header\":");
    kvctl_json_message(b, &h.base);
    kvctl_buf_puts(b, ",\"Events\":[");
    for (size_t i = 0; i < r->n_events; i++) {
        const kvc_event *e = &r->events[i];
        Mvccpb__Event ev;
        Mvccpb__KeyValue kv, prev;
        mvccpb__event__init(&ev);
        ev.type = e->type == KVC_EVENT_DELETE ? MVCCPB__EVENT__EVENT_TYPE__DELETE
                                              : MVCCPB__EVENT__EVENT_TYPE__PUT;
        pb_kv(&kv, &e->kv);
        ev.kv = &kv;
        if (e->has_prev_kv) {
            pb_kv(&prev, &e->prev_kv);
            ev.prev_kv = &prev;
        }
        if (i)
            kvctl_buf_puts(b, ",");
        kvctl_json_message(b, &ev.base);
    }
    kvctl_buf_printf(b, "],\"CompactRevision\":%" PRId64 ",\"Canceled\":%s,\"Created\":%s}\n",
                     r->compact_revision, r->canceled ? "true" : "false",
                     r->created ? "true" : "false");
}

/* etcdctl's pbPrinter.Watch: a pb.WatchResponse with header, events, compact_revision,
 * canceled and created (no watch_id), unframed. */
static void print_pb(const kvc_watch_response *r)
{
    Etcdserverpb__ResponseHeader h;
    pb_header(&h, &r->header);
    Etcdserverpb__WatchResponse wr;
    etcdserverpb__watch_response__init(&wr);
    wr.header = &h;
    wr.compact_revision = r->compact_revision;
    wr.canceled = r->canceled != 0;
    wr.created = r->created != 0;
    Mvccpb__Event *evs = calloc(r->n_events ? r->n_events : 1, sizeof *evs);
    Mvccpb__Event **evp = calloc(r->n_events ? r->n_events : 1, sizeof *evp);
    Mvccpb__KeyValue *kvs = calloc(2 * (r->n_events ? r->n_events : 1), sizeof *kvs);
    if (!evs || !evp || !kvs)
        goto out;
    for (size_t i = 0; i < r->n_events; i++) {
        const kvc_event *e = &r->events[i];
        mvccpb__event__init(&evs[i]);
        evs[i].type = e->type == KVC_EVENT_DELETE ? MVCCPB__EVENT__EVENT_TYPE__DELETE
                                                  : MVCCPB__EVENT__EVENT_TYPE__PUT;
        pb_kv(&kvs[2 * i], &e->kv);
        evs[i].kv = &kvs[2 * i];
        if (e->has_prev_kv) {
            pb_kv(&kvs[2 * i + 1], &e->prev_kv);
            evs[i].prev_kv = &kvs[2 * i + 1];
        }
        evp[i] = &evs[i];
    }
    wr.events = evp;
    wr.n_events = r->n_events;
    kvctl_print_pb(&wr.base);
out:
    free(evs);
    free(evp);
    free(kvs);
}

static void print_fields(struct kvctl_buf *b, const kvc_watch_response *r)
{
    kvctl_fields_header(b, r->header.cluster_id, r->header.member_id, r->header.revision,
                        r->header.raft_term);
    for (size_t i = 0; i < r->n_events; i++) {
        const kvc_event *e = &r->events[i];
        Mvccpb__KeyValue kv;
        kvctl_buf_printf(b, "\"Type\" : %s\n", e->type == KVC_EVENT_DELETE ? "DELETE" : "PUT");
        if (e->has_prev_kv) {
            pb_kv(&kv, &e->prev_kv);
            kvctl_fields_kv(b, "Prev", &kv);
        }
        pb_kv(&kv, &e->kv);
        kvctl_fields_kv(b, "", &kv);
    }
}

/* etcdctl's exec of `watch ... -- cmd args`: once per event, with ETCD_WATCH_* set. */
static int run_exec(struct wctx *w, const kvc_watch_response *r, const kvc_event *e)
{
    struct kvctl_buf v[4] = {{0}};
    kvctl_buf_printf(&v[0], "ETCD_WATCH_REVISION=%" PRId64, r->header.revision);
    kvctl_buf_printf(&v[1], "ETCD_WATCH_EVENT_TYPE=\"%s\"",
                     e->type == KVC_EVENT_DELETE ? "DELETE" : "PUT");
    kvctl_buf_puts(&v[2], "ETCD_WATCH_KEY=");
    kvctl_go_quote(&v[2], e->kv.key, e->kv.key_len);
    kvctl_buf_puts(&v[3], "ETCD_WATCH_VALUE=");
    kvctl_go_quote(&v[3], e->kv.value, e->kv.value_len);
    const char *const env[] = {kvctl_buf_str(&v[0]), kvctl_buf_str(&v[1]), kvctl_buf_str(&v[2]),
                               kvctl_buf_str(&v[3]), NULL};
    struct kvctl_buf err = {0};
    int status = kvctl_spawn_wait(w->exec_args, env, &err);
    for (int i = 0; i < 4; i++)
        kvctl_buf_free(&v[i]);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        struct kvctl_buf m = {0};
        kvctl_buf_puts(&m, "[");
        for (char **a = w->exec_args; *a; a++) {
            if (a != w->exec_args)
                kvctl_buf_puts(&m, " ");
            kvctl_go_quote(&m, (const uint8_t *)*a, strlen(*a));
        }
        kvctl_buf_puts(&m, "]");
        if (status >= 0) /* Go's ExitError */
            kvctl_spawn_status_error(&err, status);
        /* else Go's exec error, already in err (client/kvctl/spawn.h) */
        fprintf(stderr, "command %s error (%s)\n", kvctl_buf_str(&m), kvctl_buf_str(&err));
        kvctl_buf_free(&m);
        kvctl_buf_free(&err);
        return -1;
    }
    kvctl_buf_free(&err);
    return 0;
}

static void on_resp(void *arg, const kvc_watch_response *r)
{
    struct wctx *w = arg;
    struct wstate *st = w->st;
    const struct kvctl *k = st->k;
    if (r->canceled) {
        kvc_error e = {.code = -r->status};
        snprintf(e.message, sizeof e.message, "%s", r->cancel_reason);
        char m[300];
        fprintf(stderr, "watch was canceled (%s)\n", kvctl_err_text(&e, m, sizeof m));
    }
    if (r->progress_notify)
        printf("progress notify: %" PRId64 "\n", r->header.revision);
    if (k->format == KVCTL_FMT_TABLE) {
        /* etcdctl fails only when it has a response to print, and exits at once */
        fflush(stdout);
        kvctl_unsupported_format(k);
        fflush(stderr);
        _exit(KVCTL_EXIT_BAD_FEATURE);
    }
    struct kvctl_buf b = {0};
    if (k->format == KVCTL_FMT_PROTOBUF)
        print_pb(r);
    else if (k->format == KVCTL_FMT_JSON)
        print_json(&b, r);
    else if (k->format == KVCTL_FMT_FIELDS)
        print_fields(&b, r);
    else
        print_simple(&b, k, r);
    kvctl_buf_write(&b, stdout);
    kvctl_buf_free(&b);
    fflush(stdout);
    int failed = 0;
    if (w->exec_args)
        for (size_t i = 0; i < r->n_events && !failed; i++)
            failed = run_exec(w, r, &r->events[i]) != 0;
    if (r->canceled || failed) {
        pthread_mutex_lock(&st->mu);
        st->canceled = 1;
        if (failed)
            st->exit_code = KVCTL_EXIT_ERROR;
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&st->mu);
    }
}

/* Builds the options for key [range_end]; returns 0 or prints the error (exit 128). */
static int watch_opts(const struct wflags *f, size_t n, char **args, kvc_watch_opts *o, char *err,
                      size_t errlen)
{
    memset(o, 0, sizeof *o);
    if (n < 1) {
        snprintf(err, errlen, "bad number of arguments");
        return -1;
    }
    if (n == 2) {
        if (f->prefix) {
            snprintf(err, errlen, "`range_end` and `--prefix` are mutually exclusive");
            return -1;
        }
        o->range_end = (const uint8_t *)args[1];
        o->range_end_len = strlen(args[1]);
    }
    o->prefix = f->prefix;
    o->prev_kv = f->prev_kv;
    o->progress_notify = f->progress_notify;
    o->start_revision = f->rev;
    return 0;
}

/* The reason a watch could not be created, as etcdctl reports a canceled watch. */
static int create(struct kvctl *k, struct wctx *w, const char *key, const kvc_watch_opts *o,
                  kvc_watch **out, kvc_error *err)
{
    int code = 0;
    kvc_client *c = kvctl_client(k, &code);
    if (!c)
        return code;
    if (kvc_watch_create(c, key, strlen(key), o, 0, on_resp, w, out, NULL, err) != 0)
        return -1;
    return 0;
}

static void wait_canceled(struct wstate *st)
{
    pthread_mutex_lock(&st->mu);
    while (!st->canceled)
        pthread_cond_wait(&st->cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
}

/* etcdctl's Argify: split on spaces, keeping quoted strings (quotes removed). */
static size_t argify(char *line, char **argv, size_t max)
{
    size_t n = 0;
    char *p = line;
    while (*p && n < max) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        char *o = p, *start = p;
        char q = 0;
        while (*p && (q || (*p != ' ' && *p != '\t'))) {
            if (!q && (*p == '"' || *p == '\'')) {
                q = *p++;
                continue;
            }
            if (q && *p == q) {
                q = 0;
                p++;
                continue;
            }
            *o++ = *p++;
        }
        if (*p)
            p++;
        *o = '\0';
        argv[n++] = start;
    }
    return n;
}

static int interactive(struct kvctl *k, struct wstate *st)
{
    int code = 0;
    kvc_client *c = kvctl_client(k, &code);
    if (!c)
        return code;
    char *line = NULL;
    size_t cap = 0;
    kvc_watch *ws[256];
    struct wctx *ctxs[256];
    size_t nw = 0;
    int rc;
    for (;;) {
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0 || (len > 0 && line[len - 1] != '\n')) {
            rc = kvctl_fail(KVCTL_EXIT_INVALID_INPUT, "Error reading watch request line: EOF");
            break;
        }
        line[--len] = '\0';
        char *copy = strdup(line);
        char *args[64];
        size_t na = copy ? argify(copy, args, 64) : 0;
        if (na < 1) {
            fprintf(stderr, "Invalid command: %s (watch and progress supported)\n", line);
            free(copy);
            continue;
        }
        if (strcmp(args[0], "progress") == 0) {
            kvc_error e;
            /* no watcher yet: etcdctl's request goes nowhere either */
            if (kvc_watch_progress(c, &e) != 0 && e.code != KVC_UNAVAILABLE) {
                char m[300];
                free(copy);
                rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", kvctl_err_text(&e, m, sizeof m));
                break;
            }
            free(copy);
            continue;
        }
        if (strcmp(args[0], "watch") != 0) {
            fprintf(stderr, "Invalid command %s (only support watch)\n", line);
            free(copy);
            continue;
        }
        if (na < 2) {
            fprintf(stderr, "Invalid command %s (command type or key is not provided)\n", line);
            free(copy);
            continue;
        }
        struct wflags f;
        wflags_init(&f);
        struct kvctl_flag *sets[1] = {f.table};
        char *pos[64];
        size_t np = 0;
        char err[300];
        size_t sep = na;
        for (size_t i = 1; i < na; i++)
            if (strcmp(args[i], "--") == 0) {
                sep = i;
                break;
            }
        if (sep == na - 1) {
            free(copy);
            rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                            "bad number of arguments (found separator --, but no commands)");
            break;
        }
        if (kvctl_flags_parse((int)(sep - 1), args + 1, sets, 1, pos, &np, err, sizeof err) < 0) {
            free(copy);
            rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "%s", err);
            break;
        }
        kvc_watch_opts o;
        if (watch_opts(&f, np, pos, &o, err, sizeof err) != 0 || nw == 256) {
            fprintf(stderr, "Invalid command %s (%s)\n", line,
                    nw == 256 ? "too many watchers" : err);
            free(copy);
            continue;
        }
        struct wctx *w = calloc(1, sizeof *w);
        if (!w) {
            free(copy);
            rc = kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
            break;
        }
        w->st = st;
        if (sep < na) {
            w->exec_args = calloc(na - sep, sizeof(char *));
            for (size_t i = sep + 1; w->exec_args && i < na; i++)
                w->exec_args[i - sep - 1] = strdup(args[i]);
        }
        kvc_error e;
        kvc_watch *wh = NULL;
        if (kvc_watch_create(c, pos[0], strlen(pos[0]), &o, 0, on_resp, w, &wh, NULL, &e) != 0) {
            char m[300];
            fprintf(stderr, "watch was canceled (%s)\n", kvctl_err_text(&e, m, sizeof m));
        }
        ws[nw] = wh;
        ctxs[nw++] = w;
        free(copy);
    }
    for (size_t i = 0; i < nw; i++) {
        kvc_watch_cancel(ws[i]);
        if (ctxs[i]->exec_args)
            for (char **a = ctxs[i]->exec_args; *a; a++)
                free(*a);
        free(ctxs[i]->exec_args);
        free(ctxs[i]);
    }
    free(line);
    return rc;
}

int kvctl_cmd_watch(struct kvctl *k, int argc, char **argv)
{
    struct wflags f;
    wflags_init(&f);
    struct wstate st = {.k = k};
    pthread_mutex_init(&st.mu, NULL);
    pthread_cond_init(&st.cv, NULL);
    /* "watch [flags] key [range_end] -- cmd args": the exec part is not parsed as flags */
    int sep = argc;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            sep = i;
            break;
        }
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    kvc_watch *wh = NULL;
    int rc;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    rc = kvctl_parse_cmd(k, sep, argv, f.table, pos, &np);
    if (rc)
        goto out;
    const char *env_key = getenv("ETCDCTL_WATCH_KEY");
    const char *env_end = getenv("ETCDCTL_WATCH_RANGE_END");
    if ((!env_key || !*env_key) && env_end && *env_end) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                        "ETCDCTL_WATCH_KEY is empty but got ETCDCTL_WATCH_RANGE_END=\"%s\"",
                        env_end);
        goto out;
    }
    if (f.interactive) {
        rc = interactive(k, &st);
        goto out;
    }
    if (sep == argc - 1) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                        "bad number of arguments (found separator --, but no commands)");
        goto out;
    }
    char *args[2];
    size_t na = np - 1;
    char **wargs = pos + 1;
    if (env_key && *env_key) {
        if (na > 0) {
            rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS,
                            "bad number of arguments (found conflicting environment key)");
            goto out;
        }
        args[0] = (char *)env_key;
        args[1] = (char *)env_end;
        na = env_end && *env_end ? 2 : 1;
        wargs = args;
    }
    kvc_watch_opts o;
    char err[300];
    if (watch_opts(&f, na, wargs, &o, err, sizeof err) != 0) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "%s", err);
        goto out;
    }
    struct wctx w = {.st = &st, .exec_args = sep < argc ? argv + sep + 1 : NULL};
    kvc_error e;
    rc = create(k, &w, wargs[0], &o, &wh, &e);
    if (rc > 0)
        goto out;
    if (rc < 0) {
        char m[300];
        fprintf(stderr, "watch was canceled (%s)\n", kvctl_err_text(&e, m, sizeof m));
        rc = kvctl_fail(KVCTL_EXIT_INTERRUPTED, "watch is canceled by the server");
        goto out;
    }
    wait_canceled(&st);
    kvc_watch_cancel(wh);
    wh = NULL;
    rc = st.exit_code ? st.exit_code
                      : kvctl_fail(KVCTL_EXIT_INTERRUPTED, "watch is canceled by the server");
out:
    if (wh)
        kvc_watch_cancel(wh);
    free(pos);
    pthread_mutex_destroy(&st.mu);
    pthread_cond_destroy(&st.cv);
    return rc;
}
