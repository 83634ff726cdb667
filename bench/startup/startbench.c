/*
 * startbench: restart-to-serving time of a single member that holds --keys keys and a full
 * raft-log tail (about --snapshot-count entries since the last log compaction), kvd vs
 * etcd 3.4 (one after the other in the same run; not a test: it only prints).
 * For each server: a fresh member with --snapshot-count N and an 8 GiB quota; load the keys
 * (txns of up to 100 puts from --clients clients); then single-key puts (overwrites) until
 * the applied index is N - 1000, so that no log compaction has happened yet and the whole
 * tail is replayed at a restart; then --repeats restarts (kill -9 and SIGTERM alternating,
 * kill -9 first), each timed from the fork to the first answer of a linearizable Range and
 * followed by a check that a known key still has its value at the same revision. Any failed
 * call aborts the run with its error; servers are stopped and their dirs removed on every
 * path (KV_TEST_KEEP_DIRS=1 keeps the dirs).
 */
#include "bsrv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MAX_REPEATS 32
#define TXN_MAX_OPS 100
#define TAIL_MARGIN 1000 /* entries left below --snapshot-count */
#define MAX_ARGS 16      /* --kvd-args / --etcd-args words */

typedef struct opts {
    long keys, snap_count, tail_puts; /* tail_puts < 0: computed */
    int value_size, clients, repeats;
    double restart_timeout_s;
    int do_kvd, do_etcd;
    const char *args[2]; /* --kvd-args / --etcd-args: more flags, split on blanks (borrowed) */
} opts;

typedef struct result {
    int ok;
    long keys, tail_puts;
    double load_s, tail_s;
    double applied_before, applied_after; /* applied index after the load / before restarts */
    double compactions;                   /* log compactions seen (-1: no metric) */
    double log_bytes;                     /* kvd_raft_log_bytes (-1: no metric) */
    uint64_t backend_bytes, wal_bytes;
    double kill9[MAX_REPEATS], term[MAX_REPEATS];
    size_t n_kill9, n_term;
} result;

static double mb(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* ---- load and tail workers ---- */

typedef struct work_sh {
    const bsrv_server *s;
    kvc_loop_group *g;
    long keys, tail; /* tail > 0: tail puts; else the load */
    int clients, value_size, per_txn;
    int64_t max_rev;
    pthread_mutex_t mu;
    volatile int failed;
    char err[300];
} work_sh;

typedef struct work_w {
    work_sh *sh;
    int idx;
    pthread_t th;
} work_w;

/* Value of a key: "<tag><n>-" then 'x' up to len bytes (truncated when len is small). */
static void make_value(char *val, int len, char tag, long n)
{
    char head[32];
    int hn = snprintf(head, sizeof(head), "%c%08ld-", tag, n);
    memset(val, 'x', (size_t)len);
    memcpy(val, head, (size_t)(hn < len ? hn : len));
}

static int load_batch(kvc_client *c, work_sh *sh, long first, char *val, int64_t *rev, kvc_error *e)
{
    char key[32];
    int rc = 0;
    kvc_txn *t = kvc_txn_new();
    if (!t) {
        snprintf(e->message, sizeof(e->message), "kvc_txn_new: out of memory");
        e->code = KVC_RESOURCE_EXHAUSTED;
        return -ENOMEM;
    }
    long end = first + sh->per_txn < sh->keys ? first + sh->per_txn : sh->keys;
    for (long i = first; !rc && i < end; i++) {
        int n = snprintf(key, sizeof(key), "k/%08ld", i);
        make_value(val, sh->value_size, 'v', i);
        rc = kvc_txn_put(t, KVC_TXN_SUCCESS, key, (size_t)n, val, (size_t)sh->value_size, NULL);
        if (rc) {
            e->code = -rc;
            snprintf(e->message, sizeof(e->message), "kvc_txn_put failed");
        }
    }
    kvc_txn_result r;
    if (!rc && (rc = kvc_txn_commit(c, t, 0, 60000, &r, e)) == 0) {
        if (r.header.revision > *rev)
            *rev = r.header.revision;
        kvc_txn_result_free(&r);
    }
    kvc_txn_free(t);
    return rc;
}

static void *work_main(void *arg)
{
    work_w *w = arg;
    work_sh *sh = w->sh;
    kvc_client *c = NULL;
    kvc_error e = {0};
    char key[32];
    int64_t rev = 0;
    char *val = malloc((size_t)sh->value_size);
    int rc = val ? bsrv_client(&c, sh->s, sh->g, NULL, &e) : -ENOMEM;
    if (!val)
        snprintf(e.message, sizeof(e.message), "out of memory");
    if (sh->tail > 0) {
        for (long j = w->idx; !rc && j < sh->tail && !sh->failed; j += sh->clients) {
            long k = j % sh->keys;
            int n = snprintf(key, sizeof(key), "k/%08ld", k);
            make_value(val, sh->value_size, 't', j);
            kvc_put_result r;
            rc = kvc_put(c, key, (size_t)n, val, (size_t)sh->value_size, NULL, 60000, &r, &e);
            if (!rc) {
                if (r.header.revision > rev)
                    rev = r.header.revision;
                kvc_put_result_free(&r);
            }
        }
    } else {
        long batches = (sh->keys + sh->per_txn - 1) / sh->per_txn;
        for (long b = w->idx; !rc && b < batches && !sh->failed; b += sh->clients)
            rc = load_batch(c, sh, b * sh->per_txn, val, &rev, &e);
    }
    pthread_mutex_lock(&sh->mu);
    if (rc && !sh->failed) {
        sh->failed = 1;
        snprintf(sh->err, sizeof(sh->err), "%s: %d %s", sh->tail > 0 ? "put" : "txn", e.code,
                 e.message);
    }
    if (rev > sh->max_rev)
        sh->max_rev = rev;
    pthread_mutex_unlock(&sh->mu);
    free(val);
    kvc_close(c);
    return NULL;
}

/* The load (tail == 0) or tail puts from o->clients clients; *rev: the highest revision. */
static int run_workers(const bsrv_server *s, const opts *o, long tail, int64_t *rev, char *err,
                       size_t errcap)
{
    work_sh sh = {
        .s = s, .keys = o->keys, .tail = tail, .clients = o->clients, .value_size = o->value_size};
    /* at most 100 puts and about 1 MiB per txn (the servers' request limit is 1.5 MiB) */
    sh.per_txn = (int)((1L << 20) / (o->value_size + 64));
    sh.per_txn = sh.per_txn < 1 ? 1 : sh.per_txn > TXN_MAX_OPS ? TXN_MAX_OPS : sh.per_txn;
    int rc = 0, started = 0;
    kvc_error e;
    work_w *w = NULL;
    pthread_mutex_init(&sh.mu, NULL);
    if (kvc_loop_group_new(&sh.g, &e)) {
        snprintf(err, errcap, "loop group: %s", e.message);
        rc = -ENOMEM;
        goto cleanup;
    }
    if (!(w = calloc((size_t)o->clients, sizeof(*w)))) {
        snprintf(err, errcap, "out of memory");
        rc = -ENOMEM;
        goto cleanup;
    }
    for (; started < o->clients; started++) {
        w[started].sh = &sh;
        w[started].idx = started;
        if ((rc = -pthread_create(&w[started].th, NULL, work_main, &w[started]))) {
            snprintf(err, errcap, "pthread_create: %s", strerror(-rc));
            sh.failed = 1;
            break;
        }
    }
cleanup:
    for (int i = 0; i < started; i++)
        pthread_join(w[i].th, NULL);
    free(w);
    if (sh.g)
        kvc_loop_group_free(sh.g);
    pthread_mutex_destroy(&sh.mu);
    *rev = sh.max_rev;
    if (!rc && sh.failed) {
        snprintf(err, errcap, "%s: %s", bsrv_name(s->kind), sh.err);
        rc = -EIO;
    }
    return rc;
}

/* ---- metrics (GET /metrics over HTTP/1.0 on the client port) ---- */

/* *out: the body, malloc'd and NUL-terminated; the caller frees it. */
static int fetch_metrics(const bsrv_server *s, char **out)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), rc = 0;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    *out = NULL;
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(s->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
        rc = -errno;
        goto cleanup;
    }
    for (;;) {
        if (cap - len < 65536) {
            char *nb = realloc(buf, cap + 262144);
            if (!nb) {
                rc = -ENOMEM;
                goto cleanup;
            }
            buf = nb;
            cap += 262144;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            goto cleanup;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = 0;
    if (strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 8, " 200", 4) != 0) {
        rc = -EPROTO;
        goto cleanup;
    }
    *out = buf;
    buf = NULL;
cleanup:
    free(buf);
    close(fd);
    return rc;
}

/* The value of an unlabelled sample "name value" in body; -1 when absent. */
static double metric(const char *body, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ')
            return atof(p + nl + 1);
    return -1;
}

typedef struct log_state {
    double applied, compactions, log_bytes;
} log_state;

/* Applied index and log compactions so far. kvd: kvd_applied_index, compactions by bytes
 * (compactions by count are not counted: none happen below N + 5000 applied entries);
 * etcd: etcd_server_proposals_applied_total (its applied index), snapshots saved. */
static int read_log_state(const bsrv_server *s, log_state *ls, char *err, size_t errcap)
{
    char *body = NULL;
    int rc = fetch_metrics(s, &body);
    if (rc) {
        snprintf(err, errcap, "%s: GET /metrics: %s", bsrv_name(s->kind), strerror(-rc));
        return rc;
    }
    if (s->kind == BSRV_KVD) {
        ls->applied = metric(body, "kvd_applied_index");
        ls->compactions = metric(body, "kvd_raft_log_compactions_by_bytes_total");
        ls->log_bytes = metric(body, "kvd_raft_log_bytes");
    } else {
        ls->applied = metric(body, "etcd_server_proposals_applied_total");
        ls->compactions = metric(body, "etcd_debugging_snap_save_total_duration_seconds_count");
        ls->log_bytes = -1;
    }
    free(body);
    if (ls->applied < 0) {
        snprintf(err, errcap, "%s: no applied-index metric in /metrics", bsrv_name(s->kind));
        return -ENOENT;
    }
    return 0;
}

/* ---- checks ---- */

typedef struct ref_kv {
    char key[32];
    char *value;
    size_t value_len;
    int64_t revision;
} ref_kv;

/* Range of ref->key (linearizable): fills ref when ref->value is NULL, else compares. */
static int check_key(const bsrv_server *s, ref_kv *ref, char *err, size_t errcap)
{
    kvc_client *c = NULL;
    kvc_error e = {0};
    kvc_range_result r = {0};
    int rc = bsrv_client(&c, s, NULL, NULL, &e);
    if (!rc)
        rc = kvc_get(c, ref->key, strlen(ref->key), NULL, 10000, &r, &e);
    if (rc) {
        snprintf(err, errcap, "%s: Range %s: %d %s", bsrv_name(s->kind), ref->key, e.code,
                 e.message);
        goto cleanup;
    }
    if (r.n_kvs != 1) {
        snprintf(err, errcap, "%s: Range %s: %zu keys", bsrv_name(s->kind), ref->key, r.n_kvs);
        rc = -ENOENT;
        goto cleanup;
    }
    if (!ref->value) {
        if (!(ref->value = malloc(r.kvs[0].value_len + 1))) {
            rc = -ENOMEM;
            snprintf(err, errcap, "out of memory");
            goto cleanup;
        }
        memcpy(ref->value, r.kvs[0].value, r.kvs[0].value_len);
        ref->value_len = r.kvs[0].value_len;
        ref->revision = r.header.revision;
    } else if (r.kvs[0].value_len != ref->value_len ||
               memcmp(r.kvs[0].value, ref->value, ref->value_len) != 0 ||
               r.header.revision != ref->revision) {
        snprintf(err, errcap,
                 "%s: %s after the restart: value %s (%zu bytes), store revision %lld, "
                 "expected %lld",
                 bsrv_name(s->kind), ref->key,
                 r.kvs[0].value_len == ref->value_len &&
                         !memcmp(r.kvs[0].value, ref->value, ref->value_len)
                     ? "same"
                     : "DIFFERENT",
                 r.kvs[0].value_len, (long long)r.header.revision, (long long)ref->revision);
        rc = -EIO;
    }
cleanup:
    kvc_range_result_free(&r);
    kvc_close(c);
    return rc;
}

/* Count of the keys under "k/" (count only, linearizable). */
static int count_keys(const bsrv_server *s, int64_t *count, char *err, size_t errcap)
{
    kvc_client *c = NULL;
    kvc_error e = {0};
    kvc_range_result r = {0};
    kvc_range_opts ro = {.prefix = 1, .count_only = 1};
    int rc = bsrv_client(&c, s, NULL, NULL, &e);
    if (!rc)
        rc = kvc_get(c, "k/", 2, &ro, 120000, &r, &e);
    if (rc)
        snprintf(err, errcap, "%s: count k/: %d %s", bsrv_name(s->kind), e.code, e.message);
    else
        *count = r.count;
    kvc_range_result_free(&r);
    kvc_close(c);
    return rc;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* ---- one server ---- */

static int bench_one(const opts *o, bsrv_kind k, result *r, char *err, size_t errcap)
{
    memset(r, 0, sizeof(*r));
    const char *name = bsrv_name(k);
    char a_snap[64], path[512], words[1024];
    snprintf(a_snap, sizeof(a_snap), "--snapshot-count=%ld", o->snap_count);
    /* borrowed by s until bsrv_stop (bsrv_restart passes them again) */
    const char *extra[3 + MAX_ARGS] = {a_snap, "--quota-backend-bytes=8589934592"};
    int n_extra = 2;
    snprintf(words, sizeof(words), "%s", o->args[k] ? o->args[k] : "");
    for (char *save = NULL, *w = strtok_r(words, " \t", &save); w && n_extra < 2 + MAX_ARGS;
         w = strtok_r(NULL, " \t", &save))
        extra[n_extra++] = w;
    extra[n_extra] = NULL;
    ref_kv ref = {0};
    bsrv_server s;
    int rc = bsrv_start(&s, k, 0, NULL, extra, err, errcap);
    if (rc)
        goto cleanup;
    if (n_extra > 2)
        printf("%s: more flags: %s\n", name, o->args[k]);
    r->keys = o->keys;
    printf("%s: loading %ld keys of %d bytes (txns of up to %d puts, %d clients) ...\n", name,
           o->keys, o->value_size, TXN_MAX_OPS, o->clients);
    fflush(stdout);
    int64_t rev = 0;
    double t0 = bsrv_now();
    if ((rc = run_workers(&s, o, 0, &rev, err, errcap)))
        goto cleanup;
    r->load_s = bsrv_now() - t0;
    log_state ls;
    if ((rc = read_log_state(&s, &ls, err, errcap)))
        goto cleanup;
    /* the applied-index metric may trail the last answer by a few entries */
    r->applied_before = ls.applied > (double)rev ? ls.applied : (double)rev;
    printf("%s: loaded in %.1f s (%.0f keys/s); revision %lld, applied index %.0f\n", name,
           r->load_s, (double)o->keys / r->load_s, (long long)rev, ls.applied);

    /* the tail: up to applied index N - 1000 (below the first compaction of either) */
    long target = o->snap_count - TAIL_MARGIN;
    r->tail_puts = o->tail_puts >= 0 ? o->tail_puts : target - (long)r->applied_before;
    if (r->tail_puts < 0) {
        printf("%s: note: the load alone applied %.0f entries, more than --snapshot-count - %d: "
               "no tail puts, and the log may have been compacted during the load (then it "
               "holds fewer entries); raise --snapshot-count or lower --keys\n",
               name, r->applied_before, TAIL_MARGIN);
        r->tail_puts = 0;
    }
    printf("%s: filling the raft log's tail: %ld single-key puts (overwrites) ...\n", name,
           r->tail_puts);
    fflush(stdout);
    t0 = bsrv_now();
    if (r->tail_puts > 0 && (rc = run_workers(&s, o, r->tail_puts, &rev, err, errcap)))
        goto cleanup;
    r->tail_s = bsrv_now() - t0;
    if ((rc = read_log_state(&s, &ls, err, errcap)))
        goto cleanup;
    r->applied_after = ls.applied;
    r->compactions = ls.compactions;
    r->log_bytes = ls.log_bytes;
    snprintf(path, sizeof(path), k == BSRV_KVD ? "%s/data.mdb" : "%s/member/snap/db", s.data_dir);
    r->backend_bytes = file_size(path);
    snprintf(path, sizeof(path), k == BSRV_KVD ? "%s/wal" : "%s/member/wal", s.data_dir);
    uint64_t largest = 0;
    bsrv_dir_sizes(path, &largest, &r->wal_bytes);
    printf("%s: tail written in %.1f s (%.0f puts/s); applied index %.0f, log compactions %.0f "
           "(%s)\n",
           name, r->tail_s, r->tail_s > 0 ? (double)r->tail_puts / r->tail_s : 0, ls.applied,
           ls.compactions,
           k == BSRV_KVD ? "kvd_raft_log_compactions_by_bytes_total"
                         : "etcd_debugging_snap_save_total_duration_seconds_count");
    printf("%s: backend file %.1f MB, WAL dir %.1f MB (preallocated segments)", name,
           mb(r->backend_bytes), mb(r->wal_bytes));
    if (r->log_bytes >= 0)
        printf(", kvd_raft_log_bytes %.1f MB", r->log_bytes / 1048576.0);
    printf("\n");
    if (k == BSRV_KVD && r->compactions > 0)
        printf("kvd: note: the log passed a quarter of --max-raft-log-bytes (default: (map size - "
               "quota) / 4) and was compacted by bytes: a restart replays only the "
               "kvd_raft_log_bytes above, not every entry since the start\n");
    fflush(stdout);

    /* the reference: the last tail put's key (or the last loaded key) */
    snprintf(ref.key, sizeof(ref.key), "k/%08ld",
             r->tail_puts > 0 ? (r->tail_puts - 1) % o->keys : o->keys - 1);
    if ((rc = check_key(&s, &ref, err, errcap)))
        goto cleanup;

    for (int i = 0; i < o->repeats; i++) {
        int kill9 = i % 2 == 0;
        double serve = 0, w0 = bsrv_now();
        if ((rc = bsrv_restart(&s, kill9, o->restart_timeout_s, &serve, err, errcap)))
            goto cleanup;
        double stop = bsrv_now() - w0 - serve;
        if (kill9)
            r->kill9[r->n_kill9++] = serve;
        else
            r->term[r->n_term++] = serve;
        if ((rc = check_key(&s, &ref, err, errcap)))
            goto cleanup;
        printf("%s: restart %d (%s): serving %.3f s after the exec (stop took %.2f s); %s has "
               "its value at revision %lld\n",
               name, i + 1, kill9 ? "kill -9" : "SIGTERM", serve, stop, ref.key,
               (long long)ref.revision);
        fflush(stdout);
    }
    int64_t count = 0;
    if ((rc = count_keys(&s, &count, err, errcap)))
        goto cleanup;
    if (count != o->keys) {
        snprintf(err, errcap, "%s: %lld keys under k/ after the restarts, expected %ld", name,
                 (long long)count, o->keys);
        rc = -EIO;
        goto cleanup;
    }
    printf("%s: %lld keys after the restarts\n", name, (long long)count);
    r->ok = 1;
cleanup:
    fflush(stdout);
    free(ref.value);
    bsrv_stop(&s);
    return rc;
}

/* ---- output ---- */

static void cell_times(const result *r, const double *v, size_t n)
{
    double tmp[MAX_REPEATS];
    if (!r->ok || !n) {
        printf(" n/a |");
        return;
    }
    memcpy(tmp, v, n * sizeof(double));
    double med = bsrv_median(tmp, n); /* sorts tmp */
    printf(" %.3f (%.3f-%.3f) |", med, tmp[0], tmp[n - 1]);
}

static double median_of(const double *v, size_t n)
{
    double tmp[MAX_REPEATS];
    memcpy(tmp, v, n * sizeof(double));
    return bsrv_median(tmp, n);
}

static void ratio(double kvd, double etcd)
{
    if (kvd > 0 && etcd > 0)
        printf(" %.2f |\n", etcd / kvd);
    else
        printf(" n/a |\n");
}

/* A table row: kvd's and etcd's value (n/a when that run failed or the value is < 0) and,
 * when with_ratio, etcd/kvd. */
static void row(const char *label, const char *fmt, const result res[2], double v0, double v1,
                int with_ratio)
{
    double v[2] = {v0, v1};
    printf("| %s |", label);
    for (int k = 0; k < 2; k++) {
        if (!res[k].ok || v[k] < 0) {
            printf(" n/a |");
            continue;
        }
        printf(" ");
        printf(fmt, v[k]);
        printf(" |");
    }
    if (with_ratio)
        ratio(res[0].ok ? v0 : 0, res[1].ok ? v1 : 0);
    else
        printf(" |\n");
}

static void usage(void)
{
    fprintf(stderr,
            "startbench [--keys N(1000000)] [--value-size B(64)] [--clients N(16)]\n"
            "           [--snapshot-count N(100000)] [--repeats N(3)] [--tail-puts N(auto)]\n"
            "           [--restart-timeout S(300)] [--server kvd|etcd|both]\n"
            "           [--kvd-args 'A B'] [--etcd-args 'A B']  (more flags, split on blanks)\n");
}

int main(int argc, char **argv)
{
    opts o = {.keys = 1000000,
              .snap_count = 100000,
              .tail_puts = -1,
              .value_size = 64,
              .clients = 16,
              .repeats = 3,
              .restart_timeout_s = 300,
              .do_kvd = 1,
              .do_etcd = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--keys"))
            o.keys = atol(v);
        else if (!strcmp(a, "--value-size"))
            o.value_size = atoi(v);
        else if (!strcmp(a, "--clients"))
            o.clients = atoi(v);
        else if (!strcmp(a, "--snapshot-count"))
            o.snap_count = atol(v);
        else if (!strcmp(a, "--repeats"))
            o.repeats = atoi(v);
        else if (!strcmp(a, "--tail-puts"))
            o.tail_puts = atol(v);
        else if (!strcmp(a, "--restart-timeout"))
            o.restart_timeout_s = atof(v);
        else if (!strcmp(a, "--kvd-args"))
            o.args[BSRV_KVD] = v;
        else if (!strcmp(a, "--etcd-args"))
            o.args[BSRV_ETCD] = v;
        else if (!strcmp(a, "--server")) {
            o.do_kvd = strcmp(v, "etcd") != 0;
            o.do_etcd = strcmp(v, "kvd") != 0;
        } else {
            usage();
            return 2;
        }
        i++;
    }
    if (o.keys < 1 || o.keys > 99999999 || o.value_size < 1 || o.value_size > 1000000 ||
        o.clients < 1 || o.clients > 1024 || o.snap_count <= TAIL_MARGIN || o.repeats < 1 ||
        o.repeats > MAX_REPEATS || o.restart_timeout_s <= 0) {
        usage();
        return 2;
    }
    if (o.do_etcd && access(bsrv_bin(BSRV_ETCD, NULL, 0), X_OK) != 0) {
        printf("startbench: %s not found: kvd only\n", bsrv_bin(BSRV_ETCD, NULL, 0));
        o.do_etcd = 0;
    }
    const char *tmp = getenv("TMPDIR");
    struct statvfs vf;
    /* one server at a time: the backend (~2-3x the key+value bytes), the WAL (the log's
     * bytes, in 64 MB segments) and slack */
    double need_mb =
        ((double)o.keys + (double)o.snap_count) * (o.value_size + 200) * 3 / 1048576.0 + 256;
    if (statvfs(tmp && *tmp ? tmp : "/tmp", &vf) == 0) {
        double free_mb = (double)vf.f_bavail * (double)vf.f_frsize / 1048576.0;
        if (free_mb < need_mb) {
            fprintf(stderr, "startbench: %.0f MB free, need about %.0f MB; use --keys\n", free_mb,
                    need_mb);
            return 1;
        }
    }
    printf("startbench: %ld keys of %d bytes, --snapshot-count %ld, %d clients, %d restarts "
           "(kill -9 and SIGTERM alternating, kill -9 first)\n",
           o.keys, o.value_size, o.snap_count, o.clients, o.repeats);
    fflush(stdout);
    result res[2];
    memset(res, 0, sizeof(res));
    char err[1024];
    int failed = 0;
    for (int k = 0; k < 2; k++) {
        if ((k == 0 && !o.do_kvd) || (k == 1 && !o.do_etcd))
            continue;
        if (bench_one(&o, (bsrv_kind)k, &res[k], err, sizeof(err))) {
            fprintf(stderr, "startbench: %s\n", err);
            failed = 1;
        }
    }

    const result *a = &res[0], *b = &res[1];
    printf("\nRestart to serving (fork/exec of the server to the first answer of a "
           "linearizable Range). Ratio etcd/kvd: > 1 means kvd is faster.\n\n");
    printf("| | kvd | etcd 3.4 | etcd/kvd |\n|---|---|---|---|\n");
    row("keys", "%.0f", res, (double)a->keys, (double)b->keys, 0);
    row("applied index at the restarts (the log's entries when no compaction)", "%.0f", res,
        a->applied_after, b->applied_after, 0);
    row("log compactions before the restarts (kvd: by bytes; etcd: snapshots)", "%.0f", res,
        a->compactions, b->compactions, 0);
    row("backend file, MB", "%.1f", res, mb(a->backend_bytes), mb(b->backend_bytes), 0);
    row("WAL dir, MB (preallocated segments)", "%.1f", res, mb(a->wal_bytes), mb(b->wal_bytes), 0);
    row("load: txns of up to 100 puts, s", "%.1f", res, a->load_s, b->load_s, 1);
    row("tail: single-key puts", "%.0f", res, (double)a->tail_puts, (double)b->tail_puts, 0);
    row("tail, s", "%.1f", res, a->tail_s, b->tail_s, 1);
    printf("| restart to serving after kill -9, s: median (min-max) |");
    for (int k = 0; k < 2; k++)
        cell_times(&res[k], res[k].kill9, res[k].n_kill9);
    ratio(a->ok && a->n_kill9 ? median_of(a->kill9, a->n_kill9) : 0,
          b->ok && b->n_kill9 ? median_of(b->kill9, b->n_kill9) : 0);
    printf("| restart to serving after SIGTERM, s: median (min-max) |");
    for (int k = 0; k < 2; k++)
        cell_times(&res[k], res[k].term, res[k].n_term);
    ratio(a->ok && a->n_term ? median_of(a->term, a->n_term) : 0,
          b->ok && b->n_term ? median_of(b->term, b->n_term) : 0);

    if (a->ok) {
        double m9 = a->n_kill9 ? median_of(a->kill9, a->n_kill9) : 0;
        double mt = a->n_term ? median_of(a->term, a->n_term) : 0;
        double worst = m9 > mt ? m9 : mt;
        printf("\nTarget: a kvd member with 1M keys and a full WAL tail (--snapshot-count "
               "entries) serves in under 1 s: %s (median after kill -9 %.3f s",
               worst < 1.0 ? "MET" : "MISSED", m9);
        if (a->n_term)
            printf(", after SIGTERM %.3f s", mt);
        printf(")");
        if (o.keys < 1000000 || o.snap_count < 100000)
            printf(" -- this run: %ld keys, --snapshot-count %ld, not the target's size", o.keys,
                   o.snap_count);
        printf("\n");
    }
    return failed;
}
