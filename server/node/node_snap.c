/*
 * node_snap.c: the raft log's lower end (issue 9, durable raft state).
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
 *  - install (worker, inside the ready's transaction): the state is copied from the received
 *    file (mvcc/restore.c) and the log records the snapshot, in one commit.
 */
#include "node/node_int.h"

#include "peer/peer_net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KV_CATCHUP_ENTRIES 5000u /* etcd 3.4: snapshot-catchup-entries */

/* Entries kept behind a compaction: etcd's 5000, or fewer with a small --snapshot-count. */
static uint64_t catchup(const kv_node *n)
{
    return n->snapshot_count < KV_CATCHUP_ENTRIES ? n->snapshot_count : KV_CATCHUP_ENTRIES;
}

int kv_node__seed_log(kv_node *n, const uint64_t *voters, size_t n_voters)
{
    if (!kv_raftlog_is_empty(n->log) || n->st.applied_index == 0)
        return 0;
    struct raft_snapshot_meta m;
    memset(&m, 0, sizeof(m));
    m.index = n->st.applied_index;
    m.term = 1;
    for (size_t i = 0; i < n_voters; i++)
        m.conf.voters[m.conf.n_voters++] = voters[i];
    struct raft_hard_state hs = {.term = 1, .vote = 0, .commit = m.index};
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

void kv_node__maybe_compact_log(kv_node *n)
{
    if (n->compact_log || n->st.applied_index < n->snap_index + n->snapshot_count + catchup(n))
        return;
    raft_index idx = n->st.applied_index - catchup(n);
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
    return kv_raftlog_set_snapshot(n->log, txn, m);
}

int kv_node__install_snapshot(kv_node *n, kv_store_batch *b, const struct raft_snapshot_meta *m,
                              const char *path)
{
    int rc = 0;
    if (path) {
        rc = kv_store_restore_from(n->store, b, path);
        if (rc < 0) {
            fprintf(stderr, "kvd: installing snapshot %s failed: %s\n", path, strerror(-rc));
            return rc;
        }
    } else {
        /* A snapshot message without a file: only the metadata (a leader whose state is not
         * ahead of ours). The state must already cover it. */
        kv_store_status ss;
        if (kv_store_get_status(n->store, &ss) == 0 && ss.applied_index < m->index) {
            fprintf(stderr, "kvd: snapshot at %llu arrived without its state file\n",
                    (unsigned long long)m->index);
            return -EBADMSG;
        }
    }
    return kv_raftlog_set_snapshot(n->log, kv_store_batch_txn(b), m);
}

/* ---- sending ---- */

typedef struct snap_send {
    uv_work_t req;
    kv_node *n;
    raft_id to;
    uint8_t *hdr; /* the encoded SNAPSHOT raft message */
    size_t hdr_len;
    char path[4096];
    int rc;
} snap_send;

static void report(kv_node *n, raft_id to, int failed)
{
    n->snap_report_pending = 1;
    n->snap_report_id = to;
    n->snap_report_failed = failed;
    n->snap_sending = 0;
    kv_node__kick(n);
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
            fprintf(stderr, "kvd: snapshot to %016llx failed: %s\n", (unsigned long long)s->to,
                    strerror(-status));
        }
        report(n, s->to, status != 0);
    }
    snap_free(s);
}

static void copy_work(uv_work_t *req)
{
    snap_send *s = req->data;
    int fd = open(s->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        s->rc = -errno;
        return;
    }
    int rc = mdb_env_copyfd2(kv_store_env(s->n->store), fd, MDB_CP_COMPACT);
    if (rc == 0 && fdatasync(fd) != 0)
        rc = errno;
    close(fd);
    s->rc = rc ? -rc : 0;
}

static void copy_done(uv_work_t *req, int status)
{
    snap_send *s = req->data;
    kv_node *n = s->n;
    int rc = status < 0 ? status : s->rc;
    if (n->closing || n->peers == NULL) {
        snap_free(s);
        return;
    }
    if (rc == 0)
        rc = kv_peer_net_send_snapshot(n->peers, s->to, s->hdr, s->hdr_len, s->path, on_sent, s);
    if (rc != 0) {
        fprintf(stderr, "kvd: snapshot to %016llx not sent: %s\n", (unsigned long long)s->to,
                strerror(-rc));
        report(n, s->to, 1);
        snap_free(s);
    }
}

void kv_node__send_snapshot(kv_node *n, const struct raft_msg *m)
{
    if (n->snap_dir == NULL || n->snap_sending) {
        /* one at a time; raft retries the follower after the report */
        if (!n->snap_sending)
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
}

void kv_node_set_snapshot_hook(kv_node *n, void (*fn)(void *arg), void *arg)
{
    n->snap_fn = fn;
    n->snap_arg = arg;
}
