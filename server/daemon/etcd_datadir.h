/*
 * etcd_datadir: kvd started on the data dir `etcdctl snapshot restore` wrote.
 *
 * etcd's restore procedure ends with "start etcd on the restored data dir"; with kvd in its
 * place (the binary renamed), that dir holds etcd's layout, not kvd's:
 *   <dir>/member/snap/db     the bbolt file: keyspace, leases, users, roles
 *   <dir>/member/wal/ (.wal)  a WAL that holds only the membership (one ConfChange entry per
 *                            member of --initial-cluster) and a hard state committing them
 *   <dir>/member/snap/ (.snap) raft's snapshot of that membership
 * kv_etcd_datadir_adopt() imports member/snap/db as `kvctl snapshot restore` does (the
 * keyspace, revisions, compaction point, leases, users and roles; the members come from kvd's
 * own flags, as with any restored dir) into <dir>/data.mdb, and leaves member/ as it was, so
 * etcd can still start on the dir.
 *
 * Only that shape is adopted. A live etcd member's dir also holds writes in its WAL that its
 * db may not have yet (etcd replays them at start): its WAL has normal entries with data, and
 * kvd refuses it with what to do instead (`etcdctl snapshot save` from the running etcd, then
 * a restore) rather than lose them. The WAL is read record by record (length-prefixed
 * walpb.Record, etcd 3.4 wal/encoder.go); a torn last record ends the scan, as etcd's reader
 * tolerates it.
 *
 * Threads: main(), before the store is opened, with the data dir lock held.
 * Ownership: nothing retained. <dir>/kvd-import.tmp is the work dir; one left by an import
 * that was interrupted is removed first.
 */
#ifndef KV_ETCD_DATADIR_H
#define KV_ETCD_DATADIR_H

#include <stddef.h>

/* 0: nothing to do (kvd's data.mdb exists, or there is no member/snap/db). 1: imported; msg
 * says what. < 0: refused or failed (msg says why and what to do; nothing was changed). */
int kv_etcd_datadir_adopt(const char *dir, char *msg, size_t msglen);

#endif
