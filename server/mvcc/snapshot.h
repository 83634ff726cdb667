/*
 * snapshot: consistent copies of the store for Maintenance.Snapshot, the whole-store hash of
 * Maintenance.Hash, and the offline helpers `kvctl snapshot status|restore` use.
 *
 * Snapshot file format (Maintenance.Snapshot): an etcd 3.4 snapshot, a bbolt file in etcd's
 * bucket layout (kv_store_snapshot_bbolt, snapshot_bbolt.c), followed by the SHA-256 (32
 * bytes) of those bytes; bbolt files are whole pages, so size % 512 == 32 tells a file with
 * its checksum, as etcd's restore checks. etcdctl's `snapshot status|restore` read it; kvctl's
 * read it and etcd's (snapshot_import.c). Older kvd versions streamed an LMDB copy (the bytes
 * of data.mdb from mdb_env_copyfd2; peer catch-up snapshots are such copies): kvctl's status
 * and restore still read those (kvd's Hash as the status hash).
 *
 * Hash (kvd's definition; etcd's is a CRC-32C over bbolt's buckets and etcdctl only prints
 * it): CRC-32C (Castagnoli) over the databases "meta", "rev", "kidx", "lease", "lease_keys",
 * "alarm", in that order, each contributing its name, then every record in key order (for
 * dupsort databases every duplicate) as key then value. The meta records that are per member
 * or per process ("identity", "state" = applied index, "cmpct" = physical compaction
 * progress) are skipped. A snapshot's `kvctl snapshot status` hash equals the Hash answered
 * at the revision it was taken (same records, same function).
 *
 * Threads: kv_store_hash_all uses its own read transaction (any thread, concurrently with
 * writes; it waits for a defragment swap like the other readers).
 * The kv_snapshot_file_* functions work on files only (no store open), for kvctl.
 * Return values: 0 or a negative errno (-EBADMSG: not a kvd snapshot / checksum mismatch).
 */
#ifndef KV_MVCC_SNAPSHOT_H
#define KV_MVCC_SNAPSHOT_H

#include "mvcc/store.h"

#include <stdint.h>

#define KV_SNAPSHOT_SHA_LEN 32

/* The committed store as an etcd 3.4 backend file (bbolt, no trailer) written to fd (a regular
 * file open for writing, at offset 0) from one read transaction (snapshot_bbolt.c; layout in
 * docs/snapshots.md); *size gets its bytes. Memory: bounded buffers (bbolt/bbolt.h). Blocks
 * for the copy: call off the loop. */
int kv_store_snapshot_bbolt(kv_store *s, int fd, int64_t *size);

/* Hash (above) of the committed store; *revision gets its revision. Any thread. */
int kv_store_hash_all(kv_store *s, uint32_t *hash, int64_t *revision);

typedef struct kv_snapshot_status {
    uint32_t hash;
    int64_t revision;
    uint64_t total_keys; /* records in all databases (as etcd counts bbolt keys) */
    int64_t total_size;  /* LMDB data size: (last page + 1) * page size */
    int has_sha;         /* the file ends with its SHA-256 */
} kv_snapshot_status;

/* Verifies the trailing SHA-256 of a snapshot file: 0 if it matches, -EBADMSG if it does not
 * (msg explains), -ENOENT/-EIO... on I/O errors. *data_len gets the size without the trailer.
 * A file without a trailer (size % 512 != 32) gives -ENODATA. Streams the file (O(1) memory). */
int kv_snapshot_file_verify(const char *path, int64_t *data_len, char *msg, size_t msglen);

/* Opens the snapshot file read-only (no lock file) and fills *st. */
int kv_snapshot_file_status(const char *path, kv_snapshot_status *st, char *msg, size_t msglen);

/* Creates the restore's data dir (0700). 0, or a negative errno with msg set ("data-dir \"<dir>\"
 * exists" for -EEXIST, as etcdctl). Shared by both restores (snapshot.c, snapshot_import.c). */
int kv_snapshot_mkdir(const char *dir, char *msg, size_t msglen);

/* Restore: copies the first data_len bytes of the snapshot into <dir>/data.mdb (dir must not
 * exist; it is created 0700), fsyncs, then drops the member identity record (meta "identity"),
 * every alarm and the membership table (mvcc/members.h), so that kvd started on dir stores the
 * ids and members computed from its own flags (a new member of a new cluster). Keys, revisions,
 * compaction point and leases are kept. */
int kv_snapshot_restore_dir(const char *snap, int64_t data_len, const char *dir, char *msg,
                            size_t msglen);

/* etcd 3.4 snapshots (bbolt files, snapshot_import.c). is_bbolt: 1 when a bbolt meta magic
 * is where a meta page sits. status: etcdctl's `snapshot status` figures (hash: CRC-32C over
 * every bucket name, key and value; revision: the last "key" record's). restore_dir: dir must
 * not exist; a kvd data dir with the snapshot's keyspace, compaction point, leases, users and
 * roles; nothing is left behind on failure. -EBADMSG with a message for a corrupt file. */
int kv_snapshot_is_bbolt(const char *path);
int kv_bbolt_snapshot_status(const char *path, int64_t len, kv_snapshot_status *st, char *msg,
                             size_t msglen);
int kv_bbolt_restore_dir(const char *snap, int64_t len, const char *dir, char *msg, size_t msglen);

#endif
