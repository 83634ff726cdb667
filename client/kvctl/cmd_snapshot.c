/*
 * kvctl snapshot save|status|restore (etcdctl 3.4 snapshot_command.go and clientv3/snapshot).
 *
 * save: downloads Maintenance.Snapshot into <path>.part (libkvclient's kvc_snapshot, so h2c or
 *   TLS, with --user's token; --command-timeout bounds the whole download), fsyncs, verifies the
 *   trailing SHA-256 (etcdctl does not; kvctl refuses a download that fails it), renames to
 *   <path>; log lines on stderr, "Snapshot saved at <path>" on stdout, as etcdctl.
 * status: reads a kvd snapshot (an LMDB file + SHA-256, mvcc/snapshot.h) and prints hash,
 *   revision, total keys, total size in etcdctl's simple/json/table formats. The hash is kvd's
 *   Maintenance.Hash of the store the snapshot was taken from.
 * restore: verifies the SHA-256 (refuses a corrupt file; --skip-hash-check as etcdctl for a
 *   file without a trailer, e.g. a copied data.mdb), then builds --data-dir (<name>.etcd by
 *   default; must not exist) with the keys, revisions, compaction point and leases, without the
 *   old member identity and alarms: kvd started there with the new --name/--initial-cluster/
 *   --initial-cluster-token computes and stores new member and cluster ids.
 */
#include "kvctl.h"
#include "out.h"
#include "table.h"

#include "mvcc/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* snapshot save's chunk sink: the blobs go to the .part file as they arrive. */
struct save_sink {
    int fd;
    int werrno; /* write(2) failure, 0 = none */
};

static int save_chunk(void *arg, const uint8_t *blob, size_t len, uint64_t remaining)
{
    struct save_sink *s = arg;
    (void)remaining;
    while (len) {
        ssize_t w = write(s->fd, blob, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            s->werrno = errno;
            return -1;
        }
        blob += w;
        len -= (size_t)w;
    }
    return 0;
}

/* etcdctl's text for a failed download: a gRPC status as grpc-go prints it, an expired
 * command timeout as "context deadline exceeded", a connection failure as its reason. */
static void save_err_text(const kvc_error *e, char *buf, size_t len)
{
    if (e->code == KVC_DEADLINE_EXCEEDED)
        snprintf(buf, len, "context deadline exceeded");
    else if (strncmp(e->message, "kvclient: ", 10) == 0)
        snprintf(buf, len, "%s", e->message);
    else
        snprintf(buf, len, "rpc error: code = %s desc = %s", kvctl_code_name(e->code), e->message);
}

static int snapshot_save(struct kvctl *k, const char *path)
{
    if (k->n_endpoints != 1) {
        char list[1024] = "";
        size_t o = 0;
        for (size_t i = 0; i < k->n_endpoints && o < sizeof list; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? " " : "", k->endpoints[i]);
        return kvctl_fail(KVCTL_EXIT_BAD_FEATURE,
                          "snapshot must be requested to one selected node, not multiple [%s]",
                          list);
    }
    char part[4096];
    if ((size_t)snprintf(part, sizeof part, "%s.part", path) >= sizeof part)
        return kvctl_fail(KVCTL_EXIT_ERROR, "path too long");
    int xrc = 0;
    kvc_client *c = kvctl_client(k, &xrc);
    if (!c)
        return xrc;
    unlink(part);
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "could not open %s (%s)", part, strerror(errno));
    fprintf(
        stderr,
        "{\"level\":\"info\",\"ts\":%.7f,\"msg\":\"created temporary db file\",\"path\":\"%s\"}\n",
        now_s(), part);
    fprintf(stderr,
            "{\"level\":\"info\",\"ts\":%.7f,\"msg\":\"fetching snapshot\",\"endpoint\":\"%s\"}\n",
            now_s(), k->endpoints[0]);
    double t0 = mono_s();
    uint64_t bytes = 0;
    char err[9000], msg[512];
    int64_t data_len = 0;
    struct save_sink sink = {.fd = fd, .werrno = 0};
    kvc_error e = {0};
    /* As before the library call: --command-timeout bounds the whole download. */
    int rc = kvc_snapshot(c, save_chunk, &sink, k->command_timeout_ms, &bytes, &e);
    if (rc != 0 && sink.werrno)
        snprintf(err, sizeof err, "write %s: %s", part, strerror(sink.werrno));
    else if (rc != 0)
        save_err_text(&e, err, sizeof err);
    if (rc == 0 && fsync(fd) < 0) {
        snprintf(err, sizeof err, "fsync %s: %s", part, strerror(errno));
        rc = -1;
    }
    close(fd);
    if (rc == 0 && kv_snapshot_file_verify(part, &data_len, msg, sizeof msg) < 0) {
        snprintf(err, sizeof err, "%s", msg);
        rc = -1;
    }
    if (rc == 0 && rename(part, path) < 0) {
        snprintf(err, sizeof err, "could not rename %s to %s (%s)", part, path, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        unlink(part);
        return kvctl_fail(KVCTL_EXIT_INTERRUPTED, "%s", err);
    }
    char hs[32];
    kvctl_humanize_bytes(hs, sizeof hs, bytes);
    fprintf(stderr,
            "{\"level\":\"info\",\"ts\":%.7f,\"msg\":\"fetched snapshot\",\"endpoint\":\"%s\","
            "\"size\":\"%s\",\"took\":%.9f}\n",
            now_s(), k->endpoints[0], hs, mono_s() - t0);
    fprintf(stderr, "{\"level\":\"info\",\"ts\":%.7f,\"msg\":\"saved\",\"path\":\"%s\"}\n", now_s(),
            path);
    printf("Snapshot saved at %s\n", path);
    return 0;
}

static int snapshot_status(struct kvctl *k, const char *path)
{
    kv_snapshot_status st;
    char msg[512];
    if (kv_snapshot_file_status(path, &st, msg, sizeof msg) < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", msg);
    char hash[16], rev[32], keys[32], size[32];
    snprintf(hash, sizeof hash, "%x", st.hash);
    snprintf(rev, sizeof rev, "%" PRId64, st.revision);
    snprintf(keys, sizeof keys, "%" PRIu64, st.total_keys);
    kvctl_humanize_bytes(size, sizeof size, (uint64_t)st.total_size);
    switch (k->format) {
    case KVCTL_FMT_SIMPLE:
        printf("%s, %s, %s, %s\n", hash, rev, keys, size);
        return 0;
    case KVCTL_FMT_JSON:
        printf("{\"hash\":%" PRIu32 ",\"revision\":%" PRId64 ",\"totalKey\":%" PRIu64
               ",\"totalSize\":%" PRId64 "}\n",
               st.hash, st.revision, st.total_keys, st.total_size);
        return 0;
    case KVCTL_FMT_TABLE: {
        static const char *const hdr[] = {"hash", "revision", "total keys", "total size"};
        const char *const row[] = {hash, rev, keys, size};
        struct kvctl_table t;
        struct kvctl_buf b = {0};
        if (kvctl_table_init(&t, hdr, 4) < 0 || kvctl_table_add(&t, row) < 0)
            return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
        kvctl_table_render(&t, &b);
        kvctl_buf_write(&b, stdout);
        kvctl_buf_free(&b);
        kvctl_table_free(&t);
        return 0;
    }
    default:
        return kvctl_unsupported_format(k);
    }
}

typedef struct restore_opts {
    const char *data_dir, *name, *initial_cluster, *token, *peer_urls;
    bool skip_hash_check;
} restore_opts;

/* etcd: the member's --initial-advertise-peer-urls must be its entries in --initial-cluster. */
static int check_cluster(const restore_opts *o, char *err, size_t errlen)
{
    size_t nl = strlen(o->name);
    const char *p = o->initial_cluster;
    int found = 0;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq == NULL) {
            snprintf(err, errlen, "invalid --initial-cluster entry \"%.*s\"", (int)len, p);
            return -1;
        }
        if ((size_t)(eq - p) == nl && memcmp(p, o->name, nl) == 0) {
            found = 1;
            size_t ul = len - (size_t)(eq + 1 - p);
            char url[512];
            snprintf(url, sizeof url, "%.*s", (int)(ul < 511 ? ul : 511), eq + 1);
            if (strstr(o->peer_urls, url) == NULL) {
                snprintf(err, errlen,
                         "--initial-cluster has %s=%.*s but missing from "
                         "--initial-advertise-peer-urls=%s",
                         o->name, (int)ul, eq + 1, o->peer_urls);
                return -1;
            }
        }
        p += len;
        if (*p == ',')
            p++;
    }
    if (!found) {
        snprintf(err, errlen,
                 "couldn't find local name \"%s\" in the initial cluster configuration", o->name);
        return -1;
    }
    return 0;
}

static int snapshot_restore(const restore_opts *o, const char *path)
{
    char err[600], dd[4096];
    const char *dir = o->data_dir;
    if (dir == NULL || *dir == '\0') {
        snprintf(dd, sizeof dd, "%s.etcd", o->name);
        dir = dd;
    }
    if (check_cluster(o, err, sizeof err) < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", err);
    if (access(dir, F_OK) == 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "data-dir \"%s\" exists", dir);
    int64_t len = 0;
    int rc = kv_snapshot_file_verify(path, &len, err, sizeof err);
    if (rc == -ENODATA && o->skip_hash_check) {
        FILE *f = fopen(path, "rb");
        if (f == NULL || fseeko(f, 0, SEEK_END) != 0)
            rc = -errno;
        else
            len = ftello(f), rc = 0;
        if (f)
            fclose(f);
        if (rc < 0)
            return kvctl_fail(KVCTL_EXIT_ERROR, "%s: %s", path, strerror(-rc));
    } else if (rc == -ENODATA) {
        return kvctl_fail(KVCTL_EXIT_ERROR, "snapshot missing hash but --skip-hash-check=false");
    } else if (rc < 0) {
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", err);
    }
    fprintf(stderr,
            "{\"level\":\"info\",\"ts\":%.7f,\"msg\":\"restoring snapshot\",\"path\":\"%s\","
            "\"data-dir\":\"%s\",\"name\":\"%s\",\"initial-cluster-token\":\"%s\"}\n",
            now_s(), path, dir, o->name, o->token);
    if (kv_snapshot_restore_dir(path, len, dir, err, sizeof err) < 0)
        return kvctl_fail(KVCTL_EXIT_ERROR, "%s", err);
    fprintf(stderr,
            "{\"level\":\"info\",\"ts\":%.7f,\"msg\":\"restored snapshot\",\"path\":\"%s\","
            "\"data-dir\":\"%s\"}\n",
            now_s(), path, dir);
    return 0;
}

int kvctl_cmd_snapshot(struct kvctl *k, int argc, char **argv)
{
    restore_opts o = {.data_dir = "",
                      .name = "default",
                      .initial_cluster = "default=http://localhost:2380",
                      .token = "etcd-cluster",
                      .peer_urls = "http://localhost:2380"};
    const char *wal_dir = "";
    struct kvctl_flag fl[] = {
        {"data-dir", 0, KVCTL_FLAG_STRING, &o.data_dir, false},
        {"wal-dir", 0, KVCTL_FLAG_STRING, &wal_dir, false},
        {"name", 0, KVCTL_FLAG_STRING, &o.name, false},
        {"initial-cluster", 0, KVCTL_FLAG_STRING, &o.initial_cluster, false},
        {"initial-cluster-token", 0, KVCTL_FLAG_STRING, &o.token, false},
        {"initial-advertise-peer-urls", 0, KVCTL_FLAG_STRING, &o.peer_urls, false},
        {"skip-hash-check", 0, KVCTL_FLAG_BOOL, &o.skip_hash_check, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    static const char *const subs[] = {"save", "status", "restore"};
    int sub = np >= 2 ? kvctl_match(pos[1], subs, 3) : -1;
    if (sub < 0) {
        rc = kvctl_group_help("snapshot", np >= 2 ? pos[1] : NULL);
        goto out;
    }
    if (np != 3) {
        static const char *const msgs[] = {"snapshot save expects one argument",
                                           "snapshot status requires exactly one argument",
                                           "snapshot restore requires exactly one argument"};
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "%s", msgs[sub]);
        goto out;
    }
    if (sub == 0)
        rc = snapshot_save(k, pos[2]);
    else if (sub == 1)
        rc = snapshot_status(k, pos[2]);
    else if (wal_dir && *wal_dir)
        rc = kvctl_fail(KVCTL_EXIT_BAD_FEATURE, "kvctl: --wal-dir is not used by kvd");
    else
        rc = snapshot_restore(&o, pos[2]);
out:
    free(pos);
    return rc;
}
