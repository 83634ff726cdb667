/*
 * node_log.c: where the member's raft log lives, and the WAL's share of a ready.
 *
 * Two logs, one seam (kv_node__log_storage and friends):
 *  - --experimental-wal=false: the log is in data.mdb (server/raftlog/), written in the same
 *    LMDB transaction as the apply; a ready that carries entries costs one synced LMDB commit
 *    (two flushes: data pages, then the meta page).
 *  - default (--experimental-wal): the log is in <data-dir>/wal (server/wal/). The worker writes
 * the ready's entries and hard state to the WAL with ONE fdatasync, sets w->persisted and wakes the
 * loop, which sends the append acknowledgements (rd.msgs_after) at once; the apply then commits to
 * LMDB with MDB_NOMETASYNC (integrity kept after a power loss, a lost commit rolls back and is
 * replayed from the WAL: raft starts at LMDB's applied index). data.mdb keeps only the snapshot
 * meta of its log (a received snapshot file carries it: the commit point of an install is the
 * file's rename, the WAL follows, and a start after a crash between the two finishes the install
 * here). A log compaction commits LMDB synced first, then the WAL's snapshot marker, then deletes
 * the segments below it: the WAL always holds every entry above LMDB's durable applied index.
 *
 * docs/raftlog.md ("Wiring it in") says what is done and what is not yet.
 */
#include "node/disk_failpoint.h"
#include "node/node_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

const struct raft_storage *kv_node__log_storage(kv_node *n)
{
    return n->wal ? kv_wal_storage(n->wal) : kv_raftlog_storage(n->log);
}

int kv_node__log_error(kv_node *n)
{
    return n->wal ? kv_wal_error(n->wal) : kv_raftlog_error(n->log);
}

void kv_node__log_end_cycle(kv_node *n)
{
    if (n->wal)
        kv_wal_end_cycle(n->wal);
    kv_raftlog_end_cycle(n->log);
}

void kv_node__log_close(kv_node *n)
{
    kv_wal_close(n->wal);
    n->wal = NULL;
    kv_raftlog_close(n->log);
    n->log = NULL;
}

/* The snapshot meta and hard state data.mdb's log holds. */
static int lmdb_meta(kv_node *n, struct raft_snapshot_meta *m, struct raft_hard_state *hs)
{
    const struct raft_storage *st = kv_raftlog_storage(n->log);
    struct raft_snapshot snap;
    int rc = st->snapshot(st->ctx, &snap);
    if (rc == 0)
        rc = st->initial_state(st->ctx, hs);
    kv_raftlog_end_cycle(n->log);
    if (rc == 0)
        *m = snap.meta;
    return rc;
}

/* data.mdb's log entries go once the WAL holds them: its snapshot meta and hard state stay
 * (a received snapshot file rewrites them; finish_install reads them). */
static int drop_lmdb_entries(kv_node *n)
{
    raft_index first, last;
    uint64_t bytes;
    struct raft_snapshot_meta m;
    struct raft_hard_state hs;
    int rc = kv_raftlog_stats(n->log, &first, &last, &bytes);
    if (rc < 0 || last < first)
        return rc;
    if ((rc = lmdb_meta(n, &m, &hs)) < 0)
        return rc;
    kv_raftlog_close(n->log);
    n->log = NULL;
    kv_store_batch *b;
    if ((rc = kv_store_batch_begin(n->store, &b)) < 0)
        return rc;
    rc = kv_raftlog_install_into(kv_store_batch_txn(b), &m, &hs, NULL, 0);
    if (rc < 0)
        kv_store_batch_abort(n->store, b);
    else
        rc = kv_store_batch_commit(n->store, b);
    int orc = kv_raftlog_open(&n->log, kv_store_env(n->store));
    if (rc == 0)
        fprintf(stderr, "kvd: data.mdb's raft log entries %llu-%llu dropped (the WAL holds them)\n",
                (unsigned long long)first, (unsigned long long)last);
    return rc < 0 ? rc : orc;
}

/* A snapshot install whose file replaced data.mdb but whose WAL marker a crash prevented:
 * data.mdb's log meta is ahead of the WAL's snapshot. The WAL takes it (and drops what it
 * contradicts), so raft starts at the installed state. */
static int finish_install(kv_node *n)
{
    struct raft_snapshot_meta m;
    struct raft_hard_state hs, whs;
    int rc = lmdb_meta(n, &m, &hs);
    if (rc < 0)
        return rc;
    const struct raft_storage *ws = kv_wal_storage(n->wal);
    struct raft_snapshot wsnap;
    rc = ws->snapshot(ws->ctx, &wsnap);
    if (rc == 0 && ws->initial_state(ws->ctx, &whs) != 0)
        memset(&whs, 0, sizeof(whs));
    kv_wal_end_cycle(n->wal);
    if (rc < 0 || m.index <= wsnap.meta.index)
        return rc;
    if (whs.term > hs.term) {
        hs.term = whs.term;
        hs.vote = whs.vote;
    }
    if (hs.commit < m.index)
        hs.commit = m.index;
    rc = kv_node__wal_install(n, &m, &hs, NULL, 0);
    if (rc == 0)
        fprintf(stderr,
                "kvd: finished the snapshot install a restart interrupted: the WAL starts after "
                "index %llu\n",
                (unsigned long long)m.index);
    return rc;
}

/* A data dir with state but no log (restored, adopted, or written before raft): the log starts
 * with a snapshot marker at the applied index, so raft never asks for what the state holds. */
static int seed_wal(kv_node *n, const uint64_t *voters, size_t n_voters)
{
    if (!kv_wal_is_empty(n->wal) || n->st.applied_index == 0)
        return 0;
    struct raft_snapshot_meta m;
    struct raft_hard_state hs;
    kv_node__seed_meta(n, voters, n_voters, &m, &hs);
    int rc = kv_node__wal_install(n, &m, &hs, NULL, 0);
    if (rc == 0) {
        n->snap_index = m.index;
        fprintf(stderr, "kvd: raft log started at applied index %llu (existing state)\n",
                (unsigned long long)m.index);
    }
    return rc;
}

uint64_t kv_node__log_budget(const kv_node *n, const kv_node_config *cfg)
{
    size_t quota = kv_store_quota(n->store);
    return cfg && cfg->max_log_bytes ? cfg->max_log_bytes : (kv_store_map_size(quota) - quota) / 4;
}

/* The active segment is never released (kv_wal_release keeps it), and a compaction by bytes
 * starts past a quarter of the budget (node_snap.c): a segment of at most an eighth of the
 * budget lets that compaction bring the log under it. With a segment larger than the budget
 * the log could not shrink below the active segment: every write refused, for ever. */
static uint64_t segment_bytes(const kv_node *n, const kv_node_config *cfg)
{
    uint64_t seg = cfg->wal_segment_bytes ? cfg->wal_segment_bytes : KV_WAL_DEFAULT_SEGMENT_BYTES;
    uint64_t budget = kv_node__log_budget(n, cfg);
    if (budget && seg > budget / 8) {
        if (cfg->wal_segment_bytes)
            fprintf(stderr,
                    "kvd: --wal-segment-bytes %llu is over an eighth of --max-raft-log-bytes "
                    "%llu: segments of %llu bytes\n",
                    (unsigned long long)seg, (unsigned long long)budget,
                    (unsigned long long)(budget / 8));
        seg = budget / 8;
    }
    return seg;
}

static int open_wal(kv_node *n, const kv_node_config *cfg)
{
    struct kv_wal_opts o = {.segment_bytes = segment_bytes(n, cfg),
                            .no_sync = cfg->unsafe_no_fsync};
    char err[512] = "";
    struct stat st;
    int rc = 0;
    if (stat(cfg->wal_dir, &st) != 0) {
        int empty = kv_raftlog_is_empty(n->log);
        if (empty < 0)
            return empty;
        if (!empty) { /* written with --experimental-wal=false: convert, once */
            rc = kv_wal_import(cfg->wal_dir, kv_raftlog_storage(n->log), &o, err, sizeof(err));
            kv_raftlog_end_cycle(n->log);
            if (rc < 0) {
                fprintf(stderr,
                        "kvd: refusing to start: moving the raft log from data.mdb to %s "
                        "failed: %s\n",
                        cfg->wal_dir, err[0] ? err : strerror(-rc));
                return rc;
            }
            fprintf(
                stderr,
                "kvd: the raft log moved from data.mdb to %s (its own WAL, --experimental-wal)\n",
                cfg->wal_dir);
        }
    }
    rc = kv_wal_open(&n->wal, cfg->wal_dir, &o, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvd: refusing to start: the raft log (%s): %s\n", cfg->wal_dir,
                err[0] ? err : strerror(-rc));
        return rc;
    }
    struct kv_wal_stats ws;
    kv_wal_stats(n->wal, &ws);
    if (ws.torn_seq)
        fprintf(stderr,
                "kvd: the WAL's last write was torn (segment %016llx, offset %llu): cut there; it "
                "was never acknowledged\n",
                (unsigned long long)ws.torn_seq, (unsigned long long)ws.torn_off);
    if ((rc = finish_install(n)) < 0 || (rc = drop_lmdb_entries(n)) < 0)
        fprintf(stderr, "kvd: refusing to start: the raft log (%s): %s\n", cfg->wal_dir,
                strerror(-rc));
    return rc;
}

int kv_node__log_open(kv_node *n, const kv_node_config *cfg, const uint64_t *voters,
                      size_t n_voters)
{
    int rc = kv_raftlog_open(&n->log, kv_store_env(n->store));
    if (rc < 0)
        return rc;
    struct stat st;
    if (cfg && cfg->wal_dir && !cfg->use_wal && stat(cfg->wal_dir, &st) == 0) {
        fprintf(stderr,
                "kvd: refusing to start: %s holds this member's raft log (written with "
                "--experimental-wal, the default); start kvd without --experimental-wal=false\n",
                cfg->wal_dir);
        rc = -EEXIST;
        goto fail;
    }
    if (cfg && cfg->wal_dir && cfg->use_wal)
        rc = open_wal(n, cfg);
    if (rc == 0)
        rc = n->wal ? seed_wal(n, voters, n_voters) : kv_node__seed_log(n, voters, n_voters);
    if (rc == 0)
        return 0;
fail:
    kv_node__log_close(n);
    return rc;
}

/* One sync; the fsyncs it issued are counted in w->wal_synced (when w). */
static int wal_sync(kv_node *n, ready_work *w)
{
    struct kv_wal_stats s0, s1;
    kv_wal_stats(n->wal, &s0);
    uint64_t t0 = uv_hrtime();
    int rc = kv_wal_sync(n->wal);
    kv_wal_stats(n->wal, &s1);
    int synced = (int)(s1.fsyncs - s0.fsyncs);
    if (w)
        w->wal_synced += synced;
    if (rc == 0 && synced) { /* etcd_disk_wal_fsync_duration_seconds: the log's flush */
        kv_node_observe_wal_fsync(n, (double)(uv_hrtime() - t0) / 1e9);
        rc = kv_disk_fp_commit(n->disk_fp, 1); /* tests: a slow or failing flush */
    }
    return rc;
}

int kv_node__wal_persist(kv_node *n, ready_work *w)
{
    struct raft_ready *rd = &w->rd;
    int rc = 0;
    if (rd->has_snapshot && !w->snap_path) {
        /* meta only (a leader whose state is not ahead of ours): the state must cover it */
        kv_store_status ss;
        if (kv_store_get_status(n->store, &ss) == 0 && ss.applied_index < rd->snapshot.meta.index) {
            fprintf(stderr, "kvd: warning: snapshot at %llu arrived without its state file\n",
                    (unsigned long long)rd->snapshot.meta.index);
            return -EBADMSG;
        }
        rc = kv_wal_set_snapshot(n->wal, &rd->snapshot.meta);
    }
    if (rc == 0 && rd->n_entries)
        rc = kv_wal_append(n->wal, rd->entries, rd->n_entries);
    if (rc == 0 && w->spec && rd->n_entries) {
        /* single voter: these entries are committed by this very flush; recording it keeps a
         * restart from handing them out again */
        rd->hs_changed = true;
        raft_index last = rd->entries[rd->n_entries - 1].index;
        if (rd->hs.commit < last)
            rd->hs.commit = last;
    }
    /* The hard state is written when its term or vote changed, or with entries (free: same
     * flush). A commit index alone is not (raft rebuilds it from the quorum): an apply-only
     * ready must not pay a WAL flush before its answers. */
    if (rc == 0 && rd->hs_changed &&
        (rd->n_entries || rd->has_snapshot || rd->hs.term != n->persisted_hs.term ||
         rd->hs.vote != n->persisted_hs.vote))
        rc = kv_wal_set_hard_state(n->wal, &rd->hs);
    if (rc == 0)
        rc = wal_sync(n, w);
    if (rc < 0)
        return rc;
    atomic_store_explicit(&w->persisted, 1, memory_order_release);
    if (rd->n_msgs_after && n->early_open)
        uv_async_send(&n->early_async); /* the loop sends them now (kv_node__on_early) */
    return 0;
}

int kv_node__wal_install(kv_node *n, const struct raft_snapshot_meta *m,
                         const struct raft_hard_state *hs, const struct raft_entry *e, size_t cnt)
{
    int rc = kv_wal_set_snapshot(n->wal, m);
    if (rc == 0)
        rc = kv_wal_set_hard_state(n->wal, hs);
    if (rc == 0 && cnt)
        rc = kv_wal_append(n->wal, e, cnt);
    if (rc == 0)
        rc = wal_sync(n, NULL);
    return rc;
}

int kv_node__wal_compacted(kv_node *n, const struct raft_snapshot_meta *m)
{
    int rc = kv_wal_set_snapshot(n->wal, m);
    if (rc == 0)
        rc = wal_sync(n, NULL);
    if (rc == 0) {
        int del = kv_wal_release(n->wal, m->index);
        rc = del < 0 ? del : 0;
    }
    return rc;
}
