/*
 * node_snap.c: the raft log's lower end (durable raft state).
 *
 *  - seed: a data directory written before raft was wired in (or restored by `kvctl snapshot
 *    restore`) has state but no log: the log starts with a snapshot record at the applied
 *    index, so raft never asks for entries the state already holds.
 *  - compaction: every snapshot_count applied entries the log's prefix goes (raft_compact()
 *    gives the snapshot meta; the deletion commits with the next ready). The last
 *    min(5000, snapshot_count) entries stay so a follower slightly behind still gets entries.
 *  - send: a follower that needs entries the log no longer has gets the state itself: a
 *    compacted copy of the LMDB environment (mdb_env_copyfd2 on a worker thread, into
 *    <snap_dir>), streamed by the peer transport on its own HTTP/2 stream, never held in
 *    memory. The copy holds state at an applied index >= the snapshot's index; the entries in
 *    between are skipped by the store's apply (index <= applied).
 *  - install (worker, then loop): the received file IS a complete LMDB data file. Its
 *    per-member records (identity, raft log: snapshot meta, hard state, the ready's new
 *    entries) are rewritten in one small transaction of that file, it is synced and renamed
 *    over data.mdb (mvcc/install.c; rename is the commit point), and the loop reopens the
 *    store and the log on it, as Defragment does. No transaction grows with the state.
 *  - bounds: one send per peer in flight, one copy at a time; a failed send backs off (1 s
 *    doubling to 60 s) before the next copy (kvd_snapshot_send_failures_total).
 */
#include "node/node_int.h"

#include "peer/peer_net.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KV_CATCHUP_ENTRIES 5000u /* etcd 3.4: snapshot-catchup-entries */

/* Entries kept behind a compaction: etcd's 5000, or fewer with a small --snapshot-count. */
static uint64_t catchup(const kv_node *n)
{
    return n->snapshot_count < KV_CATCHUP_ENTRIES ? n->snapshot_count : KV_CATCHUP_ENTRIES;
}

void kv_node__seed_meta(const kv_node *n, const uint64_t *voters, size_t n_voters,
                        struct raft_snapshot_meta *m, struct raft_hard_state *hs)
{
    memset(m, 0, sizeof(*m));
    m->index = n->st.applied_index;
    m->term = 1;
    for (size_t i = 0; i < n_voters; i++)
        m->conf.voters[m->conf.n_voters++] = voters[i];
    *hs = (struct raft_hard_state){.term = 1, .vote = 0, .commit = m->index};
}

int kv_node__seed_log(kv_node *n, const uint64_t *voters, size_t n_voters)
{
    if (!kv_raftlog_is_empty(n->log) || n->st.applied_index == 0)
        return 0;
    struct raft_snapshot_meta m;
    struct raft_hard_state hs;
    kv_node__seed_meta(n, voters, n_voters, &m, &hs);
    kv_store_batch *b;
    int rc = kv_store_batch_begin(n->store, &b);
    if (rc < 0)
        return rc;
    MDB_txn *txn = kv_store_batch_txn(b);
    if ((rc = kv_raftlog_set_snapshot(n->log, txn, &m)) < 0 ||
        (rc = kv_raftlog_set_hard_state(n->log, txn, &hs)) < 0) {
        kv_store_batch_abort(n->store, b);
        return rc;
    }
    rc = kv_store_batch_commit(n->store, b);
    if (rc == 0) {
        n->snap_index = m.index;
        fprintf(stderr, "kvd: raft log started at applied index %llu (existing state)\n",
                (unsigned long long)m.index);
    }
    return rc;
}

void kv_node__log_measure(kv_node *n)
{
    raft_index first, last;
    uint64_t bytes;
    if (n->log && kv_raftlog_stats(n->log, &first, &last, &bytes) == 0) {
        n->log_db_bytes = bytes;
        n->log_bytes = bytes;
    }
    if (n->wal) { /* the log is the WAL; data.mdb holds only its snapshot meta */
        struct kv_wal_stats ws;
        kv_wal_stats(n->wal, &ws);
        n->log_bytes = ws.bytes;
    }
    kv_metric_set(n->m_log_bytes, (double)n->log_bytes);
}

int kv_node_log_admit(kv_node *n, size_t len)
{
    if (!n->max_log_bytes)
        return 0;
    uint64_t since = n->log_proposed - n->log_mark; /* proposed, not in the measured log yet */
    if (n->log_bytes + since + len <= n->max_log_bytes)
        return 0;
    kv_metric_inc(n->m_log_refused);
    return -EBUSY;
}

int64_t kv_node_state_bytes_in_use(kv_node *n)
{
    int64_t used = kv_store_db_size_in_use(n->store);
    int64_t log = n->log_db_bytes > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n->log_db_bytes;
    return used > log ? used - log : 0;
}

void kv_node__maybe_compact_log(kv_node *n)
{
    if (n->compact_log)
        return;
    /* By bytes: the log shares the data file with the state (docs/ARCHITECTURE.md, "Alarms,
     * quota and defragment"); past a quarter of --max-raft-log-bytes everything applied goes,
     * the catch-up entries too (a follower that needs them gets a snapshot), so that a client
     * writing one large entry after another is not refused. */
    int by_bytes = n->max_log_bytes && n->log_bytes > n->max_log_bytes / 4;
    if (!by_bytes && n->st.applied_index < n->snap_index + n->snapshot_count + catchup(n))
        return;
    raft_index idx = by_bytes ? n->st.applied_index : n->st.applied_index - catchup(n);
    if (idx > raft_applied_index(&n->raft))
        idx = raft_applied_index(&n->raft);
    if (idx <= n->snap_index)
        return;
    struct raft_snapshot_meta m;
    int rc = raft_compact(&n->raft, idx, &m);
    if (rc != 0)
        return; /* e.g. a configuration change above idx not applied yet: later */
    n->compact_meta = m;
    n->compact_log = 1;
    if (by_bytes) {
        n->log_compactions++;
        kv_metric_inc(n->m_log_early);
    }
}

/* A member joins with an empty log and a bootstrap configuration that is not the cluster's:
 * it must start from a snapshot (whose meta carries the configuration). Compacting the log up
 * to what is applied makes raft send one. */
void kv_node__compact_for_join(kv_node *n)
{
    raft_index idx = raft_applied_index(&n->raft);
    if (n->compact_log || idx <= n->snap_index)
        return;
    struct raft_snapshot_meta m;
    if (raft_compact(&n->raft, idx, &m) == 0) {
        n->compact_meta = m;
        n->compact_log = 1;
    }
}

int kv_node__persist_compaction(kv_node *n, MDB_txn *txn, const struct raft_snapshot_meta *m)
{
    if (n->wal) /* after this commit, synced: kv_node__wal_compacted */
        return 0;
    return kv_raftlog_set_snapshot(n->log, txn, m);
}

/* A snapshot message without a file: only the metadata (a leader whose state is not ahead of
 * ours), recorded in the ready's batch. The state must already cover it. */
int kv_node__install_snapshot(kv_node *n, kv_store_batch *b, const struct raft_snapshot_meta *m,
                              const char *path)
{
    if (path)
        return -EINVAL; /* kv_node__install_file */
    kv_store_status ss;
    if (kv_store_get_status(n->store, &ss) == 0 && ss.applied_index < m->index) {
        fprintf(stderr, "kvd: warning: snapshot at %llu arrived without its state file\n",
                (unsigned long long)m->index);
        return -EBADMSG;
    }
    return kv_raftlog_set_snapshot(n->log, kv_store_batch_txn(b), m);
}

/* Test hook (tests/cluster/test_snapshot.c): KVD_FAILPOINT_SNAPSHOT_INSTALL=<stage> kills the
 * process with SIGKILL at that stage of an install ("before-publish": the file is prepared
 * and synced, data.mdb not replaced yet; "after-publish": replaced, the environment not
 * reopened yet). Read at each install (worker thread; nobody calls setenv). */
static void failpoint(const char *stage)
{
    const char *fp = getenv("KVD_FAILPOINT_SNAPSHOT_INSTALL");
    if (fp && strcmp(fp, stage) == 0) {
        fprintf(stderr, "kvd: warning: failpoint: killed %s the snapshot install\n", stage);
        raise(SIGKILL);
    }
}

/* The whole ready goes into the received file, in ONE small write transaction of that file:
 * this member's identity, the raft log reset to the snapshot (meta, hard state, the ready's
 * new entries). A ready with a snapshot has no committed entries (raft/src/ready.c), and a
 * pending log compaction is superseded by the snapshot. Then the file is synced and renamed
 * over data.mdb: the commit point. Nothing here grows with the state. */
int kv_node__install_file(kv_node *n, ready_work *w)
{
    const struct raft_snapshot_meta *m = &w->rd.snapshot.meta;
    struct raft_hard_state hs = w->rd.hs_changed ? w->rd.hs : n->persisted_hs;
    if (hs.commit < m->index)
        hs.commit = m->index;
    kv_store_install *in = NULL;
    int rc = kv_store_install_begin(n->store, w->snap_path, &in);
    if (rc == 0)
        rc = kv_raftlog_install_into(kv_store_install_txn(in), m, &hs, w->rd.entries,
                                     n->wal ? 0 : w->rd.n_entries); /* WAL mode: the WAL's */
    if (rc < 0) {
        kv_store_install_abort(in);
        goto fail;
    }
    if ((rc = kv_store_install_commit(n->store, in)) < 0)
        goto fail;
    failpoint("before-publish");
    if ((rc = kv_store_install_publish(n->store, w->snap_path, &w->old_fd)) < 0)
        goto fail;
    failpoint("after-publish");
    /* WAL mode: the rename above was the commit point; a crash before this sync is finished
     * at the next start (node_log.c finish_install: data.mdb's log meta is ahead). */
    if (n->wal && (rc = kv_node__wal_install(n, m, &hs, w->rd.entries, w->rd.n_entries)) < 0)
        goto fail;
    w->install = 1;
    w->has_compact = 0;
    w->rd.hs_changed = true;
    w->rd.hs = hs;
    w->durable = 1;
    w->flushes = kv_store_commit_flushes(n->store, 0);
    return 0;
fail:
    fprintf(stderr, "kvd: error: installing snapshot %s failed: %s\n", w->snap_path, strerror(-rc));
    return rc;
}

typedef struct close_work {
    uv_work_t req;
    int fd;
} close_work;

static void close_run(uv_work_t *req)
{
    close_work *c = req->data;
    close(c->fd); /* frees the replaced file's blocks: slow for a large file */
}

static void close_done(uv_work_t *req, int status)
{
    (void)status;
    free(req->data);
}

void kv_node__install_swap(kv_node *n, ready_work *w)
{
    /* A ready with a snapshot references no log data (no committed entries; the follower's
     * messages after it carry none): the log's read transactions can go. */
    kv_raftlog_detach(n->log);
    kv_store_install_swap(n->store); /* aborts if the new file cannot be opened */
    int rc = kv_raftlog_reattach(n->log, kv_store_env(n->store));
    if (rc != 0) {
        fprintf(stderr,
                "kvd: fatal: reopening the raft log after a snapshot install failed: %s; "
                "stopping this member\n",
                strerror(-rc));
        exit(2);
    }
    kv_metric_inc(n->m_snap_installs);
    if (w->old_fd >= 0) {
        close_work *c = malloc(sizeof(*c));
        if (c) {
            c->req.data = c;
            c->fd = w->old_fd;
            if (uv_queue_work(n->loop, &c->req, close_run, close_done) != 0) {
                free(c);
                c = NULL;
            }
        }
        if (c == NULL)
            close(w->old_fd);
        w->old_fd = -1;
    }
}

/* ---- sending ---- */

/* Snapshot sends that failed back off: 1 s after the first failure, doubling, at most 60 s
 * (each attempt copies the whole state). Meanwhile raft's requests for that peer are
 * answered "failed" at once, without a copy. */
#define SNAP_BACKOFF_MIN_MS 1000u
#define SNAP_BACKOFF_MAX_MS 60000u

typedef struct snap_send {
    uv_work_t req;
    kv_node *n;
    raft_id to;
    uint8_t *hdr; /* the encoded SNAPSHOT raft message */
    size_t hdr_len;
    char path[4096];
    int rc;
} snap_send;

static snap_peer *peer_slot(kv_node *n, raft_id id)
{
    snap_peer *free_slot = NULL;
    for (size_t i = 0; i < RAFT_MAX_NODES; i++) {
        if (n->snap_peers[i].id == id)
            return &n->snap_peers[i];
        if (n->snap_peers[i].id == 0 && free_slot == NULL)
            free_slot = &n->snap_peers[i];
    }
    if (free_slot == NULL) { /* reuse an idle slot (a removed member's) */
        for (size_t i = 0; i < RAFT_MAX_NODES && free_slot == NULL; i++)
            if (!n->snap_peers[i].inflight && !n->snap_peers[i].report_pending)
                free_slot = &n->snap_peers[i];
        if (free_slot == NULL)
            return NULL;
    }
    memset(free_slot, 0, sizeof(*free_slot));
    free_slot->id = id;
    return free_slot;
}

static void report(kv_node *n, raft_id to, int failed)
{
    snap_peer *p = peer_slot(n, to);
    if (p) {
        p->report_pending = 1;
        p->report_failed = failed;
    }
    kv_node__kick(n);
}

/* The outcome of a send that was started (copy or stream). */
static void send_ended(kv_node *n, raft_id to, int failed)
{
    snap_peer *p = peer_slot(n, to);
    n->snap_sending = 0;
    if (p) {
        p->inflight = 0;
        if (failed) {
            p->failures++;
            uint32_t shift = p->failures - 1 < 6 ? p->failures - 1 : 6;
            uint64_t wait = (uint64_t)SNAP_BACKOFF_MIN_MS << shift;
            if (wait > SNAP_BACKOFF_MAX_MS)
                wait = SNAP_BACKOFF_MAX_MS;
            p->next_ms = kv_node__now_ms() + wait;
            fprintf(stderr,
                    "kvd: warning: snapshot to %016llx failed %u time(s) in a row; next attempt in "
                    "%llu ms at the earliest\n",
                    (unsigned long long)to, p->failures, (unsigned long long)wait);
        } else {
            p->failures = 0;
            p->next_ms = 0;
        }
    }
    if (failed)
        kv_metric_inc(n->m_snap_send_failed);
    report(n, to, failed);
}

void kv_node__snap_reports(kv_node *n)
{
    for (size_t i = 0; i < RAFT_MAX_NODES; i++) {
        snap_peer *p = &n->snap_peers[i];
        if (p->id && p->report_pending) {
            p->report_pending = 0;
            raft_report_snapshot(&n->raft, p->id, p->report_failed);
        }
    }
}

static void snap_free(snap_send *s)
{
    unlink(s->path);
    free(s->hdr);
    free(s);
}

static void on_sent(void *arg, int status)
{
    snap_send *s = arg;
    kv_node *n = s->n;
    if (!n->closing) {
        if (status == 0) {
            n->snap_sends++;
            fprintf(stderr, "kvd: snapshot sent to %016llx\n", (unsigned long long)s->to);
        } else {
            fprintf(stderr, "kvd: warning: snapshot to %016llx failed: %s\n",
                    (unsigned long long)s->to, strerror(-status));
        }
        send_ended(n, s->to, status != 0);
    }
    snap_free(s);
}

/* Test hook (tests/cluster/test_snapshot.c): KVD_FAILPOINT_SNAPSHOT_COPY_DELAY_MS=N holds the
 * copy of a snapshot to send N ms (at most 60 s) on its worker, so that a test can stop the
 * member meanwhile. main() clears the variable without --enable-failpoints. */
static void copy_delay(void)
{
    const char *d = getenv("KVD_FAILPOINT_SNAPSHOT_COPY_DELAY_MS");
    long ms = d ? strtol(d, NULL, 10) : 0;
    if (ms <= 0 || ms > 60000)
        return;
    fprintf(stderr, "kvd: failpoint: snapshot copy held %ld ms\n", ms);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void copy_work(uv_work_t *req)
{
    snap_send *s = req->data;
    copy_delay();
    int fd = open(s->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        s->rc = -errno;
        return;
    }
    int rc = kv_store_copy_fd(s->n->store, fd, MDB_CP_COMPACT);
    if (rc == 0 && fdatasync(fd) != 0)
        rc = -errno;
    close(fd);
    s->rc = rc;
}

static void copy_done(uv_work_t *req, int status)
{
    snap_send *s = req->data;
    kv_node *n = s->n;
    int rc = status < 0 ? status : s->rc;
    n->snap_copying = 0;
    if (n->closing || n->peers == NULL) {
        snap_free(s);
        kv_node__maybe_free(n); /* a closing node waited for this copy */
        return;
    }
    if (rc == 0)
        rc = kv_peer_net_send_snapshot(n->peers, s->to, s->hdr, s->hdr_len, s->path, on_sent, s);
    if (rc != 0) {
        fprintf(stderr, "kvd: warning: snapshot to %016llx not sent: %s\n",
                (unsigned long long)s->to, strerror(-rc));
        send_ended(n, s->to, 1);
        snap_free(s);
    }
}

void kv_node__send_snapshot(kv_node *n, const struct raft_msg *m)
{
    snap_peer *p = peer_slot(n, m->to);
    if (p && p->inflight)
        return; /* one per peer: its outcome reports to raft */
    if (n->snap_dir == NULL || n->snap_sending || p == NULL) {
        /* one copy at a time: raft asks again after the report */
        report(n, m->to, 1);
        return;
    }
    if (p->failures && kv_node__now_ms() < p->next_ms) {
        kv_metric_inc(n->m_snap_send_deferred); /* backing off: no copy */
        report(n, m->to, 1);
        return;
    }
    snap_send *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        report(n, m->to, 1);
        return;
    }
    s->n = n;
    s->to = m->to;
    s->req.data = s;
    snprintf(s->path, sizeof(s->path), "%s/send-%016llx.mdb", n->snap_dir,
             (unsigned long long)m->to);
    if (kv_raft_msg_encode(m, &s->hdr, &s->hdr_len) != 0 ||
        uv_queue_work(n->loop, &s->req, copy_work, copy_done) != 0) {
        free(s->hdr);
        free(s);
        report(n, m->to, 1);
        return;
    }
    n->snap_sending = 1;
    n->snap_copying = 1;
    p->inflight = 1;
}

/* Start-up: metrics, and what a previous run left in snap_dir (snapshots received or being
 * received, copies being sent, install files never published: all superseded). */
void kv_node__snap_init(kv_node *n)
{
    if (n->metrics) {
        n->m_snap_send_failed = kv_metrics_counter(
            n->metrics, "kvd_snapshot_send_failures_total",
            "Snapshot sends to a follower that failed (each is retried with backoff).", NULL);
        n->m_snap_send_deferred = kv_metrics_counter(
            n->metrics, "kvd_snapshot_send_deferred_total",
            "Snapshot requests for a follower answered 'failed' at once (backoff after a "
            "failed send).",
            NULL);
        n->m_snap_installs = kv_metrics_counter(n->metrics, "kvd_snapshot_installs_total",
                                                "Snapshots from the leader installed.", NULL);
    }
    if (n->snap_dir == NULL)
        return;
    DIR *d = opendir(n->snap_dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char p[4096 + 256];
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        size_t l = strlen(nm);
        int ours = (strncmp(nm, "peer-", 5) == 0 && l > 5 && strcmp(nm + l - 5, ".snap") == 0) ||
                   strncmp(nm, ".peer-snap-", 11) == 0 ||
                   (strncmp(nm, "send-", 5) == 0 && l > 4 && strcmp(nm + l - 4, ".mdb") == 0);
        if (ours && (size_t)snprintf(p, sizeof(p), "%s/%s", n->snap_dir, nm) < sizeof(p))
            unlink(p);
    }
    closedir(d);
}

void kv_node_set_snapshot_hook(kv_node *n, void (*fn)(void *arg), void *arg)
{
    n->snap_fn = fn;
    n->snap_arg = arg;
}
