/* etcd_datadir: adopts the data dir `etcdctl snapshot restore` wrote (contract:
 * etcd_datadir.h). */
#include "daemon/etcd_datadir.h"

#include "base/dir_sync.h"
#include "common/byteorder.h"
#include "common/msgf.h"
#include "common/varint.h"
#include "mvcc/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_WAL_FILES 4096
#define MAX_RECORD (64u << 20) /* etcd's segment size: no record is longer */

/* walpb.Record.type (etcd 3.4 wal/wal.go) */
enum { REC_METADATA = 1, REC_ENTRY = 2, REC_STATE = 3, REC_CRC = 4, REC_SNAPSHOT = 5 };
/* raftpb.EntryType */
enum { ENTRY_NORMAL = 0 };

typedef struct wal_scan {
    uint64_t entries, conf, writes; /* writes: normal entries that carry data */
    uint64_t last_write;            /* the index of the last of them */
    uint64_t commit;                /* the last hard state's */
} wal_scan;

/* The protobuf fields of msg kept by the callers: varints by number (1..4), and one bytes
 * field. Unknown fields are skipped; 0 or -EBADMSG. */
typedef struct pb_fields {
    uint64_t v[5];
    const uint8_t *bytes;
    size_t blen;
} pb_fields;

static int pb_parse(const uint8_t *p, size_t len, uint32_t bytes_field, pb_fields *out)
{
    const uint8_t *end = p + len;
    memset(out, 0, sizeof(*out));
    while (p < end) {
        uint64_t tag = 0, v = 0;
        size_t n = kv_varint_get(p, end, &tag);
        if (n == 0)
            return -EBADMSG;
        p += n;
        uint32_t field = (uint32_t)(tag >> 3);
        switch (tag & 7) {
        case 0:
            if ((n = kv_varint_get(p, end, &v)) == 0)
                return -EBADMSG;
            p += n;
            if (field < 5)
                out->v[field] = v;
            break;
        case 1:
            if (end - p < 8)
                return -EBADMSG;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return -EBADMSG;
            p += 4;
            break;
        case 2:
            if ((n = kv_varint_get(p, end, &v)) == 0 || v > (uint64_t)(end - p - (ptrdiff_t)n))
                return -EBADMSG;
            p += n;
            if (field == bytes_field) {
                out->bytes = p;
                out->blen = (size_t)v;
            }
            p += v;
            break;
        default:
            return -EBADMSG;
        }
    }
    return 0;
}

/* One walpb.Record {type = 1, crc = 2, data = 3}. */
static int scan_record(const uint8_t *rec, size_t len, wal_scan *w)
{
    pb_fields r, f;
    if (pb_parse(rec, len, 3, &r) < 0)
        return -EBADMSG;
    if (r.v[1] == REC_ENTRY) {
        /* raftpb.Entry {Type = 1, Term = 2, Index = 3, Data = 4} */
        if (pb_parse(r.bytes ? r.bytes : rec, r.bytes ? r.blen : 0, 4, &f) < 0)
            return -EBADMSG;
        w->entries++;
        if (f.v[1] != ENTRY_NORMAL) {
            w->conf++;
        } else if (f.blen > 0) {
            w->writes++;
            w->last_write = f.v[3];
        }
    } else if (r.v[1] == REC_STATE) {
        /* raftpb.HardState {Term = 1, Vote = 2, Commit = 3} */
        if (pb_parse(r.bytes ? r.bytes : rec, r.bytes ? r.blen : 0, 0, &f) < 0)
            return -EBADMSG;
        w->commit = f.v[3];
    }
    return 0;
}

/* Reads the records of one segment. A zero length (the preallocated tail) or a torn last record
 * ends it. */
static int scan_file(const char *path, wal_scan *w, char *msg, size_t msglen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        kv_msgf(msg, msglen, "open %s: %s", path, strerror(e));
        return -e;
    }
    uint8_t *buf = NULL;
    int rc = 0;
    for (;;) {
        uint8_t hdr[8];
        if (fread(hdr, 1, 8, f) != 8)
            break;
        uint64_t lf = kv_le64(hdr);
        if (lf == 0)
            break;
        /* etcd wal/encoder.go: the low 56 bits are the length; bit 63 set means the top byte's
         * low 3 bits count the padding to 8 bytes */
        uint64_t dlen = lf & ((1ull << 56) - 1);
        uint64_t pad = (lf >> 63) ? (lf >> 56) & 7 : 0;
        if (dlen > MAX_RECORD) {
            kv_msgf(msg, msglen, "%s: a record of %llu bytes: not an etcd WAL", path,
                    (unsigned long long)dlen);
            rc = -EBADMSG;
            break;
        }
        uint8_t *nb = realloc(buf, (size_t)(dlen + pad) + 1);
        if (nb == NULL) {
            rc = -ENOMEM;
            kv_msgf(msg, msglen, "out of memory reading %s", path);
            break;
        }
        buf = nb;
        if (fread(buf, 1, (size_t)(dlen + pad), f) != (size_t)(dlen + pad))
            break; /* torn tail */
        if (scan_record(buf, (size_t)dlen, w) < 0) {
            kv_msgf(msg, msglen, "%s: a record that is not a walpb.Record", path);
            rc = -EBADMSG;
            break;
        }
    }
    free(buf);
    fclose(f);
    return rc;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every segment of dir in name order (etcd names them seq-index.wal). */
static int scan_wal(const char *dir, wal_scan *w, size_t *files, char *msg, size_t msglen)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        int e = errno;
        kv_msgf(msg, msglen, "%s: %s", dir, strerror(e));
        return -e;
    }
    char **names = calloc(MAX_WAL_FILES, sizeof(*names));
    size_t n = 0;
    int rc = names ? 0 : -ENOMEM;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".wal") != 0)
            continue;
        if (n == MAX_WAL_FILES) {
            kv_msgf(msg, msglen, "%s: more than %d segments", dir, MAX_WAL_FILES);
            rc = -E2BIG;
        } else if ((names[n] = strdup(e->d_name)) == NULL) {
            rc = -ENOMEM;
        } else {
            n++;
        }
    }
    closedir(d);
    if (rc == 0)
        qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, names[i]) >= sizeof(path))
            rc = -ENAMETOOLONG;
        else
            rc = scan_file(path, w, msg, msglen);
    }
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    if (rc == -ENOMEM)
        kv_msgf(msg, msglen, "out of memory reading %s", dir);
    *files = n;
    return rc;
}

/* Removes the work dir's files and the dir (an interrupted import's, or this one's). */
static void remove_work(const char *tmp)
{
    DIR *d = opendir(tmp);
    if (d == NULL)
        return;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(p, sizeof(p), "%s/%s", tmp, e->d_name) < sizeof(p))
            unlink(p);
    }
    closedir(d);
    rmdir(tmp);
}

int kv_etcd_datadir_adopt(const char *dir, char *msg, size_t msglen)
{
    char mdb[PATH_MAX], db[PATH_MAX], wal[PATH_MAX], tmp[PATH_MAX], tmdb[PATH_MAX];
    if ((size_t)snprintf(mdb, sizeof(mdb), "%s/data.mdb", dir) >= sizeof(mdb) ||
        (size_t)snprintf(db, sizeof(db), "%s/member/snap/db", dir) >= sizeof(db) ||
        (size_t)snprintf(wal, sizeof(wal), "%s/member/wal", dir) >= sizeof(wal) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s/kvd-import.tmp", dir) >= sizeof(tmp) ||
        (size_t)snprintf(tmdb, sizeof(tmdb), "%s/data.mdb", tmp) >= sizeof(tmdb)) {
        kv_msgf(msg, msglen, "data dir path too long: %s", dir);
        return -ENAMETOOLONG;
    }
    struct stat st;
    if (access(mdb, F_OK) == 0 || stat(db, &st) != 0)
        return 0;
    wal_scan w;
    memset(&w, 0, sizeof(w));
    size_t files = 0;
    char m[512] = "";
    int rc = scan_wal(wal, &w, &files, m, sizeof(m));
    if (rc < 0) {
        kv_msgf(msg, msglen,
                "%s holds an etcd member (member/snap/db) whose WAL cannot be read: %s", dir, m);
        return rc;
    }
    if (files == 0 || w.entries == 0) {
        kv_msgf(msg, msglen,
                "%s holds an etcd member (member/snap/db) without a WAL; kvd adopts the data dir "
                "`etcdctl snapshot restore` writes, or restore the db with `kvctl snapshot "
                "restore` (README.md \"Moving from etcd, and back\")",
                dir);
        return -EINVAL;
    }
    if (w.writes > 0) {
        kv_msgf(msg, msglen,
                "%s holds a live etcd member: its WAL has %llu write(s) (the last at index %llu) "
                "that etcd replays into its db at start, and kvd does not read etcd's WAL. Take "
                "`etcdctl snapshot save` from the running etcd and restore it (`etcdctl snapshot "
                "restore` or `kvctl snapshot restore`) into a new data dir for kvd (README.md "
                "\"Moving from etcd, and back\"); etcd's files were not changed",
                dir, (unsigned long long)w.writes, (unsigned long long)w.last_write);
        return -EINVAL;
    }
    remove_work(tmp); /* an interrupted import's */
    rc = kv_bbolt_restore_dir(db, (int64_t)st.st_size, tmp, m, sizeof(m));
    if (rc < 0) {
        kv_msgf(msg, msglen, "importing the etcd db: %s", m);
        return rc;
    }
    if (rename(tmdb, mdb) < 0) {
        rc = -errno;
        kv_msgf(msg, msglen, "importing the etcd db: rename %s: %s", tmdb, strerror(errno));
        remove_work(tmp);
        return rc;
    }
    remove_work(tmp);
    if ((rc = kv_dir_fsync(dir)) < 0) {
        kv_msgf(msg, msglen, "importing the etcd db: fsync %s: %s", dir, strerror(-rc));
        return rc;
    }
    kv_msgf(msg, msglen,
            "adopted the data dir etcdctl snapshot restore wrote: imported member/snap/db (%lld "
            "bytes; its WAL holds %llu membership entries, commit %llu); the members come from "
            "the flags; member/ is left as it was",
            (long long)st.st_size, (unsigned long long)w.conf, (unsigned long long)w.commit);
    return 1;
}
